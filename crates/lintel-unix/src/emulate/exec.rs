//! `execve` and `execveat` of a program in the served tree.
//!
//! The kernel cannot open the prefix's paths, so the emulation starts a
//! served program itself, as the kernel would have: the service hands out
//! a read-only host descriptor of the file once the kernel's own checks
//! for `exec` pass in the service (`lintel_fs::Fs::exec_descriptor`:
//! lookup, permission to execute, a regular file), and then
//! - a script (`#!`) is read as Linux's `binfmt_script` reads it: the
//!   interpreter, an optional single argument (the rest of the line,
//!   trimmed), the script's path as the program named it, then the
//!   program's arguments after its `argv[0]`; the interpreter is looked up
//!   in turn (relative to the working directory; it may be served, or a
//!   script itself), five scripts deep at most (`ELOOP` past that, as
//!   Linux counts); a line with no interpreter is `ENOEXEC`;
//! - a statically linked ELF program is started in static mode through
//!   its host, as a host static program is (`image::host_exec`), which
//!   opens it through the service again;
//! - anything else is the kernel's to start from the descriptor
//!   (`execveat(fd, "", argv, envp, AT_EMPTY_PATH)`): a dynamically
//!   linked program gets the preload library from its environment, as
//!   any program the emulation runs, or `ENOEXEC` where no format fits.
//!
//! Errors are the ones `execve` gives: the service's (`ENOENT`, `ENOTDIR`,
//! `ELOOP`, `EACCES`) for the served file, the kernel's for a host
//! interpreter. What differs from a native `exec`: the program's
//! `/proc/self/exe` is the host file behind the served path (its
//! `AT_EXECFN` is `/dev/fd/N`), except in static mode, where it is the
//! served path; the dynamic loader, which runs before the emulation is
//! armed, finds no library in a served directory (`LD_LIBRARY_PATH`
//! naming the prefix: a host library of that name is taken, if any); a
//! set-user-ID bit is never honoured (as for every program
//! the emulation runs); a file that may be executed but not read cannot
//! be (the service opens it for reading).
//!
//! A forked child first gets a runtime of its own (as on its first use of
//! a served file); one that cannot (a raw `clone`'s, posix_spawn's) hands
//! the `exec` to a new image of the host (`through_host`), and its errors
//! become an exit status of 127.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};

use super::descriptors::placeholder_fd;
use super::forked::REVIVER;
use super::resolve::LinkLookup;
use super::{Emulation, R, err, fs_err};
use crate::paths;
use crate::trap;
use crate::user;

/// Scripts Linux follows in one `exec`: a sixth interpreter that is a
/// script again is `ELOOP` (`exec_binprm`'s depth).
const MAX_SCRIPTS: usize = 5;

/// What the kernel reads of a file to recognise its format
/// (`BINPRM_BUF_SIZE`): a `#!` line is read from it alone.
const HEAD: usize = 256;

/// The head read to tell a static ELF program (its program headers).
const ELF_HEAD: usize = 64 << 10;

/// A program to start: a served path (relative to the root), or a host
/// path the kernel resolves.
enum Target {
    Served(Vec<u8>),
    Host(Vec<u8>),
}

impl Emulation {
    /// A trapped `execve` or `execveat`: `None` if it names no served
    /// file (the kernel makes it), else what it returned (it failed).
    pub(crate) fn exec_served(&self, nr: i64, a: [u64; 6]) -> R {
        let (dirfd, path, argv, envp, flags) = match nr {
            libc::SYS_execve => (libc::AT_FDCWD, a[0], a[1], a[2], 0),
            _ => (a[0] as i32, a[1], a[2], a[3], a[4] as i32),
        };
        let mut named = user::cstr(path).ok()?;
        // Static mode: `/proc/self/exe` is the program run (busybox runs
        // its applets so), which may be served.
        if trap::static_mode() && is_self_exe(&named) {
            named = crate::image::loaded()?.as_os_str().as_encoded_bytes().to_vec();
        }
        let empty = named.is_empty() && flags & libc::AT_EMPTY_PATH != 0;
        if trap::forked_child() {
            let c = CString::new(named.clone()).ok()?;
            let touches = if empty {
                placeholder_fd(dirfd)
            } else {
                self.child_path(dirfd, c.as_ptr() as u64)
            };
            if !touches {
                return None;
            }
            return match REVIVER.get().and_then(|revive| revive()) {
                Some(e) => {
                    // The new emulation took over (and closed) the record
                    // of the working directory made for this `exec`: it
                    // makes its own, and what the child opened before the
                    // `exec` is recorded for the new image.
                    self.cwd_record.store(-1, std::sync::atomic::Ordering::Release);
                    e.record_all();
                    e.record_cwd();
                    let r = e.exec_served(nr, a);
                    e.exec_failed();
                    r
                }
                None => Some(through_host(dirfd, &named, argv, envp)),
            };
        }
        let rel = if empty {
            match self.served(dirfd as u64) {
                Some(s) if s.dir => return Some(err(libc::EACCES)),
                Some(s) => s.path.clone(),
                None => return None,
            }
        } else {
            match self.target(dirfd, &named) {
                Ok(Target::Served(rel)) => rel,
                Ok(Target::Host(_)) => return None,
                Err(e) => return Some(err(e)),
            }
        };
        if flags & libc::AT_SYMLINK_NOFOLLOW != 0 && !empty {
            match self.fs.symlink_stat(std::ffi::OsStr::from_bytes(&rel)) {
                Ok(st) if st.is_symlink() => return Some(err(libc::ELOOP)),
                Ok(_) => {}
                Err(e) => return Some(fs_err(e)),
            }
        }
        // Symlinks on the way, followed as the program sees them: the
        // service refuses one with an absolute target (`EXDEV`), which
        // may lead back into the tree or out to the host.
        let target = match crate::links::resolve(&self.prefix, &rel, true, &LinkLookup(&self.fs)) {
            Ok(crate::links::Target::Served(p)) => Target::Served(p),
            Ok(crate::links::Target::Host(h)) => Target::Host(h),
            Err(e) => return Some(err(e)),
        };
        // The file name the kernel gives a script's interpreter.
        let filename = match (empty, dirfd == libc::AT_FDCWD || named.first() == Some(&b'/')) {
            (true, _) => format!("/dev/fd/{dirfd}").into_bytes(),
            (false, true) => named.clone(),
            (false, false) => {
                let mut f = format!("/dev/fd/{dirfd}/").into_bytes();
                f.extend_from_slice(&named);
                f
            }
        };
        // A script named through a close-on-exec descriptor cannot be
        // opened by its interpreter: Linux refuses it (`ENOENT`).
        let inaccessible = dirfd != libc::AT_FDCWD
            && (empty || named.first() != Some(&b'/'))
            && trap::raw_syscall(libc::SYS_fcntl, [dirfd as u64, libc::F_GETFD as u64, 0, 0, 0, 0])
                & libc::FD_CLOEXEC as i64
                != 0;
        let args = match strings(argv) {
            Ok(v) => v,
            Err(e) => return Some(err(e)),
        };
        Some(self.start(target, filename, inaccessible, args, envp))
    }

    /// Start `target` (named `filename`) with arguments `args` and the
    /// environment at `envp` (the program's), following `#!` lines: the
    /// error, if it could not be started.
    fn start(
        &self,
        mut target: Target,
        mut filename: Vec<u8>,
        inaccessible: bool,
        mut args: Vec<Vec<u8>>,
        envp: u64,
    ) -> i64 {
        for depth in 0..=MAX_SCRIPTS + 1 {
            if depth > MAX_SCRIPTS {
                return err(libc::ELOOP);
            }
            let (fd, head) = match &target {
                Target::Served(rel) => {
                    let fd = match self.fs.exec_descriptor(std::ffi::OsStr::from_bytes(rel)) {
                        Ok(fd) => fd,
                        Err(e) => return fs_err(e),
                    };
                    let _ = rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC);
                    let head = read_head(&fd, ELF_HEAD);
                    (Some(fd), head)
                }
                // A host script is followed here too, so that the depth
                // counts as one `exec`'s; anything else (or a file the
                // kernel will refuse) is the kernel's.
                Target::Host(path) => match host_script_head(path) {
                    Some(head) => (None, head),
                    None => return exec_host(path, &args, envp),
                },
            };
            match shebang(&head) {
                Some(Ok((interp, arg))) => {
                    if inaccessible && depth == 0 {
                        return err(libc::ENOENT);
                    }
                    let mut next = vec![interp.clone()];
                    next.extend(arg);
                    next.push(std::mem::take(&mut filename));
                    next.extend(args.drain(..).skip(1));
                    args = next;
                    target = match self.target(libc::AT_FDCWD, &interp) {
                        Ok(t) => t,
                        Err(e) => return err(e),
                    };
                    filename = interp;
                }
                Some(Err(e)) => return err(e),
                None => {
                    let Some(fd) = fd else {
                        // (Not reached: a host file is followed only
                        // when it is a script.)
                        return err(libc::ENOEXEC);
                    };
                    let Target::Served(rel) = &target else {
                        return err(libc::ENOEXEC);
                    };
                    if crate::image::is_static_head(&head) {
                        let shown = self.prefix.absolute(rel);
                        return match crate::image::host_exec(&shown, envp, trap::static_mode()) {
                            Some(h) => {
                                let argv = pointers(&args);
                                trap::raw_syscall(libc::SYS_execve, [h.path(), argv.ptr(), h.envp(), 0, 0, 0])
                            }
                            None => err(libc::ENOEXEC),
                        };
                    }
                    let argv = pointers(&args);
                    return trap::raw_syscall(
                        libc::SYS_execveat,
                        [
                            fd.as_raw_fd() as u64,
                            c"".as_ptr() as u64,
                            argv.ptr(),
                            envp,
                            libc::AT_EMPTY_PATH as u64,
                            0,
                        ],
                    );
                }
            }
        }
        err(libc::ELOOP)
    }

    /// Start the served program `path` (absolute, or relative to the
    /// working directory) with the arguments at `argv` and environment at
    /// `envp` (this process's own memory): how the preload library's
    /// constructor runs the program a forked child handed to it
    /// ([`crate::env::ENV_EXEC`]). Returns only if it failed: the error.
    pub fn exec_program(&self, path: &std::ffi::CStr, argv: u64, envp: u64) -> i64 {
        trap::Emulator::before_fork_or_exec(self);
        let a = [path.as_ptr() as u64, argv, envp, 0, 0, 0];
        let r = self
            .exec_served(libc::SYS_execve, a)
            .unwrap_or_else(|| trap::raw_syscall(libc::SYS_execve, a));
        self.exec_failed();
        r
    }

    /// Where `path` (relative to `dirfd`) leads: a served file, or the
    /// host's (an absolute path out of the prefix, one relative to a
    /// directory of the kernel's, or one that climbs out of a served
    /// working directory).
    fn target(&self, dirfd: i32, path: &[u8]) -> Result<Target, i32> {
        let c = CString::new(path.to_vec()).map_err(|_| libc::EINVAL)?;
        match self.path_at(dirfd, c.as_ptr() as u64) {
            Ok(Some(rel)) => Ok(Target::Served(rel)),
            Ok(None) => Ok(Target::Host(path.to_vec())),
            Err(libc::ENOENT) if dirfd == libc::AT_FDCWD && path.first() != Some(&b'/') => {
                match self
                    .served_cwd()
                    .and_then(|cwd| paths::outside(&self.prefix, &cwd, path))
                {
                    Some(host) => Ok(Target::Host(host)),
                    None => Err(libc::ENOENT),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// The static program `path` names, opened to load (the host of a
    /// served static program, `image::host_exec`): through the service
    /// if it is served, `None` if it is not.
    pub fn open_program(&self, path: &std::path::Path) -> Option<std::io::Result<std::fs::File>> {
        let rel = self.prefix.strip(path.as_os_str().as_encoded_bytes())?;
        Some(
            self.fs
                .exec_descriptor(std::ffi::OsStr::from_bytes(&rel))
                .map(std::fs::File::from)
                .map_err(|e| std::io::Error::from_raw_os_error(e.errno())),
        )
    }
}

use std::os::unix::ffi::OsStrExt;

/// A forked child that cannot reach the service (one a raw `clone` or
/// posix_spawn made: it may not allocate a runtime) hands the `exec` of
/// the served `path` to a new image of the host, whose preload library
/// makes it ([`crate::env::ENV_EXEC`]; the working directory and served
/// descriptors go across as to any image). The image is started whatever
/// becomes of the program: an `exec` that then fails ends it with status
/// 127, as posix_spawn's child here does (`trap`). A path relative to a
/// descriptor other than the working directory's gets `EIO`.
fn through_host(dirfd: i32, path: &[u8], argv: u64, envp: u64) -> i64 {
    if dirfd != libc::AT_FDCWD && path.first() != Some(&b'/') {
        return err(libc::EIO);
    }
    match crate::image::host_exec_naming(crate::env::ENV_EXEC, path, envp, trap::static_mode()) {
        Some(h) => trap::raw_syscall(libc::SYS_execve, [h.path(), argv, h.envp(), 0, 0, 0]),
        None => err(libc::EIO),
    }
}

/// `/proc/self/exe` or `/proc/<our pid>/exe`.
fn is_self_exe(p: &[u8]) -> bool {
    p == b"/proc/self/exe" || p == format!("/proc/{}/exe", std::process::id()).as_bytes()
}

/// Up to `max` bytes at the start of the file `fd`.
fn read_head(fd: &OwnedFd, max: usize) -> Vec<u8> {
    let mut head = vec![0u8; max];
    let mut got = 0;
    while got < max {
        match rustix::io::pread(fd, &mut head[got..], got as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    head.truncate(got);
    head
}

/// The head of the host file `path` if it is a script the kernel would
/// start (executable for us, a regular file, readable); `None` leaves
/// it, and any error, to the kernel.
fn host_script_head(path: &[u8]) -> Option<Vec<u8>> {
    let c = CString::new(path.to_vec()).ok()?;
    let ok = trap::raw_syscall(
        libc::SYS_faccessat2,
        [
            libc::AT_FDCWD as u64,
            c.as_ptr() as u64,
            libc::X_OK as u64,
            libc::AT_EACCESS as u64,
            0,
            0,
        ],
    ) == 0;
    if !ok {
        return None;
    }
    let fd = rustix::fs::open(
        c.as_c_str(),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return None;
    }
    let head = read_head(&fd, HEAD);
    head.starts_with(b"#!").then_some(head)
}

/// `execve` of the host program `path`: a static one through its host,
/// as the trap path starts one (`image::hosted`).
fn exec_host(path: &[u8], args: &[Vec<u8>], envp: u64) -> i64 {
    let argv = pointers(args);
    let Ok(c) = CString::new(path.to_vec()) else {
        return err(libc::ENOENT);
    };
    let p = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
    if crate::image::is_static(p)
        && let Some(h) = crate::image::host_exec(path, envp, trap::static_mode())
    {
        return trap::raw_syscall(libc::SYS_execve, [h.path(), argv.ptr(), h.envp(), 0, 0, 0]);
    }
    trap::raw_syscall(libc::SYS_execve, [c.as_ptr() as u64, argv.ptr(), envp, 0, 0, 0])
}

/// An argument vector for the kernel: C strings and the null-ended array
/// of their addresses (which point into `strings`).
struct Pointers {
    _strings: Vec<CString>,
    words: Vec<u64>,
}

impl Pointers {
    fn ptr(&self) -> u64 {
        self.words.as_ptr() as u64
    }
}

fn pointers(args: &[Vec<u8>]) -> Pointers {
    // (No argument holds a NUL: each was read as a C string.)
    let strings: Vec<CString> = args
        .iter()
        .map(|a| CString::new(a.clone()).unwrap_or_default())
        .collect();
    let mut words: Vec<u64> = strings.iter().map(|s| s.as_ptr() as u64).collect();
    words.push(0);
    Pointers {
        _strings: strings,
        words,
    }
}

/// Most arguments read from a program's vector (the kernel's limit is
/// their total size, `E2BIG`).
const MAX_ARGS: usize = 1 << 20;

/// The C strings of the program's null-ended vector at `at` (none if
/// `at` is null, as the kernel reads a null `argv`).
fn strings(at: u64) -> Result<Vec<Vec<u8>>, i32> {
    let mut out = Vec::new();
    if at == 0 {
        return Ok(out);
    }
    for i in 0..MAX_ARGS as u64 {
        let mut w = [0u8; 8];
        user::read_into(at + 8 * i, &mut w)?;
        let p = u64::from_ne_bytes(w);
        if p == 0 {
            return Ok(out);
        }
        out.push(user::cstr(p)?);
    }
    Err(libc::E2BIG)
}

/// A `#!` line's interpreter and its optional argument.
type Shebang = (Vec<u8>, Option<Vec<u8>>);

fn spacetab(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// The interpreter and optional argument of the `#!` line that `head` (a
/// file's first bytes) starts with, read as Linux reads it from the first
/// [`HEAD`] bytes: the interpreter is the first word after `#!` (spaces
/// and tabs skipped), the argument whatever follows it up to the end of
/// the line, spaces and tabs trimmed at both ends (one argument, spaces
/// and all), each ending at a NUL byte. With no newline in those bytes the
/// line counts as cut there (its last byte dropped), and is refused
/// (`ENOEXEC`) unless the interpreter ends before the cut; so is a line
/// with no interpreter. `None`: not a script.
fn shebang(head: &[u8]) -> Option<Result<Shebang, i32>> {
    if !head.starts_with(b"#!") {
        return None;
    }
    // The kernel's buffer: the head, NUL-padded.
    let mut buf = [0u8; HEAD];
    let n = head.len().min(HEAD);
    buf[..n].copy_from_slice(&head[..n]);
    let last = HEAD - 1;
    let non_spacetab = |from: usize, to: usize| (from..=to).find(|&i| !spacetab(buf[i]));
    let terminator = |from: usize, to: usize| (from..=to).find(|&i| spacetab(buf[i]) || buf[i] == 0);
    let mut end = match buf.iter().position(|&b| b == b'\n') {
        Some(nl) => nl,
        None => {
            let Some(word) = non_spacetab(2, last) else {
                return Some(Err(libc::ENOEXEC));
            };
            if terminator(word, last).is_none() {
                // The interpreter's name may go on past what was read.
                return Some(Err(libc::ENOEXEC));
            }
            last
        }
    };
    while end > 2 && spacetab(buf[end - 1]) {
        end -= 1;
    }
    let name = match non_spacetab(2, end) {
        Some(i) if i != end => i,
        _ => return Some(Err(libc::ENOEXEC)),
    };
    let sep = terminator(name, end);
    let arg = sep
        .filter(|&s| buf[s] != 0)
        .and_then(|s| non_spacetab(s, end).filter(|&i| i < end));
    buf[end] = 0;
    if let (Some(s), Some(_)) = (sep, arg) {
        buf[s] = 0;
    }
    let c_string = |from: usize| {
        let len = buf[from..].iter().position(|&b| b == 0).unwrap_or(HEAD - from);
        buf[from..from + len].to_vec()
    };
    Some(Ok((c_string(name), arg.map(c_string))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(head: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
        shebang(head).expect("a script").expect("readable")
    }

    #[test]
    fn a_shebang_line_is_an_interpreter_and_one_optional_argument() {
        assert!(shebang(b"\x7fELF").is_none());
        assert!(shebang(b"# !/bin/sh").is_none());
        assert_eq!(parsed(b"#!/bin/sh\necho hi\n"), (b"/bin/sh".to_vec(), None));
        assert_eq!(parsed(b"#! \t/bin/sh  \t\n"), (b"/bin/sh".to_vec(), None));
        assert_eq!(
            parsed(b"#!/usr/bin/env  python3 -u  \nx"),
            (b"/usr/bin/env".to_vec(), Some(b"python3 -u".to_vec())),
            "one argument, inner spaces kept, the ends trimmed"
        );
        assert_eq!(
            parsed(b"#!/bin/sh"),
            (b"/bin/sh".to_vec(), None),
            "no newline, short file"
        );
        assert_eq!(
            parsed(b"#!/bin/sh\0-x\n"),
            (b"/bin/sh".to_vec(), None),
            "ends at a NUL"
        );
        assert_eq!(shebang(b"#!\n"), Some(Err(libc::ENOEXEC)));
        assert_eq!(shebang(b"#!   \t \n"), Some(Err(libc::ENOEXEC)));
    }

    #[test]
    fn a_line_cut_by_the_kernels_buffer_is_read_as_linux_reads_it() {
        // No newline in 256 bytes and no end to the interpreter's name.
        let mut long = b"#!/".to_vec();
        long.resize(300, b'a');
        assert_eq!(shebang(&long), Some(Err(libc::ENOEXEC)));
        // The name ends: the argument is cut, its last byte dropped.
        let mut cut = b"#!/bin/sh ".to_vec();
        cut.resize(300, b'x');
        let (name, arg) = parsed(&cut);
        assert_eq!(name, b"/bin/sh".to_vec());
        assert_eq!(arg.unwrap().len(), HEAD - 1 - 10);
    }
}
