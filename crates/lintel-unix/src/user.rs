//! The program's memory, read and written as the kernel would: through
//! `process_vm_readv`/`process_vm_writev` on this process, so a bad
//! pointer gets `EFAULT`, never a fault in the emulation.
#![allow(unsafe_code)]

const PAGE: u64 = 4096;

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EFAULT)
}

/// Copy `to.len()` bytes from the program's address `addr`.
pub fn read_into(addr: u64, to: &mut [u8]) -> Result<(), i32> {
    if to.is_empty() {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: to.as_mut_ptr().cast(),
        iov_len: to.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut _,
        iov_len: to.len(),
    };
    // SAFETY: `local` describes our own buffer of that length; the kernel
    // checks `remote` and fails with EFAULT rather than faulting.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    match n {
        n if n == to.len() as isize => Ok(()),
        n if n >= 0 => Err(libc::EFAULT),
        _ => Err(errno()),
    }
}

/// Copy `from` to the program's address `addr`.
pub fn write(addr: u64, from: &[u8]) -> Result<(), i32> {
    if from.is_empty() {
        return Ok(());
    }
    let local = libc::iovec {
        iov_base: from.as_ptr() as *mut _,
        iov_len: from.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut _,
        iov_len: from.len(),
    };
    // SAFETY: as in `read_into`, the other way; the kernel checks `remote`.
    let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
    match n {
        n if n == from.len() as isize => Ok(()),
        n if n >= 0 => Err(libc::EFAULT),
        _ => Err(errno()),
    }
}

/// The NUL-terminated string at `addr` (without its NUL): `EFAULT` if it
/// runs into unmapped memory, `ENAMETOOLONG` past 4096 bytes.
pub fn cstr(addr: u64) -> Result<Vec<u8>, i32> {
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() <= 4096 {
        // Never cross a page in one read: the string may end just before
        // an unmapped one.
        let n = (PAGE - at % PAGE) as usize;
        let mut chunk = vec![0u8; n];
        read_into(at, &mut chunk)?;
        if let Some(end) = chunk.iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Ok(out);
        }
        out.extend_from_slice(&chunk);
        at += n as u64;
    }
    Err(libc::ENAMETOOLONG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_pointers_are_efault_not_a_crash() {
        let s = b"hello\0";
        assert_eq!(cstr(s.as_ptr() as u64), Ok(b"hello".to_vec()));
        assert_eq!(cstr(8), Err(libc::EFAULT));
        let mut buf = [0u8; 4];
        assert_eq!(read_into(16, &mut buf), Err(libc::EFAULT));
        assert_eq!(write(16, b"x"), Err(libc::EFAULT));
        let mut dst = [0u8; 3];
        write(dst.as_mut_ptr() as u64, b"abc").unwrap();
        assert_eq!(&dst, b"abc");
    }
}
