//! Bulk segments: arguments and results larger than a slot's data region.
//!
//! Each slot has one segment per direction, owned by the side that writes
//! it: the caller's for arguments, the server's for results. The writer
//! creates it (a memfd sealed against shrinking and growing), maps it
//! writable, and sends it once over the connection before the first call
//! that uses it; the reader checks the seals and size and maps it
//! read-only. Later calls that fit reuse it: a bulk call costs one copy in
//! and one copy out through memory both sides have mapped and faulted, no
//! system call. A call that does not fit replaces the segment under a new
//! generation (the header names the generation, so the reader knows which
//! one to read).
//!
//! Why copies and not a reference into the reader: the writer keeps write
//! access to its segment, so a hostile one could change bytes while the
//! handler validates them; a copy into private memory is what a `&[u8]`
//! parameter must be. (Sealed snapshots and shared loans are the ways to
//! skip it.)
//!
//! Memory: a segment stays mapped on both sides while it is at most
//! [`KEEP_MAX`] (256 MiB); a larger one is dropped by both after the call
//! that used it, by the same rule, so the next such call makes a fresh one
//! (and pays for fresh pages). Both sides' segments go with their
//! connection. The writer makes the pages a call reaches at once
//! (`MADV_POPULATE_WRITE`) rather than faulting them one by one, and only
//! those (a segment is rounded up to a power of two); the reader maps
//! lazily (a hostile writer's segment may be huge and sparse).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::abi;
use crate::sys::umem::{Bulk, Room};
use crate::sys::{self, Mapping};

/// Largest segment (and worker buffer) kept between calls. Memory held is
/// about the largest recent call per calling thread; a call larger than
/// this makes and faults fresh pages each time (a 256 MiB echo: 1.7 s
/// with a 16 MiB bound, most of it zeroing pages), so it is set at the
/// largest size a copy is still the sensible way to move (beyond, loans).
pub const KEEP_MAX: usize = 256 << 20;

/// The writer's side of one slot's segment.
#[derive(Default)]
pub(crate) struct Outbox {
    generation: u32,
    seg: Option<(OwnedFd, Bulk)>,
    /// Bytes of the segment whose pages have been made (see `write`).
    populated: usize,
}

impl Outbox {
    /// Make room for `len` bytes. Returns the generation to name in the
    /// header, and the segment's fd if it is new (send it first).
    pub fn prepare(&mut self, len: usize) -> io::Result<(u32, Option<BorrowedFd<'_>>)> {
        let fits = self.seg.as_ref().is_some_and(|(_, b)| b.len() >= len);
        if !fits {
            self.seg = None;
            let size = abi::segment_size(len);
            let fd = sys::sealed_memfd("lintel-bulk", size)?;
            let map = Mapping::map(fd.as_fd(), size)?;
            self.generation = next_generation(self.generation);
            self.seg = Some((fd, Bulk::new(map)));
            self.populated = 0;
        }
        let (fd, _) = self.seg.as_ref().expect("made above");
        Ok((self.generation, (!fits).then(|| fd.as_fd())))
    }

    /// Copy `data` into the segment [`prepare`](Self::prepare) made room in,
    /// making its pages at once the first time a call reaches them.
    pub fn write(&mut self, data: &[u8]) {
        let (_, bulk) = self.seg.as_ref().expect("prepared before writing");
        if data.len() > self.populated {
            bulk.populate_write(self.populated, data.len() - self.populated);
            self.populated = data.len();
        }
        bulk.write(data);
    }

    /// Copy `data` to byte `off` (a multiple of 8) of the segment, as
    /// [`write`](Self::write) does to its start: a part of a streamed
    /// request's arguments, `whole` bytes in all.
    pub fn write_part(&mut self, off: usize, data: &[u8], whole: usize) {
        let (_, bulk) = self.seg.as_ref().expect("prepared before writing");
        let end = off + data.len();
        if end > self.populated {
            bulk.populate_write(self.populated, end - self.populated);
            self.populated = end;
        }
        bulk.write_part(off, data, whole);
    }

    /// Room for `len` bytes at the segment's start, which
    /// [`prepare`](Self::prepare) made, its pages made at once as
    /// [`write`](Self::write) would.
    pub fn room(&mut self, len: usize) -> Room {
        let (_, bulk) = self.seg.as_ref().expect("prepared before writing");
        if len > self.populated {
            bulk.populate_write(self.populated, len - self.populated);
            self.populated = len;
        }
        bulk.room(len).expect("prepared for this length")
    }

    /// The call is over: drop a segment too large to keep.
    pub fn trim(&mut self) {
        if self.seg.as_ref().is_some_and(|(_, b)| !kept(b.len())) {
            self.seg = None;
        }
    }

    /// Bytes of segment held.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.seg.as_ref().map_or(0, |(_, b)| b.len())
    }
}

/// Whether a segment of `size` bytes stays between calls (both sides ask).
pub fn kept(size: usize) -> bool {
    size <= KEEP_MAX
}

/// Whether a private buffer of `capacity` bytes (a worker's arguments or
/// reply, a stub's scratch) stays between calls: as for segments, with room
/// for the framing around the largest data kept.
pub fn kept_buffer(capacity: usize) -> bool {
    capacity <= KEEP_MAX + 64 * 1024
}

/// The next generation after `g`: never 0 (which means "no segment").
fn next_generation(g: u32) -> u32 {
    match g.wrapping_add(1) {
        0 => 1,
        n => n,
    }
}

/// The reader's side of one slot's segment (mapped read-only).
#[derive(Default)]
pub(crate) struct Inbox {
    generation: u32,
    seg: Option<Bulk>,
}

impl Inbox {
    /// Whether generation `g` is the one mapped here.
    pub fn has(&self, g: u32) -> bool {
        g != 0 && self.generation == g && self.seg.is_some()
    }

    /// Take the peer's segment `fd` as generation `g`, after checking it is
    /// sealed against shrinking. At most the part a message of `max` bytes
    /// can use is mapped: a peer's huge sparse file costs nothing here.
    pub fn accept(&mut self, g: u32, fd: OwnedFd, max: usize) -> Result<(), &'static str> {
        self.seg = None;
        let size = sys::check_segment(fd.as_fd())?;
        let len = size.min(abi::segment_size(max));
        // Not populated: a hostile writer's huge sparse segment must cost
        // address space, not the work of mapping every page of it.
        let map = Mapping::map_read(fd.as_fd(), len).map_err(|_| "cannot map bulk segment")?;
        self.generation = g;
        self.seg = Some(Bulk::new(map));
        Ok(())
    }

    /// Append the first `len` bytes of the mapped segment to `dst`.
    pub fn read_into(&self, len: usize, dst: &mut Vec<u8>) -> Result<(), &'static str> {
        match &self.seg {
            Some(b) if len <= b.len() => {
                b.read_into(len, dst);
                Ok(())
            }
            Some(_) => Err("bulk data longer than its segment"),
            None => Err("bulk segment missing"),
        }
    }

    /// Append the first `len` bytes of the mapped segment to `dst` as the
    /// writer writes them: `written(need)` waits until at least `need`
    /// bytes from the start are written (or fails) and says how many are.
    /// Each part is copied once it is all there, while the writer writes
    /// the next.
    pub fn read_streamed(
        &self,
        len: usize,
        dst: &mut Vec<u8>,
        mut written: impl FnMut(usize) -> Result<usize, &'static str>,
    ) -> Result<(), &'static str> {
        let b = match &self.seg {
            Some(b) if len <= b.len() => b,
            Some(_) => return Err("bulk data longer than its segment"),
            None => return Err("bulk segment missing"),
        };
        dst.reserve(len);
        let mut done = 0;
        while done < len {
            let have = written((done + 8).min(len))?.min(len);
            // Parts start 8-aligned; the writer's own parts always do.
            let upto = if have == len { len } else { have / 8 * 8 };
            b.read_more(done, upto - done, dst);
            done = upto;
        }
        Ok(())
    }

    /// A view of the mapped segment holding at least `len` bytes, read in
    /// place (a door that trusts its callers, a caller reading its result
    /// where it lies): the view keeps the mapping however the segment is
    /// replaced meanwhile.
    pub fn view(&self, len: usize) -> Result<Bulk, &'static str> {
        match &self.seg {
            Some(b) if len <= b.len() => Ok(b.share()),
            Some(_) => Err("bulk data longer than its segment"),
            None => Err("bulk segment missing"),
        }
    }

    /// The call is over: drop a segment too large to keep (the writer drops
    /// its side by the same rule).
    pub fn trim(&mut self) {
        if self.seg.as_ref().is_some_and(|b| !kept(b.len())) {
            self.seg = None;
        }
    }
}

/// One slot's two segments, as one side sees them.
#[derive(Default)]
pub(crate) struct SlotBulk {
    /// The segment we write (arguments if we call, results if we serve).
    pub out: Outbox,
    /// The peer's segment we read.
    pub inb: Inbox,
}

#[cfg(test)]
mod tests {
    //! Segments between two "sides" of one process: what one writes the
    //! other reads, and what a peer could send wrong is refused.
    use super::*;

    #[test]
    fn what_the_writer_writes_the_reader_reads_across_growth() {
        let (mut out, mut inb) = (Outbox::default(), Inbox::default());
        let mut gens = Vec::new();
        for len in [6000, 60_000, 70_000, 65_536, 300_000, 7] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let (g, fd) = out.prepare(len).unwrap();
            if let Some(fd) = fd {
                let fd = fd.try_clone_to_owned().unwrap();
                inb.accept(g, fd, 1 << 30).unwrap();
            }
            assert!(inb.has(g));
            out.write(&data);
            let mut got = vec![1, 2, 3];
            inb.read_into(len, &mut got).unwrap();
            assert_eq!(&got[..3], &[1, 2, 3]);
            assert_eq!(&got[3..], &data[..], "len {len}");
            gens.push(g);
        }
        // 6000 and 60000 share the first 64 KiB segment, 70000..65536 the
        // second (128 KiB), 300000 a third; 7 bytes fit the third.
        assert_eq!(gens, [1, 1, 2, 2, 3, 3]);
    }

    #[test]
    fn large_segments_are_dropped_after_their_call_small_ones_kept() {
        let mut out = Outbox::default();
        out.prepare(1 << 20).unwrap();
        out.trim();
        assert_eq!(out.held(), 1 << 20);
        // Both sides decide by the same rule, on the segment's size.
        assert!(kept(KEEP_MAX) && !kept(KEEP_MAX + 4096));
    }

    #[test]
    fn a_segment_that_can_shrink_is_refused() {
        let fd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&fd, 65536).unwrap();
        let mut inb = Inbox::default();
        assert_eq!(
            inb.accept(1, fd, 1 << 20),
            Err("bulk segment is not sealed against shrinking")
        );
        assert!(!inb.has(1));
    }

    #[test]
    fn of_a_segment_larger_than_the_limit_only_what_the_limit_needs_is_mapped() {
        let fd = sys::sealed_memfd("t", 4 << 20).unwrap();
        let mut inb = Inbox::default();
        inb.accept(1, fd, 1 << 20).unwrap();
        assert_eq!(inb.seg.as_ref().map(Bulk::len), Some(1 << 20));
        let mut v = Vec::new();
        assert!(inb.read_into((1 << 20) + 1, &mut v).is_err());
        let odd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&odd, 5000).unwrap();
        rustix::fs::fcntl_add_seals(&odd, rustix::fs::SealFlags::SHRINK).unwrap();
        assert_eq!(
            inb.accept(2, odd, 1 << 20),
            Err("bulk segment has a size no call needs")
        );
    }

    #[test]
    fn a_length_beyond_the_segment_is_refused_not_read() {
        let fd = sys::sealed_memfd("t", 65536).unwrap();
        let mut inb = Inbox::default();
        inb.accept(4, fd, 1 << 20).unwrap();
        let mut v = Vec::new();
        assert_eq!(
            inb.read_into(65537, &mut v),
            Err("bulk data longer than its segment")
        );
        assert!(v.is_empty());
        assert_eq!(Inbox::default().read_into(1, &mut v), Err("bulk segment missing"));
    }

    /// A streamed segment is read part by part as its writer says the
    /// parts are there: progress that is not a multiple of 8, progress
    /// beyond the length, and a writer that fails midway (nothing more is
    /// read, the error is the writer's).
    #[test]
    fn a_streamed_segment_is_read_as_far_as_it_is_written() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let (mut out, mut inb) = (Outbox::default(), Inbox::default());
        let (g, fd) = out.prepare(data.len()).unwrap();
        let fd = fd.unwrap().try_clone_to_owned().unwrap();
        inb.accept(g, fd, 1 << 30).unwrap();
        out.write(&data);
        // Progress in odd steps: each wait asks for more than is read.
        let steps = [13usize, 21, 4096 + 3, 70_000, 70_001, 199_999, 1 << 40];
        let mut asked = Vec::new();
        let mut got = Vec::new();
        let mut next = steps.iter();
        inb.read_streamed(data.len(), &mut got, |need| {
            asked.push(need);
            Ok(*next.find(|&&s| s >= need).expect("enough steps"))
        })
        .unwrap();
        assert!(got == data, "the bytes read are the bytes written");
        assert!(
            asked.windows(2).all(|w| w[0] < w[1]),
            "each wait asks for more: {asked:?}"
        );
        // A writer that stops: the reader's error, with what it read kept.
        let mut got = Vec::new();
        let mut calls = 0;
        let r = inb.read_streamed(data.len(), &mut got, |_| {
            calls += 1;
            if calls == 1 { Ok(40_000) } else { Err("stalled") }
        });
        assert_eq!(r, Err("stalled"));
        assert_eq!(got, &data[..40_000]);
        // More than the segment holds is refused before any wait.
        let r = inb.read_streamed((1 << 30) + 1, &mut Vec::new(), |_| panic!("no wait"));
        assert!(r.is_err());
    }

    #[test]
    fn generations_skip_zero() {
        assert_eq!(next_generation(u32::MAX), 1);
        assert_eq!(next_generation(0), 1);
        assert_eq!(next_generation(5), 6);
    }
}
