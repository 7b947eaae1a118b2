//! Plain-old-data structures of the kernel's ABI, as bytes; and owning a
//! descriptor the kernel just made.
#![allow(unsafe_code)]

/// Types every bit pattern of which is a valid value (the kernel's
/// `struct stat`, `struct statx`).
pub trait Pod: Copy {}
impl Pod for libc::stat {}
impl Pod for libc::statx {}
impl Pod for libc::statx_timestamp {}
impl Pod for libc::statfs {}
impl Pod for libc::sockaddr_un {}

/// An all-zero value.
pub fn zeroed<T: Pod>() -> T {
    // SAFETY: `Pod` types are valid for every bit pattern, zero included.
    unsafe { std::mem::zeroed() }
}

/// The bytes of a value.
pub fn bytes_of<T: Pod>(v: &T) -> &[u8] {
    // SAFETY: a `Pod` value is `size_of::<T>()` initialized bytes
    // (zeroed, then its fields set), readable for as long as `v`.
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) }
}

#[cfg(target_arch = "x86_64")]
/// A new descriptor (close-on-exec) of whatever `fd` is, owned: `Err`
/// the negative errno if the kernel made none.
pub fn dup_owned(fd: u64) -> Result<std::os::fd::OwnedFd, i64> {
    use std::os::fd::FromRawFd;
    let dup = crate::trap::raw_syscall(libc::SYS_fcntl, [fd, libc::F_DUPFD_CLOEXEC as u64, 0, 0, 0, 0]);
    if dup < 0 {
        return Err(dup);
    }
    // SAFETY: the kernel just made `dup` for this call alone: nothing
    // else owns or closes it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(dup as i32) })
}
