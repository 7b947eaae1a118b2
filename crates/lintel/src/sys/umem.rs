//! Access to memory a peer can write while we read it.
//!
//! A call slot lives in a mapping shared with another process, which may be
//! hostile and may write any byte at any time. Plain loads and stores there
//! would be data races in Rust's model, so every access goes through atomics
//! (relaxed word loads and stores for data, acquire/release on the sequence
//! words) or, for copies of 256 bytes and more, through an assembly block
//! the compiler cannot see into (`copy_from_shared`: `rep movsb`, three
//! times as fast as the word loop at 64 KiB). Readers copy a request out
//! first, then validate the copy, then act on it; nothing is validated in
//! place and read twice. Header fields can
//! be read only through [`RequestHeader`] and [`ReplyHeader`], which copy
//! them once; [`Slot::get`] takes only the polled words ([`Polled`]).

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering::Relaxed};

use crate::abi::{
    AREA_HEADER, DATA_CAP, FLAG_ALERT, FLAG_BUFS, FLAG_DEADLINE, FLAG_VANILLA, INLINE, OFF_CLIENT_CPU,
    OFF_CLIENT_STATE, OFF_DATA, OFF_DEADLINE, OFF_FLAGS, OFF_GRANT, OFF_IN_BUFS, OFF_IN_DOORS, OFF_IN_INLINE,
    OFF_IN_LEN, OFF_IN_SEG, OFF_IN_STREAMED, OFF_OUT_BUFS, OFF_OUT_DOORS, OFF_OUT_INLINE, OFF_OUT_LEN,
    OFF_OUT_SEG, OFF_REP_SEQ, OFF_REQ_SEQ, OFF_SERVER_CPU, OFF_SERVER_STATE, OFF_STATUS, SLOT_SIZE, ST_OK,
};
use crate::sys::{Mapping, copy_from_shared, copy_part_to_peer, copy_to_peer};

/// The slot words that are polled: states and CPUs, which each side reads
/// to decide whether to spin or wake, and which mean nothing beyond that.
#[derive(Debug, Clone, Copy)]
pub enum Polled {
    ClientCpu = OFF_CLIENT_CPU as isize,
    ServerState = OFF_SERVER_STATE as isize,
    ServerCpu = OFF_SERVER_CPU as isize,
}

/// The words of the slot handshake (`handshake`): sequences and states,
/// stored and loaded with their own orderings and slept on with futexes.
#[derive(Debug, Clone, Copy)]
pub enum SyncWord {
    ReqSeq = OFF_REQ_SEQ as isize,
    RepSeq = OFF_REP_SEQ as isize,
    ClientState = OFF_CLIENT_STATE as isize,
    ServerState = OFF_SERVER_STATE as isize,
    /// Bytes of a streamed request's arguments written so far.
    InStreamed = OFF_IN_STREAMED as isize,
}

/// A request's header, copied out of the slot once: every decision about
/// the request is made on this copy.
#[derive(Debug, Clone, Copy)]
pub struct RequestHeader {
    pub grant: u32,
    pub flags: u32,
    pub in_len: u32,
    pub in_doors: u32,
    pub in_bufs: u32,
    pub deadline: u64,
}

impl RequestHeader {
    /// A request the fast path takes: at most [`INLINE`] bytes, inline; no
    /// doors, buffers or deadline; not forced vanilla ([`FLAG_ALERT`] is the
    /// only flag it may carry).
    #[inline(always)]
    pub fn is_inline(&self) -> bool {
        // `in_doors` above `in_len` in one word: any door makes it large.
        self.flags & !FLAG_ALERT == 0 && pair(self.in_len, self.in_doors) <= INLINE as u64
    }

    /// A request that carries only bytes in the slot's data region (at
    /// most [`DATA_CAP`]): no doors, buffers, deadline or alert, written by
    /// the caller's checked path ([`FLAG_VANILLA`]).
    #[inline]
    pub fn is_plain_data(&self) -> bool {
        self.flags == FLAG_VANILLA
            && self.in_doors == 0
            && self.in_bufs == 0
            && self.in_len as usize <= DATA_CAP
    }

    #[inline(always)]
    pub fn read(slot: &Slot) -> RequestHeader {
        let at = slot.at();
        let (grant, flags) = halves(at.w64(OFF_GRANT).load(Relaxed));
        let (in_len, in_doors) = halves(at.w64(OFF_IN_LEN).load(Relaxed));
        RequestHeader {
            grant,
            flags,
            in_len,
            in_doors,
            in_bufs: if flags & FLAG_BUFS != 0 {
                at.w32(OFF_IN_BUFS).load(Relaxed)
            } else {
                0
            },
            deadline: if flags & FLAG_DEADLINE != 0 {
                at.w64(OFF_DEADLINE).load(Relaxed)
            } else {
                0
            },
        }
    }

    /// The caller's side: an inline request (the fast path's) of `data` with
    /// no doors, in five stores (six with a deadline).
    #[inline(always)]
    pub fn write_inline(slot: &Slot, grant: u32, flags: u32, data: &[u8], cpu: u32, deadline: u64) {
        Self::write_packed(slot, grant, flags, Packed::of(data), cpu, deadline);
    }

    /// [`RequestHeader::write_inline`] of bytes already [`Packed`].
    #[inline(always)]
    pub fn write_packed(slot: &Slot, grant: u32, flags: u32, data: Packed, cpu: u32, deadline: u64) {
        let Packed { lo, hi, len } = data;
        let at = slot.at();
        let flags = if deadline != 0 {
            at.w64(OFF_DEADLINE).store(deadline, Relaxed);
            flags | FLAG_DEADLINE
        } else {
            flags
        };
        at.w64(OFF_GRANT).store(pair(grant, flags), Relaxed);
        at.w64(OFF_IN_LEN).store(pair(len, 0), Relaxed);
        at.w64(OFF_IN_INLINE).store(lo, Relaxed);
        at.w64(OFF_IN_INLINE + 8).store(hi, Relaxed);
        at.w32(OFF_CLIENT_CPU).store(cpu, Relaxed);
    }

    /// The caller's side of a request of `data` (at most [`DATA_CAP`]
    /// bytes) in the data region and nothing else: the header the server's
    /// [`RequestHeader::is_plain_data`] takes, no deadline, doors or
    /// buffers. (Bulk segment, deadline and buffer words are read only
    /// when the header says so, and are not written.)
    #[inline]
    pub fn write_data(slot: &Slot, grant: u32, flags: u32, data: &[u8], cpu: u32) {
        slot.write(OFF_DATA, data);
        let at = slot.at();
        at.w64(OFF_GRANT).store(pair(grant, flags), Relaxed);
        at.w64(OFF_IN_LEN).store(pair(data.len() as u32, 0), Relaxed);
        at.w32(OFF_CLIENT_CPU).store(cpu, Relaxed);
    }
}

// Header words that travel in pairs, as one 64-bit access.
const _: () = assert!(
    OFF_FLAGS == OFF_GRANT + 4
        && OFF_IN_DOORS == OFF_IN_LEN + 4
        && OFF_OUT_DOORS == OFF_OUT_LEN + 4
        && OFF_GRANT.is_multiple_of(8)
        && OFF_IN_LEN.is_multiple_of(8)
        && OFF_OUT_LEN.is_multiple_of(8)
        && cfg!(target_endian = "little")
);

/// Two 32-bit header words as the 64-bit word they make in the slot
/// (the first at the lower address).
#[inline(always)]
fn pair(first: u32, second: u32) -> u64 {
    u64::from(first) | u64::from(second) << 32
}

/// The inverse of [`pair`].
#[inline(always)]
fn halves(w: u64) -> (u32, u32) {
    (w as u32, (w >> 32) as u32)
}

impl RequestHeader {
    /// Generation of the caller's bulk segment holding the arguments, read
    /// once by the bulk path (meaningful when `in_len` exceeds [`DATA_CAP`](crate::abi::DATA_CAP);
    /// not part of the header the fast path reads).
    pub fn segment(slot: &Slot) -> u32 {
        slot.word(OFF_IN_SEG).load(Relaxed)
    }
}

impl ReplyHeader {
    /// Generation of the server's bulk segment holding the results, read
    /// once by the bulk path (meaningful when `out_len` exceeds [`DATA_CAP`](crate::abi::DATA_CAP)).
    pub fn segment(slot: &Slot) -> u32 {
        slot.word(OFF_OUT_SEG).load(Relaxed)
    }
}

/// A reply's header, copied out of the slot once.
#[derive(Debug, Clone, Copy)]
pub struct ReplyHeader {
    pub status: u32,
    pub out_len: u32,
    pub out_doors: u32,
    pub out_bufs: u32,
}

impl ReplyHeader {
    #[inline(always)]
    pub fn read(slot: &Slot) -> ReplyHeader {
        let at = slot.at();
        let (out_len, out_doors) = halves(at.w64(OFF_OUT_LEN).load(Relaxed));
        ReplyHeader {
            status: at.w32(OFF_STATUS).load(Relaxed),
            out_len,
            out_doors,
            out_bufs: at.w32(OFF_OUT_BUFS).load(Relaxed),
        }
    }

    /// The server's side of an inline reply (the fast path's): `data`
    /// inline (≤ 16 bytes; none stored for none). With
    /// [`ReplyHeader::write_inline_header`] of its length, unless the header
    /// holds that already.
    #[inline(always)]
    pub fn write_inline_data(slot: &Slot, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let at = slot.at();
        let (lo, hi) = pack_inline(data);
        at.w64(OFF_OUT_INLINE).store(lo, Relaxed);
        at.w64(OFF_OUT_INLINE + 8).store(hi, Relaxed);
    }

    /// An inline reply's header: `ST_OK`, `len` bytes inline, no doors or
    /// buffers.
    #[inline]
    pub fn write_inline_header(slot: &Slot, len: u32) {
        let at = slot.at();
        at.w64(OFF_OUT_LEN).store(pair(len, 0), Relaxed);
        at.w32(OFF_OUT_BUFS).store(0, Relaxed);
        at.w32(OFF_STATUS).store(ST_OK, Relaxed);
    }
}

/// Up to [`INLINE`] bytes as the two words they travel in ([`pack_inline`]),
/// and their length.
#[derive(Clone, Copy)]
pub(crate) struct Packed {
    pub lo: u64,
    pub hi: u64,
    pub len: u32,
}

impl Packed {
    /// `data` (at most [`INLINE`] bytes) packed.
    #[inline(always)]
    pub fn of(data: &[u8]) -> Packed {
        let (lo, hi) = pack_inline(data);
        Packed {
            lo,
            hi,
            len: data.len() as u32,
        }
    }
}

/// One slot of a call area. Keeps the mapping alive.
#[derive(Clone)]
pub struct Slot {
    _map: Arc<Mapping>,
    base: *mut u8,
}

// SAFETY: `base` points into `map`, which is Send + Sync and kept alive by
// the Arc; all access through it is atomic.
unsafe impl Send for Slot {}
// SAFETY: as above.
unsafe impl Sync for Slot {}

impl Slot {
    /// Slot `i` of a call area (the layout in [`crate::abi`]); panics if
    /// `map` is not a whole area or `i` is out of range (a local bug).
    pub fn of_area(map: &Arc<Mapping>, i: u32) -> Slot {
        Slot::new(map.clone(), AREA_HEADER + i as usize * SLOT_SIZE).expect("slot index in range")
    }

    /// The slot at byte `offset` of `map`; `None` if it does not fit.
    pub fn new(map: Arc<Mapping>, offset: usize) -> Option<Slot> {
        if !offset.is_multiple_of(64) || offset.checked_add(SLOT_SIZE)? > map.len() {
            return None;
        }
        // SAFETY: offset + SLOT_SIZE <= len, so the result stays in bounds.
        let base = unsafe { map.base().add(offset) };
        Some(Slot { _map: map, base })
    }

    /// One of the handshake's words.
    #[inline(always)]
    pub fn sync(&self, w: SyncWord) -> &AtomicU32 {
        self.word(w as usize)
    }

    /// The 32-bit word at `off` (4-aligned, inside the slot).
    #[inline(always)]
    fn word(&self, off: usize) -> &AtomicU32 {
        self.at().w32(off)
    }

    /// The slot's address, held in a register for a run of accesses.
    #[inline(always)]
    fn at(&self) -> At<'_> {
        At {
            base: self.base,
            _slot: PhantomData,
        }
    }

    /// One of the words that are read again and again by design (see
    /// [`Polled`]). Request and reply headers are not among them: they are
    /// read once, through [`RequestHeader`] and [`ReplyHeader`].
    #[inline(always)]
    pub fn get(&self, w: Polled) -> u32 {
        self.word(w as usize).load(Relaxed)
    }

    #[inline(always)]
    pub fn set(&self, off: usize, v: u32) {
        self.word(off).store(v, Relaxed)
    }

    /// The 64-bit word at `off` (8-aligned, inside the slot).
    #[inline(always)]
    fn get64(&self, off: usize) -> u64 {
        Self::range(off, 8);
        self.word64(off).load(Relaxed)
    }

    #[inline(always)]
    pub fn set64(&self, off: usize, v: u64) {
        Self::range(off, 8);
        self.word64(off).store(v, Relaxed)
    }

    /// The inline field at `off`, copied out in two loads.
    #[inline(always)]
    pub fn read_inline(&self, off: usize) -> [u8; INLINE] {
        let mut b = [0u8; INLINE];
        b[..8].copy_from_slice(&self.get64(off).to_le_bytes());
        b[8..].copy_from_slice(&self.get64(off + 8).to_le_bytes());
        b
    }

    #[inline(always)]
    fn word64(&self, off: usize) -> &AtomicU64 {
        self.at().w64(off)
    }

    #[inline(always)]
    fn byte(&self, off: usize) -> &AtomicU8 {
        debug_assert!(off < SLOT_SIZE);
        // SAFETY: in bounds (checked by `range`); any address is aligned for u8.
        unsafe { &*(self.base.add(off) as *const AtomicU8) }
    }

    #[inline(always)]
    fn range(off: usize, len: usize) {
        assert!(
            off.is_multiple_of(8) && off + len <= SLOT_SIZE,
            "slot access out of bounds"
        );
    }

    /// Copy `dst.len()` bytes out of the slot at `off` (8-aligned).
    #[inline]
    pub fn read(&self, off: usize, dst: &mut [u8]) {
        Self::range(off, dst.len());
        // SAFETY: in bounds (checked); `dst` is private and ours alone.
        if unsafe { copy_from_shared(dst.as_mut_ptr(), self.base.add(off), dst.len()) } {
            return;
        }
        let mut chunks = dst.chunks_exact_mut(8);
        let mut o = off;
        for c in &mut chunks {
            c.copy_from_slice(&self.word64(o).load(Relaxed).to_ne_bytes());
            o += 8;
        }
        for b in chunks.into_remainder() {
            *b = self.byte(o).load(Relaxed);
            o += 1;
        }
    }

    /// Append `len` bytes of the slot from `off` (8-aligned) to `dst`,
    /// without zeroing them first where the copy is long (a 1 KiB call's
    /// arguments and result: a `memset` fewer on each side).
    #[inline]
    pub fn read_into(&self, off: usize, len: usize, dst: &mut Vec<u8>) {
        Self::range(off, len);
        let start = dst.len();
        if len >= 256 {
            dst.reserve(len);
            // SAFETY: in bounds (checked); the destination is `len` bytes
            // of `dst`'s spare capacity (reserved above), private and ours
            // alone, which the new length covers only once written.
            unsafe {
                if copy_from_shared(dst.as_mut_ptr().add(start), self.base.add(off), len) {
                    dst.set_len(start + len);
                    return;
                }
            }
        }
        dst.resize(start + len, 0);
        self.read(off, &mut dst[start..]);
    }

    /// Copy `src` into the slot at `off` (8-aligned). Short copies store
    /// words; longer ones `memcpy`, and from
    /// [`PEER_SENSED_MIN`](crate::sys::PEER_SENSED_MIN) as far as the
    /// peer's CPU is sensed to be ([`copy_to_peer`]): the peer reads them
    /// word by word, and what it reads while we write is its own problem,
    /// never ours.
    #[inline]
    pub fn write(&self, off: usize, src: &[u8]) {
        Self::range(off, src.len());
        if src.len() >= 256 {
            // SAFETY: in bounds (checked); the slot is writable shared
            // memory that no reference points into, and `src` is private.
            unsafe { copy_to_peer(self.base.add(off), src.as_ptr(), src.len()) };
            return;
        }
        let mut chunks = src.chunks_exact(8);
        let mut o = off;
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.word64(o).store(u64::from_ne_bytes(w), Relaxed);
            o += 8;
        }
        for &b in chunks.remainder() {
            self.byte(o).store(b, Relaxed);
            o += 1;
        }
    }
}

/// A slot's address for a run of accesses. Read out of the [`Slot`] once:
/// after a store through one of the slot's atomics the compiler cannot tell
/// that the `Slot` itself is unchanged, and would load its address again
/// for every access.
#[derive(Clone, Copy)]
struct At<'a> {
    base: *mut u8,
    _slot: PhantomData<&'a Slot>,
}

impl<'a> At<'a> {
    /// The 32-bit word at `off` (4-aligned, inside the slot).
    #[inline(always)]
    fn w32(self, off: usize) -> &'a AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= SLOT_SIZE);
        // SAFETY: in bounds and aligned (checked above; base is 64-aligned);
        // AtomicU32 has the layout of u32 and tolerates concurrent writers;
        // the reference borrows the `Slot`, which keeps the mapping alive.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    /// The 64-bit word at `off` (8-aligned, inside the slot).
    #[inline(always)]
    fn w64(self, off: usize) -> &'a AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= SLOT_SIZE);
        // SAFETY: as for `w32`, with 8-byte alignment (checked above).
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }
}

/// Room in the writer's own bulk segment for one result that a handler
/// writes in place (`Reply::data_in_place`), instead of into a `Vec` the
/// server then copies into the segment. The peer maps the segment
/// read-only, and this domain writes it only through the one `Room` the
/// call's worker made (it writes the reply header after the handler
/// returns, using the room's bytes as they are); the view keeps the
/// mapping alive however the segment is replaced meanwhile.
pub struct Room {
    view: Bulk,
    len: usize,
}

impl Room {
    /// The room's bytes, to write.
    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes from the view's start lie in the mapping
        // (checked in `Bulk::room` and `Bulk::range`); the segment is ours
        // to write and nothing else here reads or writes it through a
        // reference while this borrow of the room lives (see the type's
        // doc); the peer's reads are outside this process.
        unsafe { std::slice::from_raw_parts_mut(self.view.base(), self.len) }
    }

    #[allow(clippy::len_without_is_empty)] // a room is never empty (it is for a large result)
    pub fn len(&self) -> usize {
        self.len
    }
}

/// A bulk segment mapped here (see [`crate::abi`]): arguments or results
/// larger than a slot's data region. Bytes are copied in and out, like the
/// slot's, and never referenced: the reader's segment is the peer's to
/// write at any time.
///
/// The word loop also runs at full speed whatever the two buffers'
/// alignment, where glibc's `memcpy` here (`rep movsb`) slows ten-fold when
/// source and destination sit a few bytes apart modulo 4 KiB, which a
/// page-aligned segment and a large `Vec` (16 bytes into its page) do.
///
/// A `Bulk` is also a view of part of a mapping: a loan's pages in a loan
/// pool ([`Bulk::range`]).
pub struct Bulk {
    map: Arc<Mapping>,
    /// Where the view starts (8-aligned) and how long it is (a multiple of 8).
    off: usize,
    len: usize,
}

impl Bulk {
    /// A whole segment mapping (page-aligned, a multiple of 8 bytes long).
    pub fn new(map: Mapping) -> Bulk {
        let len = map.len();
        Bulk::range(Arc::new(map), 0, len).expect("a whole mapping is a range of itself")
    }

    /// `len` bytes of `map` from `off`; `None` unless both are multiples of
    /// 8 and the range lies inside the mapping.
    pub fn range(map: Arc<Mapping>, off: usize, len: usize) -> Option<Bulk> {
        let aligned =
            off.is_multiple_of(8) && len.is_multiple_of(8) && (map.base() as usize).is_multiple_of(8);
        (aligned && off.checked_add(len)? <= map.len()).then_some(Bulk { map, off, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Another view of the same bytes (the mapping stays while either
    /// lives).
    pub fn share(&self) -> Bulk {
        Bulk {
            map: self.map.clone(),
            off: self.off,
            len: self.len,
        }
    }

    /// An empty slice at the view's start: a key that names this view
    /// (no other slice in this process starts in a peer's segment), never
    /// a way to read it.
    pub fn empty_at_start(&self) -> &'static [u8] {
        // SAFETY: zero bytes at a non-null address (inside a live
        // mapping): an empty slice reads nothing, so any lifetime is sound.
        unsafe { std::slice::from_raw_parts(self.base(), 0) }
    }

    /// The first `len` bytes of this view, to be written in place as a
    /// [`Room`]; `None` if the view is shorter. For the writer's own
    /// segment only (mapped writable here, read-only by the peer).
    pub fn room(&self, len: usize) -> Option<Room> {
        (len <= self.len).then(|| Room {
            view: Bulk {
                map: self.map.clone(),
                off: self.off,
                len: self.len,
            },
            len,
        })
    }

    #[inline(always)]
    fn base(&self) -> *mut u8 {
        // SAFETY: `off` lies inside the mapping (checked in `range`).
        unsafe { self.map.base().add(self.off) }
    }

    /// The view's words, for `n` words from its start.
    #[inline(always)]
    fn words(&self, n: usize) -> &[AtomicU64] {
        assert!(n <= self.len / 8, "bulk access beyond the segment");
        // SAFETY: `n` words from the 8-aligned start lie inside the view,
        // and so the mapping (checked above and in `range`); AtomicU64 has
        // u64's layout and tolerates a concurrent writer (the peer, on its
        // side); the slice borrows `self`, whose Arc keeps the mapping alive.
        unsafe { std::slice::from_raw_parts(self.base() as *const AtomicU64, n) }
    }

    /// Make the view's pages in `[off, off + len)` at once, for writing
    /// (best effort; see [`Mapping::populate_write`]).
    pub fn populate_write(&self, off: usize, len: usize) {
        self.map.populate_write(self.off + off, len);
    }

    /// Byte `i` of the view, read once.
    pub fn byte(&self, i: usize) -> u8 {
        assert!(i < self.len, "bulk access beyond the segment");
        // SAFETY: in bounds (checked above); AtomicU8 tolerates a
        // concurrent writer; the reference does not outlive `self`.
        unsafe { &*(self.base().add(i) as *const AtomicU8) }.load(Relaxed)
    }

    /// The view as plain bytes.
    ///
    /// # Safety
    ///
    /// As for [`as_mut_slice`](Self::as_mut_slice): nobody may write the
    /// view while the slice lives.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: in bounds (checked in `range`); unchanging by the
        // caller's contract; borrows `self`, which keeps the mapping alive.
        unsafe { std::slice::from_raw_parts(self.base(), self.len) }
    }

    /// The view as plain bytes, to write in place.
    ///
    /// # Safety
    ///
    /// The view must be of memory nobody else writes or reads through a
    /// reference while the slice lives: a range of this domain's own loan
    /// pool that it has not lent out (peers map the pool read-only).
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: in bounds (checked in `range`); exclusive by the
        // caller's contract; borrows `self`, which keeps the mapping alive.
        unsafe { std::slice::from_raw_parts_mut(self.base(), self.len) }
    }

    /// Copy `src` to the start of the segment (mapped writable: ours).
    ///
    /// The peer maps the segment read-only, so nobody else writes it. From
    /// [`PEER_SENSED_MIN`](crate::sys::PEER_SENSED_MIN) bytes, as
    /// [`copy_part_to_peer`] copies: as far as the peer's CPU is sensed to
    /// be, and from [`PEER_COPY_MIN`](crate::sys::PEER_COPY_MIN) around
    /// the caches, up to
    /// [`PEER_STREAM_MAX`](crate::sys::PEER_STREAM_MAX) in all (a reader of
    /// a segment may read it as it is written, and results read after are
    /// no faster around the caches at 1 MiB). Shorter copies with `memcpy`,
    /// whose wide stores take a line from the reader's CPU about twice as
    /// fast as word stores do (64 KiB: 7 → 3.5 µs here). When the
    /// destination lies just past the source modulo 4 KiB, where glibc's
    /// `memcpy` slows ten-fold, words are stored instead.
    pub fn write(&self, src: &[u8]) {
        self.write_at(0, src);
    }

    /// [`write`](Self::write) at byte `off` of the view (a multiple of 8).
    pub fn write_at(&self, off: usize, src: &[u8]) {
        self.write_part(off, src, src.len());
    }

    /// [`write_at`](Self::write_at) of one part of a transfer of `whole`
    /// bytes ([`copy_part_to_peer`]).
    pub fn write_part(&self, off: usize, src: &[u8], whole: usize) {
        assert!(
            off.is_multiple_of(8) && off.checked_add(src.len()).is_some_and(|end| end <= self.len),
            "bulk write beyond the segment"
        );
        // SAFETY: `off` lies inside the view (checked above).
        let dst = unsafe { self.base().add(off) };
        if src.len() >= crate::sys::PEER_SENSED_MIN {
            // SAFETY: as for the `memcpy` below.
            unsafe { copy_part_to_peer(dst, src.as_ptr(), src.len(), whole) };
            return;
        }
        let gap = (dst as usize).wrapping_sub(src.as_ptr() as usize) % 4096;
        if (1..=64).contains(&gap) {
            return self.write_words(off, src);
        }
        // SAFETY: the destination is `src.len()` bytes inside our mapping
        // (checked above), which no Rust reference points into, and which
        // the peer maps read-only: nobody else writes it while we do.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
    }

    fn write_words(&self, off: usize, src: &[u8]) {
        let words = &self.words((off + src.len()).div_ceil(8))[off / 8..];
        let mut chunks = src.chunks_exact(8);
        for (w, c) in words.iter().zip(&mut chunks) {
            w.store(u64::from_ne_bytes(c.try_into().expect("8 bytes")), Relaxed);
        }
        let tail = chunks.remainder();
        if !tail.is_empty() {
            let mut b = [0u8; 8];
            b[..tail.len()].copy_from_slice(tail);
            words[words.len() - 1].store(u64::from_ne_bytes(b), Relaxed);
        }
    }

    /// Copy the first `dst.len()` bytes of the view into `dst`.
    pub fn read_to(&self, dst: &mut [u8]) {
        // SAFETY: `dst` is a private buffer of that length that `&mut`
        // gives us alone.
        unsafe { self.read_raw(dst.as_mut_ptr(), dst.len()) }
    }

    /// Copy `dst.len()` bytes of the view from byte `off` into `dst`, at any
    /// offset: `rep movsb` where that is the fast way, else the unaligned
    /// ends byte by byte and the middle by atomic words. Panics if the
    /// range is not inside the view.
    pub fn read_at(&self, off: usize, dst: &mut [u8]) {
        let len = dst.len();
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len),
            "bulk access beyond the segment"
        );
        // SAFETY: `off + len` bytes lie inside the view (checked above), so
        // `base + off` is readable for `len` bytes; `dst` is a private
        // buffer of that length that `&mut` gives us alone.
        if unsafe { copy_from_shared(dst.as_mut_ptr(), self.base().add(off), len) } {
            return;
        }
        let head = off.next_multiple_of(8).min(off + len) - off;
        for (i, d) in dst[..head].iter_mut().enumerate() {
            *d = self.byte(off + i);
        }
        let words = (len - head) / 8;
        let first = (off + head) / 8;
        let view = &self.words(first + words)[first..];
        for (w, chunk) in view.iter().zip(dst[head..head + words * 8].chunks_exact_mut(8)) {
            chunk.copy_from_slice(&w.load(Relaxed).to_ne_bytes());
        }
        let tail = head + words * 8;
        for (i, d) in dst[tail..].iter_mut().enumerate() {
            *d = self.byte(off + tail + i);
        }
    }

    /// Append the first `len` bytes of the segment to `dst`: one pass, no
    /// zeroing first.
    pub fn read_into(&self, len: usize, dst: &mut Vec<u8>) {
        dst.reserve(len);
        let start = dst.len();
        // SAFETY: `len` bytes of `dst`'s spare capacity (reserved above),
        // which no reference points into; `read_raw` writes them all, so
        // the new length covers initialized bytes only.
        unsafe {
            self.read_raw(dst.as_mut_ptr().add(start), len);
            dst.set_len(start + len);
        }
    }

    /// Append `len` bytes of the view from byte `off` (a multiple of 8) to
    /// `dst`, as [`read_into`](Self::read_into) does from the start.
    pub fn read_more(&self, off: usize, len: usize, dst: &mut Vec<u8>) {
        let part = (off <= self.len)
            .then(|| Bulk::range(self.map.clone(), self.off + off, self.len - off))
            .flatten()
            .expect("bulk access beyond the segment, or at an offset not a multiple of 8");
        part.read_into(len, dst);
    }

    /// Copy the first `len` bytes of the view to `dst`: `rep movsb` where
    /// that is the fast way (`copy_from_shared`), else by atomic words.
    /// Panics if the view is shorter.
    ///
    /// # Safety
    ///
    /// `dst` is writable for `len` bytes, and no reference points into it.
    unsafe fn read_raw(&self, dst: *mut u8, len: usize) {
        let words = self.words(len.div_ceil(8));
        // SAFETY: the view holds `len` bytes (checked by `words`); `dst` by
        // the caller's contract.
        if unsafe { copy_from_shared(dst, self.base(), len) } {
            return;
        }
        let out = dst as *mut [u8; 8];
        for (i, w) in words[..len / 8].iter().enumerate() {
            // SAFETY: whole 8-byte chunk `i` of `dst` (below `len / 8`); an
            // unaligned write of `[u8; 8]` (alignment 1) is always allowed.
            unsafe { out.add(i).write(w.load(Relaxed).to_ne_bytes()) };
        }
        if !len.is_multiple_of(8) {
            let b = words[len / 8].load(Relaxed).to_ne_bytes();
            for (j, v) in b.iter().take(len % 8).enumerate() {
                // SAFETY: byte `len / 8 * 8 + j` is below `len`.
                unsafe { dst.add(len / 8 * 8 + j).write(*v) };
            }
        }
    }
}

/// Up to [`INLINE`] bytes as two little-endian words, zero-padded, read
/// with a few overlapping loads rather than a `memcpy` call of a length
/// known only at run time (a dozen instructions a side on the null call).
#[inline(always)]
fn pack_inline(src: &[u8]) -> (u64, u64) {
    let n = src.len();
    assert!(n <= INLINE, "{n} bytes do not fit inline");
    let word = |at: usize| u64::from_le_bytes(src[at..at + 8].try_into().expect("8 bytes"));
    let half = |at: usize| u64::from(u32::from_le_bytes(src[at..at + 4].try_into().expect("4 bytes")));
    match n {
        // The last 8 bytes, shifted down so only those past the first 8 stay.
        9.. => (word(0), word(n - 8) >> (8 * (16 - n))),
        8 => (word(0), 0),
        // Likewise with the last 4 bytes past the first 4.
        4.. => (half(0) | (half(n - 4) >> (8 * (8 - n)) << 32), 0),
        1.. => {
            let b = |i: usize| u64::from(src[i]) << (8 * i);
            (b(0) | b(n / 2) | b(n - 1), 0)
        }
        0 => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::FLAG_VANILLA;

    proptest::proptest! {
        #[test]
        fn inline_payloads_pack_as_bytes_then_zeros(src in proptest::collection::vec(proptest::num::u8::ANY, 0..=INLINE)) {
            let (lo, hi) = pack_inline(&src);
            let mut want = [0u8; INLINE];
            want[..src.len()].copy_from_slice(&src);
            let mut got = [0u8; INLINE];
            got[..8].copy_from_slice(&lo.to_le_bytes());
            got[8..].copy_from_slice(&hi.to_le_bytes());
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn bulk_reads_at_any_offset_give_the_bytes_there() {
        let fd = crate::sys::sealed_memfd("t", 1 << 16).unwrap();
        let b = Bulk::new(Mapping::map(std::os::fd::AsFd::as_fd(&fd), 1 << 16).unwrap());
        let src: Vec<u8> = (0..(1u32 << 16)).map(|i| (i * 31 + i / 256) as u8).collect();
        b.write(&src);
        for off in [0, 1, 5, 8, 13, 4095, 4096, 40_000] {
            for len in [0, 1, 7, 8, 9, 17, 255, 256, 3000, 20_000] {
                let mut got = vec![0xee; len + 1];
                b.read_at(off, &mut got[1..]);
                assert_eq!(&got[1..], &src[off..off + len], "offset {off}, {len} bytes");
                assert_eq!(got[0], 0xee, "read_at wrote before its slice");
            }
        }
        let mut past = [0u8; 2];
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            b.read_at((1 << 16) - 1, &mut past)
        }));
        assert!(r.is_err(), "a read past the view must panic, not read on");
    }

    /// Parts written at 8-aligned offsets, by memcpy or by words, read
    /// back from those offsets (a streamed request's parts).
    #[test]
    fn bulk_parts_write_and_read_back_where_they_were_put() {
        let fd = crate::sys::sealed_memfd("t", 1 << 16).unwrap();
        let b = Bulk::new(Mapping::map(std::os::fd::AsFd::as_fd(&fd), 1 << 16).unwrap());
        let src: Vec<u8> = (0..30_000u32).map(|i| (i * 29 + 5) as u8).collect();
        for (at, len) in [
            (0usize, 100usize),
            (8, 4096),
            (4096, 9999),
            (32_768, 30_000),
            (65_528, 8),
        ] {
            for words in [false, true] {
                let part = &src[..len];
                if words {
                    b.write_words(at, part);
                } else {
                    b.write_at(at, part);
                }
                let mut got = vec![0xee];
                b.read_more(at, len, &mut got);
                assert_eq!(&got[1..], part, "at {at}, {len} bytes, words {words}");
            }
        }
        let r = std::panic::catch_unwind(|| b.write_at(65_528, &[0; 9]));
        assert!(r.is_err(), "a write past the view must panic");
        let r = std::panic::catch_unwind(|| b.write_at(3, &[0; 1]));
        assert!(r.is_err(), "a part at an offset not a multiple of 8 must panic");
    }

    #[test]
    fn bulk_writes_and_reads_back_at_every_alignment() {
        let fd = crate::sys::sealed_memfd("t", 1 << 16).unwrap();
        let b = Bulk::new(Mapping::map(std::os::fd::AsFd::as_fd(&fd), 1 << 16).unwrap());
        let src: Vec<u8> = (0..20_000u32).map(|i| (i * 13) as u8).collect();
        for off in [0, 1, 7, 8, 16, 63, 100, 4095] {
            for len in [0, 1, 9, 4096, 9999] {
                let part = &src[off..off + len];
                for words in [false, true] {
                    if words {
                        b.write_words(0, part);
                    } else {
                        b.write(part);
                    }
                    let mut got = vec![0xee];
                    b.read_into(len, &mut got);
                    assert_eq!(&got[1..], part, "offset {off}, {len} bytes, words {words}");
                    let mut to = vec![0xee; len + 1];
                    b.read_to(&mut to[1..]);
                    assert_eq!(
                        &to[1..],
                        part,
                        "read_to: offset {off}, {len} bytes, words {words}"
                    );
                    assert_eq!(to[0], 0xee, "read_to wrote before its slice");
                }
            }
        }
    }

    fn slot() -> Slot {
        let fd = crate::sys::sealed_memfd("t", 2 * SLOT_SIZE).unwrap();
        let map = Arc::new(Mapping::map(std::os::fd::AsFd::as_fd(&fd), 2 * SLOT_SIZE).unwrap());
        Slot::new(map, SLOT_SIZE).unwrap()
    }

    #[test]
    fn round_trips_unaligned_lengths() {
        let s = slot();
        for len in [0, 1, 7, 8, 9, 16, 100, 5120] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            s.write(128, &src);
            let mut dst = vec![0u8; len];
            s.read(128, &mut dst);
            assert_eq!(src, dst);
            let mut appended = vec![0xee];
            s.read_into(128, len, &mut appended);
            assert_eq!(appended[0], 0xee, "read_into wrote over what was there");
            assert_eq!(appended[1..], src, "read_into of {len} bytes");
        }
    }

    #[test]
    fn inline_requests_carry_a_deadline_only_when_flagged() {
        let s = slot();
        RequestHeader::write_inline(&s, 7, FLAG_ALERT, b"abc", 1, 12345);
        let h = RequestHeader::read(&s);
        assert_eq!((h.grant, h.in_len, h.deadline), (7, 3, 12345));
        assert_eq!(h.flags, FLAG_ALERT | FLAG_DEADLINE);
        assert!(!h.is_inline(), "a call with a deadline leaves the fast path");
        // The next call has none: the old deadline still in the word is not read.
        RequestHeader::write_inline(&s, 7, 0, b"abc", 1, 0);
        let h = RequestHeader::read(&s);
        assert_eq!((h.flags, h.deadline), (0, 0));
        assert!(h.is_inline());
    }

    #[test]
    fn only_inline_door_free_requests_are_inline() {
        let s = slot();
        RequestHeader::write_inline(&s, 1, FLAG_ALERT, &[9; INLINE], 0, 0);
        assert!(
            RequestHeader::read(&s).is_inline(),
            "an alert keeps the fast path"
        );
        let large = |flags: u32, len: u32, doors: u32| {
            s.set(OFF_FLAGS, flags);
            s.set(OFF_IN_LEN, len);
            s.set(OFF_IN_DOORS, doors);
            !RequestHeader::read(&s).is_inline()
        };
        assert!(large(0, INLINE as u32 + 1, 0));
        assert!(large(0, 0, 1));
        assert!(large(0, 0, u32::MAX));
        assert!(large(FLAG_VANILLA, 0, 0));
        assert!(large(FLAG_BUFS, 0, 0));
        assert!(large(1 << 31, 0, 0), "an unknown flag is not the fast path's");
        assert!(!large(0, INLINE as u32, 0));
    }

    #[test]
    fn refuses_slots_outside_the_mapping() {
        let fd = crate::sys::sealed_memfd("t", SLOT_SIZE).unwrap();
        let map = Arc::new(Mapping::map(std::os::fd::AsFd::as_fd(&fd), SLOT_SIZE).unwrap());
        assert!(Slot::new(map.clone(), 64).is_none());
        assert!(Slot::new(map, 0).is_some());
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn out_of_bounds_access_panics_locally() {
        let s = slot();
        let mut big = vec![0u8; SLOT_SIZE];
        s.read(128, &mut big);
    }
}
