//! Copies at memory speed whatever the alignment of the two buffers, and
//! copies from memory no reference may be made to.

use crate::distance::{self, Class, PEER_SENSED_MIN, Stores};

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

/// Append `src` to `dst` as [`copy_bytes`] copies, without zeroing the
/// new bytes first (`resize` then copy writes them twice: a 4 KiB out
/// buffer's reply paid a 4 KiB `memset` on each side).
#[inline]
pub fn extend_bytes(dst: &mut Vec<u8>, src: &[u8]) {
    let start = dst.len();
    dst.reserve(src.len());
    // SAFETY: `reserve` made room for `src.len()` bytes past `start`, in
    // `dst`'s own spare capacity, which `src` (borrowed shared while `dst`
    // is borrowed mutably) cannot overlap; they are written before the new
    // length covers them.
    unsafe {
        copy_raw(dst.as_mut_ptr().add(start), src.as_ptr(), src.len());
        dst.set_len(start + src.len());
    }
}

/// Read up to `len` bytes of `fd` at `at` onto the end of `dst` (one
/// `pread`), without zeroing them first as `resize` would: a 4 KiB read
/// paid a 4 KiB `memset` before the kernel's copy. How many were read.
pub fn pread_append(
    fd: std::os::fd::BorrowedFd<'_>,
    dst: &mut Vec<u8>,
    len: usize,
    at: u64,
) -> rustix::io::Result<usize> {
    let start = dst.len();
    dst.reserve(len);
    let (read, _) = rustix::io::pread(fd, &mut dst.spare_capacity_mut()[..len], at)?;
    let n = read.len();
    // SAFETY: the kernel initialized the first `n` bytes of the spare
    // capacity, which begins at `start` (`read` is that prefix).
    unsafe { dst.set_len(start + n) };
    Ok(n)
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

/// The sizes of a copy that [`copy_to_peer`] makes with non-temporal
/// stores: from `PEER_COPY_MIN` to `PEER_COPY_MAX` bytes; and of a
/// transfer whose parts [`copy_part_to_peer`] does, up to
/// [`PEER_STREAM_MAX`].
///
/// Measured on this project's 2-vCPU machines, a writer on one CPU filling
/// a buffer that a reader on the other then copies out, in turns, plain
/// stores against non-temporal ones: 1.7 against 2.4 µs a turn for
/// 16 KiB, 4.8 against 3.9 µs for 32 KiB, 9.4–11.3 against 6.9–7.7 µs for
/// 64 KiB, 68 against 46 µs for 512 KiB, 99–102 against 80–86 µs for
/// 1 MiB, 187–193 against 232–238 µs for 3 MiB; and a 1 MiB loan echo
/// through a door, 104–106 against 72–78 µs. Below the range the reader
/// waits on memory for every line, with too few of them for its
/// prefetcher to hide that; above it the buffers outgrow the CPUs' own
/// caches (1 MiB each here), plain stores find fewer of the reader's lines
/// to take, and the reader's reads from memory cost more than they save.
/// Plain stores are also the fast ones in some phases of these shared
/// machines (1 MiB: 50 µs a turn, the lines passing cheaply between the
/// two CPUs), and the slow ones by far in others (1.5 MiB: 710 µs against
/// 117); the stores around the caches cost the same in every phase. Those
/// phases decide smaller copies: from [`PEER_SENSED_MIN`] the stores are
/// picked by what plain ones cost lately (the [`distance`]
/// module). At 64 KiB, stores around the caches won in both phases (near:
/// 15 against 22.7 thousand cycles a turn; far: 15 against 82).
pub const PEER_COPY_MIN: usize = 32 << 10;
/// See [`PEER_COPY_MIN`].
pub const PEER_COPY_MAX: usize = 1 << 20;
/// The largest transfer whose parts [`copy_part_to_peer`] copies with
/// non-temporal stores. Streamed, the reader copying each 32 KiB part as
/// it lands while the writer writes the next, plain against non-temporal
/// took 8.7 against 5.8 µs for 64 KiB, 48.5 against 33.2 µs for 512 KiB,
/// and 52 against 54 µs for 1 MiB; a 1 MiB echo through a door streamed
/// its arguments in 86 µs with plain stores against 108 µs: the reader,
/// which overlaps the writer, then waits on memory.
pub const PEER_STREAM_MAX: usize = 512 << 10;

/// Copy `len` bytes from `src` into `dst`, memory another process reads on
/// another CPU once the copy is done (a loan: `Loan::from_slice`).
///
/// A plain store to a line the reader's CPU still holds from the last
/// time it read that buffer must first take the line from that CPU; for a
/// long copy that costs more than the copy itself (64 KiB: 7.5 µs against
/// 1.1 µs for the same `memcpy` into a buffer nobody else touched). A copy
/// of [`PEER_COPY_MIN`]`..=`[`PEER_COPY_MAX`] bytes stores around the
/// caches (`movntdq`): no line is taken from the reader, which then reads
/// the bytes from memory instead of from our cache, a smaller cost. A copy
/// of [`PEER_SENSED_MIN`] bytes up to [`PEER_COPY_MIN`], or of more than
/// [`PEER_COPY_MAX`], does so when this thread senses its readers far (the
/// [`distance`] module: now and then one such copy is timed). Other copies
/// are [`copy_raw`]'s. The stores are ordered before whatever this
/// thread stores next (`sfence`), so a word published after the copy
/// (with `Release` or stronger) is seen after the bytes, as with plain
/// stores.
///
/// # Safety
///
/// `src` must be readable and `dst` writable for `len` bytes, and the two
/// ranges must not overlap.
#[inline]
pub unsafe fn copy_to_peer(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: the caller's contract.
    unsafe { peer_copy(dst, src, len, len, PEER_COPY_MAX) }
}

/// [`copy_to_peer`] of one part of a transfer of `whole` bytes through a
/// bulk segment, whose reader may copy each part while the rest is
/// written (a streamed request's arguments; results, and arguments not
/// streamed, are one part of themselves): around the caches when `whole`
/// is in [`PEER_COPY_MIN`]`..=`[`PEER_STREAM_MAX`]; below that from
/// [`PEER_SENSED_MIN`], and above it, as far as this thread senses its
/// readers are.
///
/// # Safety
///
/// As [`copy_to_peer`].
#[inline]
pub unsafe fn copy_part_to_peer(dst: *mut u8, src: *const u8, len: usize, whole: usize) {
    // SAFETY: the caller's contract.
    unsafe { peer_copy(dst, src, len, whole, PEER_STREAM_MAX) }
}

/// Copy `len` bytes from `src` into `dst` around the caches whatever the
/// length (plainly under 64 bytes, or off x86-64), then a store fence: the
/// one kind of stores [`copy_to_peer`] picks between, fixed (the
/// benchmark's floors time each kind).
///
/// # Safety
///
/// As [`copy_to_peer`].
#[inline]
pub unsafe fn copy_around(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if len >= 64 {
        // SAFETY: the caller's contract; `len` is at least 64.
        unsafe { stream_copy(dst, src, len) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { copy_raw(dst, src, len) }
}

/// The copy of `len` bytes of a transfer of `whole` for a peer: around the
/// caches if `whole` is from [`PEER_COPY_MIN`] to `max`; from
/// [`PEER_SENSED_MIN`] below that, and above it, as far as this thread
/// senses its readers are (the [`distance`] module); plain ([`copy_raw`])
/// under [`PEER_SENSED_MIN`].
///
/// # Safety
///
/// As [`copy_to_peer`].
#[inline]
unsafe fn peer_copy(dst: *mut u8, src: *const u8, len: usize, whole: usize, max: usize) {
    let class = Class::of(whole);
    let stores = if whole < PEER_SENSED_MIN || len < 64 {
        Stores::Plain
    } else if (PEER_COPY_MIN..=max).contains(&whole) {
        Stores::Around
    } else {
        distance::pick(class)
    };
    #[cfg(target_arch = "x86_64")]
    let started = (stores == Stores::Timed).then(crate::cpu::tsc);
    if stores == Stores::Around {
        // SAFETY: the caller's contract.
        unsafe { copy_around(dst, src, len) };
    } else {
        // SAFETY: the caller's contract.
        unsafe { copy_raw(dst, src, len) };
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(t) = started {
        distance::timed(class, crate::cpu::tsc().wrapping_sub(t), len);
    }
}

/// [`copy_to_peer`]'s non-temporal copy: a head up to `dst`'s next 16-byte
/// boundary and the tail copied plainly, 64 bytes a turn between them
/// (unaligned loads, aligned streaming stores), then a store fence.
///
/// # Safety
///
/// As [`copy_to_peer`], and `len` is at least 64.
#[cfg(target_arch = "x86_64")]
unsafe fn stream_copy(dst: *mut u8, src: *const u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let head = (dst as usize).wrapping_neg() % 16;
    // SAFETY: `head` < 16 <= `len`: inside both ranges (the caller's
    // contract), which do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
    let (mut d, mut s, mut left) = (dst.wrapping_add(head), src.wrapping_add(head), len - head);
    while left >= 64 {
        // SAFETY: 64 bytes at `s` and at `d` lie inside the ranges (`left`
        // counts what is left of both); `d` is 16-byte aligned (`head`),
        // as `_mm_stream_si128` needs; SSE2 is part of x86-64.
        unsafe {
            let a = _mm_loadu_si128(s as *const __m128i);
            let b = _mm_loadu_si128(s.add(16) as *const __m128i);
            let c = _mm_loadu_si128(s.add(32) as *const __m128i);
            let e = _mm_loadu_si128(s.add(48) as *const __m128i);
            _mm_stream_si128(d as *mut __m128i, a);
            _mm_stream_si128(d.add(16) as *mut __m128i, b);
            _mm_stream_si128(d.add(32) as *mut __m128i, c);
            _mm_stream_si128(d.add(48) as *mut __m128i, e);
            d = d.add(64);
            s = s.add(64);
        }
        left -= 64;
    }
    // SAFETY: the last `left` bytes of both ranges; then the fence that
    // orders the streaming stores before this thread's later stores.
    unsafe {
        std::ptr::copy_nonoverlapping(s, d, left);
        _mm_sfence();
    }
}

/// Copy `len` bytes out of memory a peer may write while we read it (a
/// bulk segment, a loan), at memory speed: x86-64's `rep movsb`, in an
/// assembly block, so that the reads are the processor's and not Rust's
/// (the compiler makes no assumption about bytes it cannot see, and a
/// racing write leaves some mix of old and new bytes in `dst`, which the
/// caller validates there). Against the atomic word loop it replaces:
/// 64 KiB in 2.3 µs against 7.7 µs here, 1 MiB in 57 µs against 79 µs.
///
/// Returns false, having copied nothing, where this is not the fast way
/// (off x86-64, copies under 256 bytes, or the skew at which `rep movsb`
/// slows, see [`copy_bytes`]): the caller copies by atomic words then.
///
/// # Safety
///
/// `src` must be readable and `dst` writable for `len` bytes, the ranges
/// must not overlap, and no Rust reference may point into `dst` meanwhile.
#[inline]
pub unsafe fn copy_from_shared(dst: *mut u8, src: *const u8, len: usize) -> bool {
    let skew = (dst as usize).wrapping_sub(src as usize) % 4096;
    if len < 256 || (1..32).contains(&skew) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the caller's contract: `len` bytes readable at `src` and
        // writable at `dst`, not overlapping. `rep movsb` copies forwards
        // (the direction flag is clear at every call boundary by the ABI)
        // and touches only those bytes, the three registers it consumes,
        // and nothing on the stack.
        unsafe {
            std::arch::asm!(
                "rep movsb",
                inout("rcx") len => _,
                inout("rsi") src => _,
                inout("rdi") dst => _,
                options(nostack, preserves_flags)
            );
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(test)]
mod copy_tests {
    #[test]
    fn a_positional_read_appends_what_the_file_has_and_no_more() {
        use std::os::fd::AsFd;
        let f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 13) as u8).collect();
        rustix::io::pwrite(&f, &data, 0).unwrap();
        let mut v = b"head".to_vec();
        v.reserve(1 << 20); // spare room far beyond what is asked
        assert_eq!(super::pread_append(f.as_fd(), &mut v, 4096, 100).unwrap(), 4096);
        assert_eq!(&v[..4], b"head");
        assert_eq!(&v[4..], &data[100..4196]);
        // Fewer at the end, none past it.
        assert_eq!(
            super::pread_append(f.as_fd(), &mut v, 4096, 9_000).unwrap(),
            1_000
        );
        assert_eq!(&v[4100..], &data[9_000..]);
        assert_eq!(super::pread_append(f.as_fd(), &mut v, 10, 20_000).unwrap(), 0);
        assert_eq!(v.len(), 4 + 4096 + 1_000);
    }

    #[test]
    fn copies_past_the_around_range_are_exact_under_each_sense() {
        use crate::distance::{Class, Sense};
        let len = super::PEER_COPY_MAX + 77;
        let src: Vec<u8> = (0..len as u32).map(|i| (i * 7 + 3) as u8).collect();
        let (mut near, mut far) = (Sense::new(Class::Large), Sense::new(Class::Large));
        near.timed(0, len);
        far.timed(len as u64, len); // 64 ticks a line
        assert!(far.far() && !near.far());
        for sense in [Sense::new(Class::Large), near, far] {
            crate::distance::set(Class::Large, sense);
            let mut dst = vec![0u8; len + 64];
            // SAFETY: two distinct buffers, `len` bytes inside each.
            unsafe { super::copy_to_peer(dst.as_mut_ptr().add(5), src.as_ptr(), len) };
            assert!(dst[5..5 + len] == src[..], "{sense:?}");
            assert!(dst[..5].iter().chain(&dst[5 + len..]).all(|&b| b == 0));
            // A part of a streamed transfer past `PEER_STREAM_MAX`.
            dst.fill(0);
            let part = 40_003;
            // SAFETY: as above, `part` bytes inside each.
            unsafe { super::copy_part_to_peer(dst.as_mut_ptr().add(3), src.as_ptr(), part, len) };
            assert!(dst[3..3 + part] == src[..part], "part: {sense:?}");
            assert!(dst[..3].iter().chain(&dst[3 + part..]).all(|&b| b == 0));
        }
    }

    #[test]
    fn copies_are_exact_at_every_skew_and_length() {
        use crate::distance::{Class, Sense};
        let src: Vec<u8> = (0..80_000u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [
            0usize,
            1,
            31,
            2047,
            2048,
            4095,
            4096,
            5001,
            (16 << 10) + 13,
            (32 << 10) - 1,
            32 << 10,
            (32 << 10) + 77,
            70_000,
        ] {
            for skew in [0usize, 1, 8, 16, 31, 32, 100] {
                let mut dst = vec![0u8; len + 8192 + 64];
                let s = &src[..len];
                let base = (dst.as_ptr() as usize).next_multiple_of(4096) - dst.as_ptr() as usize;
                let want = (s.as_ptr() as usize + skew) % 4096;
                let at = base + want;
                super::copy_bytes(&mut dst[at..at + len], s);
                assert_eq!(&dst[at..at + len], s, "len {len} skew {skew}");
                // Each store the sense may pick: timed, plain, around.
                let class = Class::of(len);
                let (mut near, mut far) = (Sense::new(class), Sense::new(class));
                near.timed(0, 4096);
                far.timed(64 * 60, 4096);
                assert!(far.far() && !near.far());
                for sense in [Sense::new(class), near, far] {
                    crate::distance::set(class, sense);
                    dst.fill(0);
                    // SAFETY: two distinct buffers, `len` bytes inside each.
                    unsafe { super::copy_to_peer(dst.as_mut_ptr().add(at), s.as_ptr(), len) };
                    assert_eq!(&dst[at..at + len], s, "to peer: len {len} skew {skew} {sense:?}");
                    assert!(
                        dst[..at].iter().chain(&dst[at + len..]).all(|&b| b == 0),
                        "to peer wrote outside"
                    );
                }
                dst.fill(0);
                // SAFETY: two distinct buffers, `len` bytes inside each.
                let done = unsafe { super::copy_from_shared(dst.as_mut_ptr().add(at), s.as_ptr(), len) };
                if done {
                    assert_eq!(&dst[at..at + len], s, "from shared: len {len} skew {skew}");
                    assert!(
                        dst[..at].iter().chain(&dst[at + len..]).all(|&b| b == 0),
                        "wrote outside"
                    );
                }
            }
        }
    }
}
