//! Buffers passed by reference: bulk data that is not copied.
//!
//! A call copies its bytes (`data`, any size up to the message limit). For
//! data that should not be copied, a call can also carry [`Buffer`]s
//! ([`Door::call_with`](crate::Door::call_with), [`Request::buffers`](crate::Request),
//! [`Reply::buffers`](crate::Reply)), of two kinds, beside plain file
//! descriptors ([`Buffer::Fd`], which is how a service hands out shared
//! memory or an event to its client; the stubs pass `OwnedFd` values):
//!
//! - **[`Sealed`] snapshots**: a memfd its writer fills, then seals against
//!   writing ([`SealedWriter::seal`]). Nobody, not even the writer, can
//!   change the bytes afterwards, so the receiver may validate them in place
//!   and keep them ([`Sealed::as_slice`] is a plain `&[u8]`). Passing costs a
//!   descriptor and a mapping; sealing costs an `munmap` of the writer's
//!   pages (about as much per byte as copying, here).
//! - **Shared loans**: a range of this domain's loan arena, one memfd mapped
//!   here writable and by each peer read-only. The lender writes in place
//!   ([`Loan::as_mut_slice`]) and passes it; the receiver gets a [`Loaned`],
//!   owns it, may keep it past the call, and gives it back by dropping it.
//!   Passing costs the same at any size. The lender could still change the
//!   bytes (it is hostile or buggy), so a `Loaned` has no `&[u8]`: its bytes
//!   are copied out ([`Loaned::read_into`]) and validated in the copy, and no
//!   change can make the reader fault or read outside the loan (the arena is
//!   sealed against shrinking and growing).
//!
//! A buffer passed in a call is gone from the caller whether or not the
//! call succeeds (a loan comes back to the arena once the receiver drops
//! it, or its domain dies). A loan the receiver lets go of while serving
//! its lender's call comes back in that call's reply, so the lender's arena
//! has it again the moment the call returns; one kept and dropped later
//! rides back with the holder's next call to the lender, or goes by
//! message within a millisecond if no call comes. A `Loaned` cannot be passed on: copy it into a
//! loan of your own.
//!
//! ```
//! use lintel::buffer::{Buffer, Loan, SealedWriter};
//! let mut loan = Loan::new(1 << 20).unwrap();
//! loan.as_mut_slice()[0] = 7;
//! let mut w = SealedWriter::new(4096).unwrap();
//! w.as_mut_slice()[..5].copy_from_slice(b"hello");
//! let sealed = w.seal().unwrap();
//! assert_eq!(&sealed.as_slice()[..5], b"hello");
//! let door = lintel::Door::create(0, |req: lintel::Request<'_>, reply: &mut lintel::Reply| {
//!     reply.data.push(req.buffers.len() as u8);
//!     Ok(())
//! });
//! let mut reply = lintel::Reply::new();
//! door.call_with(b"", &[], vec![Buffer::Loan(loan), Buffer::Sealed(sealed)], &mut reply).unwrap();
//! assert_eq!(reply.data, [2]);
//! ```

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

use crate::abi::control::Ctl;
use crate::abi::descriptor::BufferDescriptor;
use crate::abi::{
    BUF_FD, BUF_LOAN, BUF_RETURNED, BUF_SEALED, BUFFER_DESCRIPTOR, LOAN_ARENA_SIZE, MAX_BUFFERS,
};
use crate::context::error::CallError;
use crate::object::conn::Conn;
use crate::sys::umem::{Bulk, Slot};
use crate::sys::{self, Mapping};

/// A buffer a call or reply carries by reference.
#[derive(Debug)]
pub enum Buffer {
    /// A sealed snapshot: nobody can change its bytes.
    Sealed(Sealed),
    /// A loan of this domain's arena, to pass.
    Loan(Loan),
    /// A loan of a peer's arena, received (untrusted bytes).
    Loaned(Loaned),
    /// A file descriptor, passed as is (as a Solaris door passes
    /// `DOOR_DESCRIPTOR`): the receiver gets its own descriptor for the
    /// same open file. The runtime never reads, maps or waits on one it
    /// receives; what it is, is the receiver's to check.
    Fd(OwnedFd),
}

impl Buffer {
    /// The buffer's length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Buffer::Sealed(s) => s.len(),
            Buffer::Loan(l) => l.len(),
            Buffer::Loaned(l) => l.len(),
            Buffer::Fd(_) => 0,
        }
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// ---- sealed snapshots ----

/// A sealed snapshot being written: its bytes are this domain's alone until
/// [`seal`](Self::seal).
pub struct SealedWriter {
    fd: OwnedFd,
    map: Option<Mapping>,
    len: usize,
}

impl SealedWriter {
    /// A snapshot of `len` bytes, zeroed, to fill in place.
    pub fn new(len: usize) -> io::Result<SealedWriter> {
        let fd = sys::snapshot_memfd(len)?;
        let map = match len {
            0 => None,
            _ => {
                let map = Mapping::map(fd.as_fd(), len)?;
                // A child forked by another thread before `seal` would hold
                // this writable mapping and make the seal fail.
                map.dont_fork()?;
                Some(map)
            }
        };
        Ok(SealedWriter { fd, map, len })
    }

    /// The bytes, to write.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.map {
            // SAFETY: the memfd was created here and has not been sent or
            // sealed: this mapping is the only one, and `&mut self` makes
            // the slice the only way to it.
            Some(m) => unsafe { m.bytes_mut() },
            None => &mut [],
        }
    }

    /// Seal the bytes against every writer: unmap ours, then seal.
    pub fn seal(mut self) -> io::Result<Sealed> {
        self.map = None; // no writable mapping may remain
        sys::seal_snapshot(self.fd.as_fd())?;
        Sealed::map(self.fd, self.len).map_err(io::Error::other)
    }
}

/// A sealed snapshot: bytes nobody can change, passed by descriptor.
/// Cloning shares the same mapping.
#[derive(Clone)]
pub struct Sealed {
    fd: Arc<OwnedFd>,
    map: Option<Arc<Mapping>>,
    len: usize,
}

impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealed").field("len", &self.len).finish()
    }
}

impl Sealed {
    /// A snapshot holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> io::Result<Sealed> {
        let mut w = SealedWriter::new(data.len())?;
        w.as_mut_slice().copy_from_slice(data);
        w.seal()
    }

    /// Map a snapshot checked to be sealed, read-only.
    fn map(fd: OwnedFd, len: usize) -> Result<Sealed, &'static str> {
        sys::check_snapshot(fd.as_fd(), len)?;
        let map = match len {
            0 => None,
            _ => Some(Arc::new(
                Mapping::map_read(fd.as_fd(), len).map_err(|_| "cannot map sealed buffer")?,
            )),
        };
        Ok(Sealed {
            fd: Arc::new(fd),
            map,
            len,
        })
    }

    /// The bytes: they cannot change, so they may be validated in place.
    pub fn as_slice(&self) -> &[u8] {
        match &self.map {
            // SAFETY: the memfd is sealed against writing, shrinking and
            // growing (checked in `map`), so no writable mapping of it
            // exists or can be made: the bytes never change.
            Some(m) => unsafe { m.bytes() },
            None => &[],
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

// ---- loans ----

/// Size of this domain's loan arena (address space; pages are made as loans
/// are written, and reused as loans come back).
pub const ARENA_SIZE: usize = LOAN_ARENA_SIZE;
/// Loans are whole pages of the arena.
const PAGE: usize = 4096;

/// Free ranges of an arena: first fit, neighbours merged on free. A plain
/// value (host-tested).
#[derive(Debug)]
pub(crate) struct Ranges {
    free: BTreeMap<usize, usize>,
}

impl Ranges {
    pub fn new(size: usize) -> Ranges {
        Ranges {
            free: BTreeMap::from([(0, size)]),
        }
    }

    /// Take `len` bytes (a multiple of the page); their offset.
    pub fn take(&mut self, len: usize) -> Option<usize> {
        let (&off, &have) = self.free.iter().find(|(_, l)| **l >= len)?;
        self.free.remove(&off);
        if have > len {
            self.free.insert(off + len, have - len);
        }
        Some(off)
    }

    /// Give back `len` bytes at `off`, merging with free neighbours.
    pub fn give(&mut self, off: usize, len: usize) {
        let (mut off, mut len) = (off, len);
        if let Some((&p, &pl)) = self.free.range(..off).next_back()
            && p + pl == off
        {
            self.free.remove(&p);
            off = p;
            len += pl;
        }
        if let Some(&nl) = self.free.get(&(off + len)) {
            self.free.remove(&(off + len));
            len += nl;
        }
        self.free.insert(off, len);
    }

    /// Bytes free.
    #[cfg(test)]
    pub fn free_bytes(&self) -> usize {
        self.free.values().sum()
    }
}

/// This domain's loan arena.
struct Arena {
    fd: OwnedFd,
    map: Arc<Mapping>,
    ranges: Mutex<Ranges>,
    /// Loans lent out, by connection id.
    out: Mutex<HashMap<u64, Lent>>,
    /// The fork generation it was made in: a forked child's parent's
    /// arena is shared with the parent, so the child makes no loans of it.
    generation: u64,
}

/// How many times this process forked (and the child called `after_fork`):
/// an arena made under an older generation is the parent's.
static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// This process is a forked child: the arena it sees is its parent's.
pub(crate) fn forked() {
    GENERATION.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// The loans lent over one connection.
#[derive(Default)]
struct Lent {
    /// The connection, to read its returns when the arena runs short.
    conn: Weak<Conn>,
    /// `offset → pages` (bytes).
    loans: HashMap<usize, usize>,
}

static ARENA: OnceLock<Result<Arena, String>> = OnceLock::new();

fn arena() -> Result<&'static Arena, CallError> {
    let p = ARENA.get_or_init(|| {
        let fd = sys::sealed_memfd("lintel-loans", ARENA_SIZE).map_err(|e| e.to_string())?;
        let map = Mapping::map(fd.as_fd(), ARENA_SIZE).map_err(|e| e.to_string())?;
        Ok(Arena {
            fd,
            map: Arc::new(map),
            ranges: Mutex::new(Ranges::new(ARENA_SIZE)),
            out: Mutex::new(HashMap::new()),
            generation: GENERATION.load(std::sync::atomic::Ordering::SeqCst),
        })
    });
    let p = p.as_ref().map_err(|e| CallError::Local(e.clone()))?;
    if p.generation != GENERATION.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(CallError::Local(
            "the loan arena is the parent process's: a forked child makes no loans".into(),
        ));
    }
    Ok(p)
}

fn pages(len: usize) -> usize {
    len.max(1).div_ceil(PAGE) * PAGE
}

/// A loan of this domain's arena: write it in place, then pass it.
pub struct Loan {
    view: Bulk,
    off: usize,
    len: usize,
    /// Passed to a peer: its pages come back when the peer returns them.
    lent: bool,
}

impl std::fmt::Debug for Loan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loan").field("len", &self.len).finish()
    }
}

impl Loan {
    /// A loan of `len` bytes (its contents are whatever the arena held).
    ///
    /// When the arena is full of loans not yet returned, this waits for
    /// returns (reading them off the connections itself, so a busy watcher
    /// thread does not hold them up) until the thread's deadline, or at most
    /// [`LOAN_WAIT`]; then it fails with [`CallError::NoLoanSpace`].
    pub fn new(len: usize) -> Result<Loan, CallError> {
        let arena = arena()?;
        let size = pages(len);
        if size > ARENA_SIZE {
            return Err(CallError::NoLoanSpace {
                len,
                arena: ARENA_SIZE,
            });
        }
        let taken = arena.ranges.lock().take(size); // the lock is let go here
        let off = match taken {
            Some(off) => off,
            None => wait_for_room(arena, size, len)?,
        };
        let view = Bulk::range(arena.map.clone(), off, size).expect("an arena range is in the arena");
        Ok(Loan {
            view,
            off,
            len,
            lent: false,
        })
    }

    /// A loan holding a copy of `data`, as [`Loan::new`] and a copy into
    /// [`as_mut_slice`](Self::as_mut_slice) make one, copied as bytes bound
    /// for another CPU copy fastest ([`copy_to_peer`]: around the caches
    /// from 32 KiB to 1 MiB). A loan echo's round, a copy into the loan and
    /// the server's copy out of it, took 9.8 µs for 64 KiB filled with
    /// `copy_from_slice` and 7.1 µs with this; 104–106 µs for 1 MiB, and
    /// 72–78 µs.
    ///
    /// ```
    /// let loan = lintel::Loan::from_slice(&[7; 100_000]).unwrap();
    /// assert_eq!(loan.as_slice(), &[7; 100_000][..]);
    /// ```
    ///
    /// [`copy_to_peer`]: crate::copy_to_peer
    pub fn from_slice(data: &[u8]) -> Result<Loan, CallError> {
        let mut loan = Loan::new(data.len())?;
        let dst = loan.as_mut_slice();
        // SAFETY: `dst` is the loan's own `data.len()` bytes, borrowed
        // mutably, so distinct from `data`.
        unsafe { sys::copy_to_peer(dst.as_mut_ptr(), data.as_ptr(), data.len()) };
        Ok(loan)
    }

    /// The bytes (ours alone until the loan is passed).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: as for `as_mut_slice`: nobody else writes the range; the
        // shared borrow of `self` excludes our own writes.
        let all = unsafe { self.view.as_slice() };
        &all[..self.len]
    }

    /// The bytes, to write in place.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the range was taken from the allocator for this loan
        // alone and has not been lent (a lent loan is moved into the call):
        // peers map the arena read-only, so nobody else writes or reads it
        // through a reference.
        let all = unsafe { self.view.as_mut_slice() };
        &mut all[..self.len]
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The loan is passed over `conn`: it is out until returned. Returns
    /// its descriptor.
    fn lend(mut self, conn: &Arc<Conn>) -> (usize, usize) {
        if let Ok(arena) = arena() {
            let mut out = arena.out.lock();
            let lent = out.entry(conn.id).or_default();
            lent.conn = Arc::downgrade(conn);
            lent.loans.insert(self.off, self.view.len());
        }
        self.lent = true;
        (self.off, self.len)
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        if !self.lent
            && let Ok(arena) = arena()
        {
            arena.ranges.lock().give(self.off, self.view.len());
        }
    }
}

/// Longest a new loan waits for loans to come back to a full arena.
pub const LOAN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The arena has no room for `size` bytes: take in the returns the peers
/// have sent (pumping their connections), yielding the CPU between tries
/// so their threads can send them, until there is room or time is up.
#[cold]
fn wait_for_room(arena: &Arena, size: usize, len: usize) -> Result<usize, CallError> {
    let due = crate::context::deadline::current();
    let end = std::time::Instant::now() + LOAN_WAIT;
    loop {
        let lenders: Vec<Weak<Conn>> = arena.out.lock().values().map(|l| l.conn.clone()).collect();
        for conn in lenders.iter().filter_map(Weak::upgrade) {
            conn.pump();
        }
        let taken = arena.ranges.lock().take(size);
        if let Some(off) = taken {
            return Ok(off);
        }
        if crate::context::deadline::passed(due) {
            return Err(CallError::TimedOut);
        }
        if std::time::Instant::now() >= end {
            return Err(CallError::NoLoanSpace {
                len,
                arena: ARENA_SIZE,
            });
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// Loans lent over connection `conn` came back: `(offset, length)` as the
/// peer says, honoured only for loans lent to it.
pub(crate) fn returned(conn: u64, loans: &[(u64, u32)]) {
    let Some(Ok(arena)) = ARENA.get() else { return }; // nothing lent: nothing to return
    let mut out = arena.out.lock();
    let Some(lent) = out.get_mut(&conn) else { return };
    let mut ranges = arena.ranges.lock();
    for &(off, _) in loans {
        if let Some(size) = lent.loans.remove(&(off as usize)) {
            ranges.give(off as usize, size);
        }
    }
}

/// Bytes of this domain's loan arena lent to peers and not yet returned
/// (a peer that keeps loans holds them; a peer that dies returns them).
pub fn lent_bytes() -> usize {
    match ARENA.get() {
        Some(Ok(arena)) => arena.out.lock().values().flat_map(|l| l.loans.values()).sum(),
        _ => 0,
    }
}

/// Connection `conn` is gone: every loan lent over it is ours again.
pub(crate) fn conn_gone(conn: u64) {
    let Some(Ok(arena)) = ARENA.get() else { return };
    let lent = arena.out.lock().remove(&conn);
    if let Some(lent) = lent {
        let mut ranges = arena.ranges.lock();
        for (off, size) in lent.loans {
            ranges.give(off, size);
        }
    }
}

/// A loan of a peer's arena, received: owned until dropped (which gives it
/// back). Its bytes are the lender's to change at any time, so they are
/// read by copying out, never by reference.
pub struct Loaned {
    view: Bulk,
    off: u64,
    len: usize,
    conn: Weak<Conn>,
}

impl std::fmt::Debug for Loaned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaned").field("len", &self.len).finish()
    }
}

impl Loaned {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Byte `i`, read once (`None` past the end).
    pub fn get(&self, i: usize) -> Option<u8> {
        (i < self.len).then(|| self.view.byte(i))
    }

    /// Append a copy of the bytes to `dst`: validate the copy, not the loan.
    pub fn read_into(&self, dst: &mut Vec<u8>) {
        self.view.read_into(self.len, dst);
    }

    /// Copy the bytes into the start of `dst` (as many as fit); how many
    /// were copied. For a copy that goes straight into a loan of one's own
    /// (a server answering with a loan), without a `Vec` between.
    ///
    /// ```no_run
    /// # fn answer(loaned: &lintel::buffer::Loaned) -> Result<lintel::buffer::Loan, lintel::CallError> {
    /// let mut mine = lintel::buffer::Loan::new(loaned.len())?;
    /// loaned.copy_to(mine.as_mut_slice());
    /// # Ok(mine) }
    /// ```
    pub fn copy_to(&self, dst: &mut [u8]) -> usize {
        let n = dst.len().min(self.len);
        self.view.read_to(&mut dst[..n]);
        n
    }

    /// A copy of the bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        self.read_into(&mut v);
        v
    }
}

impl Drop for Loaned {
    fn drop(&mut self) {
        let Some(conn) = self.conn.upgrade() else { return };
        // Let go of during a call from its lender: it rides back with the
        // reply (no message, no wait for the watcher threads).
        if SERVING.get() == conn.id {
            let _ = RETURNS.try_with(|r| r.borrow_mut().push((self.off, self.len as u32)));
            return;
        }
        if conn.return_loan(self.off, self.len as u32) {
            conn.home.returns_queued(&conn);
        }
    }
}

thread_local! {
    /// The connection whose call this thread is serving (0: none).
    static SERVING: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Loans of that caller's arena let go of during the call.
    static RETURNS: std::cell::RefCell<Vec<(u64, u32)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// This thread serves a call from `conn` until the guard drops: loans of
/// the caller's let go of meanwhile are kept for the reply ([`take_returns`]).
pub(crate) fn serving(conn: u64) -> impl Drop {
    struct Serving;
    impl Drop for Serving {
        fn drop(&mut self) {
            SERVING.set(0);
        }
    }
    SERVING.set(conn);
    Serving
}

/// The caller's loans let go of during the call just served.
pub(crate) fn take_returns() -> Vec<(u64, u32)> {
    RETURNS
        .try_with(|r| std::mem::take(&mut *r.borrow_mut()))
        .unwrap_or_default()
}

/// Write `returns` as [`BUF_RETURNED`] descriptors after the `first`
/// buffers of a reply in `slot`, as many as fit; the rest go back by
/// message. Returns how many were written.
pub(crate) fn write_returns(conn: &Arc<Conn>, slot: &Slot, first: usize, returns: &[(u64, u32)]) -> usize {
    let room = MAX_BUFFERS.saturating_sub(first).min(returns.len());
    write_returned(slot, first, &returns[..room]);
    send_returns(conn, &returns[room..]);
    room
}

/// Write `returns` (which fit) as [`BUF_RETURNED`] descriptors after the
/// `first` buffers of a request or reply in `slot`.
pub(crate) fn write_returned(slot: &Slot, first: usize, returns: &[(u64, u32)]) {
    debug_assert!(first + returns.len() <= MAX_BUFFERS);
    for (i, &(off, len)) in returns.iter().enumerate() {
        let d = BufferDescriptor {
            kind: BUF_RETURNED,
            len,
            off,
        };
        slot.write(BufferDescriptor::offset(first + i), &d.to_bytes());
    }
}

/// Send `returns` by message (batched by the watcher thread).
pub(crate) fn send_returns(conn: &Arc<Conn>, returns: &[(u64, u32)]) {
    for &(off, len) in returns {
        if conn.return_loan(off, len) {
            conn.home.returns_queued(conn);
        }
    }
}

// ---- on the wire ----

/// Whether `bufs` can be passed in one call: few enough, none a peer's
/// loan, each describable in 32 bits. Every path checks the same.
pub(crate) fn check_passable(bufs: &[Buffer]) -> Result<(), CallError> {
    if bufs.len() > MAX_BUFFERS {
        return Err(CallError::TooManyDoors {
            len: bufs.len(),
            max: MAX_BUFFERS,
        });
    }
    if bufs.iter().any(|b| matches!(b, Buffer::Loaned(_))) {
        return Err(CallError::Unpassable(
            "a peer's loan cannot be passed on; copy it",
        ));
    }
    if let Some(b) = bufs.iter().find(|b| b.len() > u32::MAX as usize) {
        return Err(CallError::TooLarge {
            what: "buffer",
            len: b.len(),
            max: u32::MAX as usize,
        });
    }
    Ok(())
}

/// Write `bufs` into `slot`'s buffer descriptors for a call (`request`) or
/// reply, sending what must go first: the sealed snapshots' memfds and,
/// once per connection, our loan arena. Returns the loans lent, to take
/// back if the peer refuses the call before taking them.
pub(crate) fn send(
    conn: &Arc<Conn>,
    bufs: Vec<Buffer>,
    slot: &Slot,
    request: bool,
    index: u32,
    seq: u32,
) -> Result<Vec<u64>, CallError> {
    check_passable(&bufs)?;
    let sealed: Vec<BorrowedFd<'_>> = bufs
        .iter()
        .filter_map(|b| match b {
            Buffer::Sealed(s) => Some(s.fd.as_fd()),
            Buffer::Fd(fd) => Some(fd.as_fd()),
            _ => None,
        })
        .collect();
    if !sealed.is_empty()
        && !conn.send(
            &Ctl::Buffers {
                request,
                slot: index,
                seq,
            },
            &sealed,
        )
    {
        return Err(CallError::PeerDied);
    }
    drop(sealed);
    let mut lent = Vec::new();
    for (i, b) in bufs.into_iter().enumerate() {
        let d = match b {
            Buffer::Sealed(s) => BufferDescriptor {
                kind: BUF_SEALED,
                len: s.len as u32,
                off: 0,
            },
            Buffer::Loan(l) => {
                if !conn.lend_arena(|| arena().map(|p| p.fd.as_fd())) {
                    return Err(CallError::PeerDied);
                }
                let (off, len) = l.lend(conn);
                lent.push(off as u64);
                BufferDescriptor {
                    kind: BUF_LOAN,
                    len: len as u32,
                    off: off as u64,
                }
            }
            Buffer::Fd(_) => BufferDescriptor {
                kind: BUF_FD,
                len: 0,
                off: 0,
            },
            Buffer::Loaned(_) => unreachable!("refused above"),
        };
        slot.write(BufferDescriptor::offset(i), &d.to_bytes());
    }
    Ok(lent)
}

/// Take back loans lent in a call the peer refused before taking them.
pub(crate) fn take_back(conn: &Conn, lent: &[u64]) {
    let loans: Vec<(u64, u32)> = lent.iter().map(|&o| (o, 0)).collect();
    returned(conn.id, &loans);
}

/// The `n` buffers described in `slot` (a call's if `request`), received.
/// Loans are made first, so a refusal part-way still gives back every
/// valid loan (dropping what was made sends it back).
pub(crate) fn receive(
    conn: &Arc<Conn>,
    slot: &Slot,
    n: usize,
    request: bool,
    index: u32,
    seq: u32,
    out: &mut Vec<Buffer>,
) -> Result<(), CallError> {
    if n > MAX_BUFFERS {
        return Err(CallError::BadMessage("too many buffers"));
    }
    let descs: Vec<(u32, usize, u64)> = (0..n)
        .map(|i| {
            let mut b = [0u8; BUFFER_DESCRIPTOR];
            slot.read(BufferDescriptor::offset(i), &mut b);
            let d = BufferDescriptor::from_bytes(&b);
            (d.kind, d.len as usize, d.off)
        })
        .collect();
    let mut made: Vec<Option<Buffer>> = (0..n).map(|_| None).collect();
    let mut error = None;
    for (i, &(kind, len, off)) in descs.iter().enumerate() {
        if kind == BUF_LOAN {
            match loaned(conn, len, off) {
                Ok(l) => made[i] = Some(Buffer::Loaned(l)),
                Err(e) => error = error.or(Some(e)),
            }
        } else if kind == BUF_RETURNED {
            returned(conn.id, &[(off, len as u32)]); // honoured only if lent to this peer
        } else if kind == BUF_FD && (len, off) != (0, 0) {
            error = error.or(Some(CallError::BadMessage("a descriptor buffer with a length")));
        } else if kind != BUF_SEALED && kind != BUF_FD {
            error = error.or(Some(CallError::BadMessage("unknown buffer kind")));
        }
    }
    let with_fd = |kind: u32| kind == BUF_SEALED || kind == BUF_FD;
    let sealed = descs.iter().filter(|d| with_fd(d.0)).count();
    if sealed > 0 {
        let fds = conn
            .take_buffer_fds(request, index, seq)
            .filter(|f| f.len() == sealed);
        match fds {
            None => {
                error = error.or(Some(CallError::BadMessage(
                    "sealed buffers or descriptors missing",
                )))
            }
            Some(fds) => {
                let mut fds = fds.into_iter();
                for (i, d) in descs.iter().enumerate().filter(|(_, d)| with_fd(d.0)) {
                    let fd = fds.next().expect("counted above");
                    if d.0 == BUF_FD {
                        made[i] = Some(Buffer::Fd(fd));
                        continue;
                    }
                    match Sealed::map(fd, d.1) {
                        Ok(s) => made[i] = Some(Buffer::Sealed(s)),
                        Err(e) => error = error.or(Some(CallError::BadMessage(e))),
                    }
                }
            }
        }
    }
    if let Some(e) = error {
        return Err(e); // `made` drops: its loans go back
    }
    out.extend(made.into_iter().flatten());
    Ok(())
}

/// Of the `n` buffers described in a refused request in `slot`, honour
/// the returns of our loans (the rest the caller takes back).
pub(crate) fn honour_returns(conn: &Conn, slot: &Slot, n: usize) {
    for i in 0..n.min(MAX_BUFFERS) {
        let mut b = [0u8; BUFFER_DESCRIPTOR];
        slot.read(BufferDescriptor::offset(i), &mut b);
        let d = BufferDescriptor::from_bytes(&b);
        if d.kind == BUF_RETURNED {
            returned(conn.id, &[(d.off, d.len)]); // honoured only if lent to this peer
        }
    }
}

/// A loan of the peer's arena, checked to lie inside it.
fn loaned(conn: &Arc<Conn>, len: usize, off: u64) -> Result<Loaned, CallError> {
    let arena = conn
        .peer_arena()
        .ok_or(CallError::BadMessage("loan from a peer that sent no arena"))?;
    let off_us = usize::try_from(off).map_err(|_| CallError::BadMessage("loan outside the arena"))?;
    if !off_us.is_multiple_of(PAGE) {
        return Err(CallError::BadMessage("loan outside the arena"));
    }
    let view =
        Bulk::range(arena, off_us, pages(len)).ok_or(CallError::BadMessage("loan outside the arena"))?;
    Ok(Loaned {
        view,
        off,
        len,
        conn: Arc::downgrade(conn),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child forked while a snapshot is being written (by another thread
    /// of a program, say) does not keep its writable mapping, which would
    /// make the seal fail until the child ends or execs.
    #[test]
    fn a_snapshot_seals_while_a_child_forked_meanwhile_lives() {
        let mut w = SealedWriter::new(8192).unwrap();
        w.as_mut_slice().fill(7);
        // SAFETY: the child calls only async-signal-safe functions (`pause`,
        // `_exit`) before it is killed below.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: as above.
            unsafe {
                libc::pause();
                libc::_exit(0);
            }
        }
        assert!(child > 0, "fork failed");
        let sealed = w.seal();
        // SAFETY: `child` is our own child's pid, killed and reaped once.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
        let sealed = sealed.expect("the seal is not held up by the child");
        assert_eq!(sealed.as_slice(), &[7u8; 8192][..]);
    }

    #[test]
    fn ranges_take_first_fit_and_merge_on_give() {
        let mut r = Ranges::new(10 * PAGE);
        let a = r.take(2 * PAGE).unwrap();
        let b = r.take(3 * PAGE).unwrap();
        let c = r.take(5 * PAGE).unwrap();
        assert_eq!((a, b, c), (0, 2 * PAGE, 5 * PAGE));
        assert_eq!(r.take(PAGE), None);
        r.give(b, 3 * PAGE);
        assert_eq!(r.take(4 * PAGE), None, "3 pages free, not 4");
        r.give(a, 2 * PAGE);
        assert_eq!(r.take(5 * PAGE), Some(0), "a and b merged");
        r.give(0, 5 * PAGE);
        r.give(c, 5 * PAGE);
        assert_eq!(r.free_bytes(), 10 * PAGE);
        assert_eq!(r.free.len(), 1, "everything merged back into one range");
    }

    #[test]
    fn a_sealed_snapshot_cannot_be_written_by_anyone() {
        let mut w = SealedWriter::new(8192).unwrap();
        w.as_mut_slice()[8191] = 9;
        let s = w.seal().unwrap();
        assert_eq!(s.as_slice()[8191], 9);
        // A writable mapping of it cannot be made, and write() fails.
        assert!(Mapping::map(s.fd.as_fd(), 8192).is_err());
        assert!(rustix::io::pwrite(&*s.fd, b"x", 0).is_err());
        assert!(rustix::fs::ftruncate(&*s.fd, 0).is_err());
    }

    #[test]
    fn an_unsealed_memfd_is_not_a_snapshot() {
        let fd = sys::snapshot_memfd(4096).unwrap(); // resizing sealed, writing not
        assert_eq!(
            Sealed::map(fd, 4096).unwrap_err(),
            "sealed buffer is not sealed against writing and resizing"
        );
        let mut w = SealedWriter::new(100).unwrap();
        w.as_mut_slice()[0] = 1;
        let s = w.seal().unwrap();
        let fd = rustix::io::dup(&*s.fd).unwrap();
        assert_eq!(
            Sealed::map(fd, 101).unwrap_err(),
            "sealed buffer is shorter than its descriptor says"
        );
    }

    #[test]
    fn a_loan_larger_than_the_pool_is_refused_at_once() {
        let e = Loan::new(ARENA_SIZE + 1).unwrap_err();
        assert_eq!(
            e,
            CallError::NoLoanSpace {
                len: ARENA_SIZE + 1,
                arena: ARENA_SIZE
            }
        );
    }

    #[test]
    fn loans_return_to_the_pool_when_dropped() {
        let a = Loan::new(3 * PAGE + 1).unwrap();
        let off = a.off;
        drop(a);
        let b = Loan::new(4 * PAGE).unwrap();
        assert_eq!(b.off, off, "the same pages, reused");
    }
}
