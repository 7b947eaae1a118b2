//! The file service's one error type, and the errno each variant stands for.

use lintel::stub::{StubError, Wire};

/// Why a file-service call failed. Every variant maps to the errno a Unix
/// program would see ([`FsError::errno`]), and converts into a
/// [`std::io::Error`] carrying it.
#[derive(Debug, Clone, PartialEq, Wire, thiserror::Error)]
pub enum FsError {
    /// The host file system refused the operation with this errno.
    #[error("{}", std::io::Error::from_raw_os_error(*.errno))]
    Os {
        /// The host's errno (`ENOENT`, `EACCES`, …).
        errno: i32,
    },
    /// The path leads outside the exported directory (through `..`, an
    /// absolute path, or a symlink that leaves it). Errno `EXDEV`, as
    /// Linux's `openat2` with `RESOLVE_BENEATH` reports it.
    #[error("`{path}` leads outside the exported directory")]
    Escapes {
        /// The path as the client gave it (lossily decoded).
        path: String,
    },
    /// The export is read-only. Errno `EROFS`.
    #[error("the export is read-only")]
    ReadOnly,
    /// The open file is closed, or the service took it back. Errno `EBADF`.
    #[error("the file is closed")]
    Closed,
    /// An argument the service cannot accept. Errno `EINVAL`.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The call did not reach the service or did not come back (the
    /// service died, the deadline passed, …). Errno `EIO`.
    #[error(transparent)]
    Stub(#[from] StubError),
}

impl FsError {
    /// The errno a Unix program would see for this error.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::Os { errno } => *errno,
            FsError::Escapes { .. } => rustix::io::Errno::XDEV.raw_os_error(),
            FsError::ReadOnly => rustix::io::Errno::ROFS.raw_os_error(),
            FsError::Closed => rustix::io::Errno::BADF.raw_os_error(),
            FsError::Invalid(_) => rustix::io::Errno::INVAL.raw_os_error(),
            FsError::Stub(_) => rustix::io::Errno::IO.raw_os_error(),
        }
    }
}

impl From<rustix::io::Errno> for FsError {
    fn from(e: rustix::io::Errno) -> Self {
        FsError::Os {
            errno: e.raw_os_error(),
        }
    }
}

impl From<std::io::Error> for FsError {
    fn from(e: std::io::Error) -> Self {
        FsError::Os {
            errno: e.raw_os_error().unwrap_or(rustix::io::Errno::IO.raw_os_error()),
        }
    }
}

/// The `io::Error` of the errno a Unix program would get
/// (`raw_os_error()` is always `Some`). The standard library keeps either
/// an errno or a message, not both; the errno is what programs act on, so
/// the detail of an `Escapes` or `Invalid` goes to the `debug` log.
impl From<FsError> for std::io::Error {
    fn from(e: FsError) -> Self {
        if !matches!(e, FsError::Os { .. }) {
            tracing::debug!("file service: {e}");
        }
        std::io::Error::from_raw_os_error(e.errno())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_carries_the_errno_a_unix_program_expects() {
        let cases = [
            (FsError::from(rustix::io::Errno::NOENT), libc_errno::ENOENT),
            (FsError::Escapes { path: "..".into() }, libc_errno::EXDEV),
            (FsError::ReadOnly, libc_errno::EROFS),
            (FsError::Closed, libc_errno::EBADF),
            (FsError::Invalid("x".into()), libc_errno::EINVAL),
        ];
        for (e, errno) in cases {
            assert_eq!(e.errno(), errno, "{e}");
            let io = std::io::Error::from(e.clone());
            assert_eq!(io.raw_os_error(), Some(errno), "{e}");
        }
        let gone = FsError::Stub(StubError::Call(lintel::CallError::PeerDied));
        assert_eq!(std::io::Error::from(gone).raw_os_error(), Some(libc_errno::EIO));
        let io = std::io::Error::from(FsError::ReadOnly);
        assert_eq!(io.kind(), std::io::ErrorKind::ReadOnlyFilesystem);
    }

    /// Linux's numbers, written out so the test does not compare rustix
    /// with itself.
    mod libc_errno {
        pub const ENOENT: i32 = 2;
        pub const EIO: i32 = 5;
        pub const EBADF: i32 = 9;
        pub const EXDEV: i32 = 18;
        pub const EINVAL: i32 = 22;
        pub const EROFS: i32 = 30;
    }
}
