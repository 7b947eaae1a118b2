//! Plain-old-data structures of the kernel's ABI, as bytes.

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
