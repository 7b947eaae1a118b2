/*
 * lintel: not from xfstests. xfstests generates include/config.h with
 * autoconf; this is the part of it that global.h and fsx.c read, as
 * configure would set it on Debian with only build-essential (glibc's
 * headers, no libaio, liburing or xfsprogs headers). See README.md.
 */
#define STDC_HEADERS 1
#define HAVE_ASSERT_H 1
#define HAVE_DIRENT_H 1
#define HAVE_ERRNO_H 1
#define HAVE_ERR_H 1
#define HAVE_LIBGEN_H 1
#define HAVE_MALLOC_H 1
#define HAVE_STDLIB_H 1
#define HAVE_STRING_H 1
#define HAVE_STRINGS_H 1
#define HAVE_SYS_FCNTL_H 1
#define HAVE_SYS_IOCTL_H 1
#define HAVE_SYS_MMAN_H 1
#define HAVE_SYS_PARAM_H 1
#define HAVE_SYS_STAT_H 1
#define HAVE_SYS_STATVFS_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SYS_TYPES_H 1
#define HAVE_SYS_WAIT_H 1
#define HAVE_UNISTD_H 1
/* fallocate(2) and its modes: compiled in, switched off by flags. */
#define HAVE_LINUX_FALLOC_H 1
/* copy_file_range(2): compiled in, switched off by a flag (-E). */
#define HAVE_COPY_FILE_RANGE 1
