//! Copies at memory speed whatever the alignment of the two buffers, and
//! copies from memory no reference may be made to.

/// Copy `src` into `dst` (equal lengths) at full speed whatever their
/// alignment: glibc's `memcpy` here (`rep movsb`, from 2 KiB up) runs
/// about 25× slower when the destination sits 1 to 31 bytes after the
/// source modulo 4 KiB (measured: 4 KiB in 1.4 µs against 52 ns), which
/// two heap buffers often do. Those copies go word by word instead.
#[inline]
pub fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_bytes of unequal lengths");
    // SAFETY: two valid slices of `len` bytes; one is borrowed mutably, so
    // they do not overlap.
    unsafe { copy_raw(dst.as_mut_ptr(), src.as_ptr(), src.len()) }
}

/// [`copy_bytes`] between raw pointers, for memory no reference may be
/// made to (shared memory a peer may write meanwhile).
///
/// # Safety
///
/// `src` must be readable and `dst` writable for `len` bytes, and the two
/// ranges must not overlap.
#[inline]
pub unsafe fn copy_raw(dst: *mut u8, src: *const u8, len: usize) {
    let skew = (dst as usize).wrapping_sub(src as usize) % 4096;
    if len < 2048 || !(1..32).contains(&skew) {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    // A head up to the destination's next 32-byte boundary first: the
    // volatile writes below must be aligned (the skew is unchanged).
    let head = (dst as usize).wrapping_neg() % 32;
    // SAFETY: `head` < 32 < `len`, so the head lies inside both ranges.
    let (src, dst, len) = unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        (src.add(head), dst.add(head), len - head)
    };
    let words = len / 32;
    for i in 0..words {
        // SAFETY: chunk `i` lies inside both ranges (the caller's
        // contract); the read may be unaligned, the write is 32-byte
        // aligned (`head`). The volatile write keeps the compiler from
        // turning the loop back into a `memcpy` call.
        unsafe {
            let v = std::ptr::read_unaligned(src.add(i * 32) as *const [u64; 4]);
            std::ptr::write_volatile(dst.add(i * 32) as *mut [u64; 4], v);
        }
    }
    let done = words * 32;
    // SAFETY: the tail lies inside both ranges.
    unsafe { std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), len - done) };
}

#[cfg(test)]
mod copy_tests {
    #[test]
    fn copies_are_exact_at_every_skew_and_length() {
        let src: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [0usize, 1, 31, 2047, 2048, 4096, 5001] {
            for skew in [0usize, 1, 8, 16, 31, 32, 100] {
                let mut dst = vec![0u8; len + 8192 + 64];
                let s = &src[..len];
                let base = (dst.as_ptr() as usize).next_multiple_of(4096) - dst.as_ptr() as usize;
                let want = (s.as_ptr() as usize + skew) % 4096;
                let at = base + want;
                super::copy_bytes(&mut dst[at..at + len], s);
                assert_eq!(&dst[at..at + len], s, "len {len} skew {skew}");
            }
        }
    }
}
