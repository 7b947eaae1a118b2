//! Directories read as the kernel hands them out: `linux_dirent64` records
//! with the file system's own position cookies.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `getdents64(2)`: as many whole records as fit in `buf`, from the open
/// directory's position, which advances past them; 0 at the end. The
/// kernel refuses (`EINVAL`) a buffer too small for the next record.
pub fn getdents(dir: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`, which
    // is valid for writes of that length for the call's duration; `dir` is
    // an open descriptor borrowed for the call.
    let n = unsafe { libc::syscall(libc::SYS_getdents64, dir.as_raw_fd(), buf.as_mut_ptr(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    #[test]
    fn records_are_whole_and_the_position_advances() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a", "b", "c"] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let fd = std::fs::File::open(dir.path()).unwrap();
        let mut names = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            let n = super::getdents(fd.as_fd(), &mut buf).unwrap();
            if n == 0 {
                break;
            }
            let mut at = 0;
            while at < n {
                let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
                let name = &buf[at + 19..at + reclen];
                let end = name.iter().position(|&b| b == 0).unwrap();
                names.push(String::from_utf8(name[..end].to_vec()).unwrap());
                at += reclen;
            }
        }
        names.sort();
        assert_eq!(names, [".", "..", "a", "b", "c"]);
        let again = std::fs::File::open(dir.path()).unwrap();
        let e = super::getdents(again.as_fd(), &mut [0u8; 8]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "no record fits in 8 bytes");
    }
}
