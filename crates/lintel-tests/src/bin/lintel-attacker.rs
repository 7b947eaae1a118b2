//! A hostile domain, started by `tests/hostile.rs`.
//!
//! The test spawns it with [`lintel::boot::spawn`], offering the victim's
//! control door (a third-party transfer: the attacker gets its own
//! connection to the victim) and a decoy door served by the test process.
//! The attacker joins, makes a few legitimate calls so that call areas and
//! connections exist, and then attacks, for a bounded time, every shared
//! mapping and every socket it has:
//!
//! - `scribble`: random words and boundary values over every `memfd:lintel`
//!   mapping (slot headers, inline data, data, door descriptors, the unused
//!   header page), then publishes them (bumps `req_seq`, futex wake, `Kick`).
//! - `sockets`: random bytes, forged control messages (encoded by
//!   `lintel::abi::control`, then often cut or garbled) and stray file
//!   descriptors on every socket.
//! - `forge`: guesses grant indices 0..10000 with requests written straight
//!   into a slot, forges `WD_YOURS`, `WD_MINE` and `WD_THIRD` descriptors,
//!   and records which guesses the server accepted.
//! - `all`: the three at once (scribbler, socket sprayer, forger threads).
//!
//! Targeted modes, one per weakness found, so each failure names its cause:
//!
//! - `ticket-hang`: requests whose `WD_THIRD` descriptor carries a socket
//!   the attacker made (pid 0 or its own), which the server adopts as a connection and
//!   then waits on for an answer that never comes. Holds until told to stop.
//! - `ticket-cycle`: the same, but the socket's twin travels in the same
//!   ticket batch, so the server holds both ends and waits forever, even
//!   after the attacker is gone.
//! - `self-socket`: mails the attacker's own end of its connection to the
//!   victim (parked as a ticket batch, a boot message and an unsolicited
//!   `Minted` answer), then exits.
//! - `fd-flood`: parks as many descriptors in the victim as the protocol
//!   lets it (ticket batches, unsolicited `Minted` answers), then holds.
//! - `ticket-pid0`: passes the decoy (a door of the test process, which the
//!   victim is connected to already) to the victim 30 times, rewriting the
//!   descriptor's pid to 0 ("no connection to its server") in flight: the
//!   victim adopts every real ticket as one more connection.
//!
//! The random modes leave out what the targeted ones cover: scribbled
//! `WD_THIRD` descriptors never name pid 0 or the attacker, and forged ones
//! name only the victim, the test process or pids of no process.
//!
//! Forged requests that name a door the attacker legitimately holds go
//! through the peer's application code: their method byte is always one of
//! [`SAFE_METHODS`], so the attack tests the runtime, not the test peer's
//! methods that sleep or allocate on the caller's say-so.
//!
//! - `bulk`: bulk segments and buffers that lie (never sent, not sealed,
//!   shorter than the header says, odd-sized, above the limit, sparse and
//!   huge; snapshots not sealed or short; loans without a pool, outside
//!   it, misaligned), each checked against the status it must get, and an
//!   honest loan and segment scribbled on while the victim copies them;
//!   streamed arguments never written or dribbled out (refused once the
//!   victim's time for them is up), written late, and claimed longer than
//!   the request.
//! - `loan-return`: returns loans it was never lent: a `Returned` message
//!   naming every page of the victim's loan arena, and requests carrying
//!   `BUF_RETURNED` descriptors for its first pages, where the victim's
//!   first loans (those it lent the test) lie. Counts `returns_forged`.
//! - `other-version`: speaks the next protocol version's hello on its boot
//!   connection (no runtime at all), which the spawning domain must refuse.
//!
//! It prints `HOSTILE key=value ...` on stdout (counts the test checks to
//! know the attack happened) and exits with status 0; `PLANTED` is printed
//! when a holding mode has set its trap.
#![forbid(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::io::{IoSlice, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lintel::abi::{
    AREA_HEADER, AREA_SIZE, BUF_FD, BUF_LOAN, BUF_SEALED, BUSY, DATA_CAP, DOOR_DESCRIPTOR, FLAG_BUFS,
    FLAG_STREAM, INLINE, MAX_BUFFERS, MAX_DOORS, OFF_CLIENT_STATE, OFF_DATA, OFF_DOORS, OFF_FLAGS, OFF_GRANT,
    OFF_IN_BUFS, OFF_IN_DOORS, OFF_IN_INLINE, OFF_IN_LEN, OFF_IN_SEG, OFF_IN_STREAMED, OFF_OUT_INLINE,
    OFF_OUT_LEN, OFF_REP_SEQ, OFF_REQ_SEQ, OFF_SERVER_STATE, OFF_STATUS, SLEEPING, SLOTS, SLOT_SIZE,
    SPINNING, ST_BAD_MESSAGE, ST_OK, ST_TOO_LARGE, ST_UNTAKEN, VERSION, WD_MINE, WD_THIRD, WD_YOURS,
};
use lintel::{Door, Reply};
use lintel_tests::m;

/// Datum of the door the test keeps to itself; no reply may carry it.
const PRIVATE_DATUM: u64 = 0x5EC2_E7D0_0B5E_C2E7;
/// Datum of the door the attacker asks the victim to make for it.
const OWN_DATUM: u64 = 0xA77A_C4E2;

/// Method bytes that are harmless whoever calls them (no sleeping, no
/// allocation sized by the caller, no calls on the caller's behalf).
const SAFE_METHODS: [u8; 10] = [
    m::ECHO,
    m::UNREF_COUNT,
    m::ALERTED_COUNT,
    m::SERVER_PID_OF_PASSED,
    m::CONNECTIONS,
    m::MAX_CONCURRENT,
    m::SECRET_CALLS,
    m::POOL_SHORTAGES,
    200,
    255,
];

const BOUNDARY: [u32; 20] = [
    0,
    1,
    2,
    15,
    16,
    17,
    63,
    64,
    65,
    SLOTS as u32,
    DATA_CAP as u32 - 1,
    DATA_CAP as u32,
    DATA_CAP as u32 + 1,
    SLOT_SIZE as u32,
    0x7fff_ffff,
    0x8000_0000,
    0xffff,
    0x1_0000,
    u32::MAX - 1,
    u32::MAX,
];

// ---------------------------------------------------------------- randomness

/// xorshift64: enough chaos, reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        // splitmix64 once, so small seeds do not start in a quiet state
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn u32(&mut self) -> u32 {
        (self.u64() >> 32) as u32
    }

    fn below(&mut self, n: u64) -> u64 {
        self.u64() % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }

    /// A value from the edges, small numbers, plausible indices or anything.
    fn nasty(&mut self) -> u32 {
        match self.below(6) {
            0 | 1 => self.pick(&BOUNDARY),
            2 => self.below(16) as u32,
            3 => self.below(10_000) as u32,
            _ => self.u32(),
        }
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.u64().to_le_bytes());
        }
        v.truncate(n);
        v
    }

    fn safe_method(&mut self) -> u8 {
        self.pick(&SAFE_METHODS)
    }
}

// ------------------------------------------------------------------ counters

#[derive(Default)]
struct Stats {
    maps: AtomicU64,
    victim_area: AtomicU64,
    sockets: AtomicU64,
    victim_socket: AtomicU64,
    words_written: AtomicU64,
    published: AtomicU64,
    wakes: AtomicU64,
    kicks: AtomicU64,
    msgs_sent: AtomicU64,
    msgs_refused: AtomicU64,
    fds_sent: AtomicU64,
    /// Scribbled requests the server answered (its `rep_seq` caught up).
    scribble_answered: AtomicU64,
    forged_calls: AtomicU64,
    forged_replies: AtomicU64,
    forged_ok: AtomicU64,
    /// Grant guesses the server accepted that name no door the attacker holds.
    foreign_grants_ok: AtomicU64,
    /// Forged `WD_YOURS` descriptors accepted that name no door the attacker holds.
    foreign_yours_ok: AtomicU64,
    held_grants_ok: AtomicU64,
    legit_ok: AtomicU64,
    legit_err: AtomicU64,
    legit_garbled: AtomicU64,
    private_hits: AtomicU64,
    planted: AtomicU64,
    bulk_cases: AtomicU64,
    bulk_expected: AtomicU64,
    /// Loan returns sent for loans never lent to the attacker.
    returns_forged: AtomicU64,
}

impl Stats {
    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }

    fn line(&self) -> String {
        let f = |name: &str, c: &AtomicU64| format!(" {name}={}", c.load(Relaxed));
        let mut s = String::from("HOSTILE");
        for (name, c) in [
            ("maps", &self.maps),
            ("victim_area", &self.victim_area),
            ("sockets", &self.sockets),
            ("victim_socket", &self.victim_socket),
            ("words_written", &self.words_written),
            ("published", &self.published),
            ("wakes", &self.wakes),
            ("kicks", &self.kicks),
            ("msgs_sent", &self.msgs_sent),
            ("msgs_refused", &self.msgs_refused),
            ("fds_sent", &self.fds_sent),
            ("scribble_answered", &self.scribble_answered),
            ("forged_calls", &self.forged_calls),
            ("forged_replies", &self.forged_replies),
            ("forged_ok", &self.forged_ok),
            ("foreign_grants_ok", &self.foreign_grants_ok),
            ("foreign_yours_ok", &self.foreign_yours_ok),
            ("held_grants_ok", &self.held_grants_ok),
            ("legit_ok", &self.legit_ok),
            ("legit_err", &self.legit_err),
            ("legit_garbled", &self.legit_garbled),
            ("private_hits", &self.private_hits),
            ("planted", &self.planted),
            ("bulk_cases", &self.bulk_cases),
            ("bulk_expected", &self.bulk_expected),
            ("returns_forged", &self.returns_forged),
        ] {
            s.push_str(&f(name, c));
        }
        s
    }
}

// ----------------------------------------------------------- shared mappings

/// A read-write shared `memfd:lintel*` mapping of this process.
struct Region {
    base: usize,
    len: usize,
}

impl Region {
    /// Every such mapping listed in `/proc/self/maps` now.
    fn all() -> Vec<Region> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        maps.lines()
            .filter(|l| l.contains("memfd:lintel"))
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let (range, perms) = (it.next()?, it.next()?);
                let p = perms.as_bytes();
                if p.len() < 4 || p[0] != b'r' || p[1] != b'w' || p[3] != b's' {
                    return None;
                }
                let (a, b) = range.split_once('-')?;
                let a = usize::from_str_radix(a, 16).ok()?;
                let b = usize::from_str_radix(b, 16).ok()?;
                (b > a).then_some(Region { base: a, len: b - a })
            })
            .collect()
    }

    /// A fresh shared mapping of `len` bytes of `fd` (never unmapped: the
    /// attacker is short-lived).
    fn map_fd(fd: &OwnedFd, len: usize) -> Region {
        use rustix::mm::{mmap, MapFlags, ProtFlags};
        // SAFETY: a new mapping at an address the kernel picks cannot alias
        // anything in this process; `len` bytes of the memfd exist (the
        // caller sized it at least that large) and it is never unmapped, so
        // the Region's accesses stay valid for the life of the process.
        let p = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }
        .expect("mmap");
        Region {
            base: p as usize,
            len,
        }
    }

    fn word(&self, off: usize) -> &AtomicU32 {
        assert!(
            off.is_multiple_of(4) && off + 4 <= self.len,
            "offset {off} outside the mapping"
        );
        // SAFETY: `base..base + len` is a MAP_SHARED read-write mapping of
        // this very process, listed in /proc/self/maps just now, and `off`
        // is inside it and 4-aligned (mappings are page-aligned). It is a
        // lintel call area: the runtime keeps it mapped while its connection
        // lives (our peers outlive this short-lived process) and touches it
        // only through atomics, as we do here, so these accesses are not data
        // races. Whatever we write is garbage to the runtime by design.
        unsafe { AtomicU32::from_ptr((self.base + off) as *mut u32) }
    }

    fn get(&self, off: usize) -> u32 {
        self.word(off).load(Acquire)
    }

    fn put(&self, off: usize, v: u32) {
        self.word(off).store(v, Release)
    }

    fn slots(&self) -> usize {
        if self.len >= AREA_SIZE {
            SLOTS
        } else {
            0
        }
    }

    fn put_bytes(&self, off: usize, bytes: &[u8]) {
        for (i, c) in bytes.chunks(4).enumerate() {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            self.put(off + 4 * i, u32::from_le_bytes(w));
        }
    }

    fn get_bytes(&self, off: usize, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 4);
        let mut o = off;
        while v.len() < n {
            v.extend_from_slice(&self.get(o).to_le_bytes());
            o += 4;
        }
        v.truncate(n);
        v
    }
}

fn slot_base(i: usize) -> usize {
    AREA_HEADER + i * SLOT_SIZE
}

fn wake(w: &AtomicU32) {
    let _ = rustix::thread::futex::wake(w, rustix::thread::futex::Flags::empty(), u32::MAX);
}

// ------------------------------------------------------------------- sockets

/// A socket of this process (a duplicate of the runtime's descriptor) and
/// the pid the kernel says created its peer end.
struct Sock {
    fd: OwnedFd,
    peer: u32,
}

fn sockets() -> Vec<Sock> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(n) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let is_socket = std::fs::read_link(e.path())
            .map(|p| p.to_string_lossy().starts_with("socket:"))
            .unwrap_or(false);
        if !is_socket {
            continue;
        }
        // SAFETY: `n` was open a moment ago; it is only borrowed for the
        // duplicating fcntl, which fails cleanly (EBADF) if the runtime closed
        // it meanwhile. The duplicate is ours to own.
        let dup = rustix::io::fcntl_dupfd_cloexec(unsafe { BorrowedFd::borrow_raw(n) }, 3);
        let Ok(fd) = dup else { continue };
        if rustix::fs::fstat(&fd)
            .map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket)
            .unwrap_or(true)
        {
            continue;
        }
        let peer = peer_of(fd.as_fd());
        out.push(Sock { fd, peer });
    }
    out
}

fn peer_of(fd: BorrowedFd<'_>) -> u32 {
    // Only our own connections: the kernel fills in a real pid for them.
    rustix::net::sockopt::socket_peercred(fd)
        .map(|c| c.pid.as_raw_nonzero().get() as u32)
        .unwrap_or(0)
}

/// Send one message, never blocking, never raising SIGPIPE.
fn send(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> bool {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(253))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return false;
    }
    let iov = [IoSlice::new(bytes)];
    rustix::net::sendmsg(
        sock,
        &iov,
        &mut control,
        SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
    )
    .is_ok()
}

/// Control messages, encoded by the protocol's own crate (`lintel::abi::control`),
/// so what is forged here follows the protocol as it changes.
mod ctl {
    use lintel::abi::control::{encode, Ctl};
    use lintel::abi::descriptor::DoorDescriptor;

    /// Kinds of message `forged_ctl` picks from.
    pub const KINDS: u64 = 12;

    pub fn hello(pid: u32, version: u32) -> Vec<u8> {
        encode(&Ctl::Hello { pid, version })
    }
    pub fn area() -> Vec<u8> {
        encode(&Ctl::Area)
    }
    pub fn kick(slot: u32) -> Vec<u8> {
        encode(&Ctl::Kick { slot })
    }
    pub fn alert(slot: u32, seq: u32) -> Vec<u8> {
        encode(&Ctl::Alert { slot, seq })
    }
    pub fn release(grant: u32, count: u32) -> Vec<u8> {
        encode(&Ctl::Release { grant, count })
    }
    pub fn mint(req: u64, grant: u32) -> Vec<u8> {
        encode(&Ctl::Mint { req, grant })
    }
    pub fn minted(req: u64, ok: bool) -> Vec<u8> {
        encode(&Ctl::Minted { req, ok })
    }
    pub fn redeem(req: u64) -> Vec<u8> {
        encode(&Ctl::Redeem { req })
    }
    pub fn redeemed(req: u64, grant: Option<u32>) -> Vec<u8> {
        encode(&Ctl::Redeemed { req, grant })
    }
    pub fn tickets(request: bool, slot: u32, seq: u32) -> Vec<u8> {
        encode(&Ctl::Tickets { request, slot, seq })
    }
    pub fn releases(grants: Vec<(u32, u32)>) -> Vec<u8> {
        encode(&Ctl::Releases { grants })
    }

    /// A boot message; with `claimed_len`, its door count lies.
    pub fn boot(doors: &[[u32; 3]], claimed_len: Option<u64>) -> Vec<u8> {
        let doors: Vec<DoorDescriptor> = doors
            .iter()
            .map(|&[kind, idx, pid]| DoorDescriptor { kind, idx, pid })
            .collect();
        let honest = encode(&Ctl::Boot { doors: doors.clone() });
        let Some(claimed) = claimed_len else {
            return honest;
        };
        // The variant and the count are the leading varints; splice in the lie.
        let head = encode(&Ctl::Boot { doors: Vec::new() });
        let variant = &head[..head.len() - 1];
        let count_len = varint_len(doors.len() as u64);
        let mut v = variant.to_vec();
        varint(&mut v, claimed);
        v.extend_from_slice(&honest[variant.len() + count_len..]);
        v
    }

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn varint_len(v: u64) -> usize {
        let mut out = Vec::new();
        varint(&mut out, v);
        out.len()
    }
}

// ------------------------------------------------------------ stray fds

/// Descriptors to attach to messages: nothing a server should keep.
struct Junk {
    fds: Vec<OwnedFd>,
    /// Far ends kept here, so sending the near end never closes a pair.
    _keep: Vec<OwnedFd>,
}

impl Junk {
    fn new() -> Junk {
        use rustix::fs::{MemfdFlags, SealFlags};
        use rustix::net::{AddressFamily, SocketFlags, SocketType};
        let mut fds: Vec<OwnedFd> = Vec::new();
        let mut keep = Vec::new();
        if let Ok(f) = std::fs::File::open("/dev/null") {
            fds.push(f.into());
        }
        if let Ok((r, w)) = std::io::pipe() {
            fds.push(r.into());
            fds.push(w.into());
        }
        let memfd = |len: u64, seals: SealFlags| -> Option<OwnedFd> {
            let fd = rustix::fs::memfd_create("lintel-junk", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
                .ok()?;
            rustix::fs::ftruncate(&fd, len).ok()?;
            if !seals.is_empty() {
                rustix::fs::fcntl_add_seals(&fd, seals).ok()?;
            }
            Some(fd)
        };
        let resize = SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL;
        let area = AREA_SIZE as u64;
        for (len, seals) in [
            (area, SealFlags::empty()),                  // unsealed, right size
            (4096, resize),                              // sealed, wrong size
            (0, resize),                                 // sealed, empty
            (area + 4096, resize),                       // sealed, too big
            (area, resize | SealFlags::WRITE),           // sealed read-only
            (area, SealFlags::SHRINK | SealFlags::GROW), // not sealed against resealing
            (area, resize),                              // a perfectly good area
        ] {
            fds.extend(memfd(len, seals));
        }
        if let Ok((a, b)) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        ) {
            fds.push(a);
            keep.push(b);
        }
        if let Ok((a, b)) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        ) {
            fds.push(a);
            keep.push(b);
        }
        // Unconnected: the kernel names no peer (pid 0) for it.
        if let Ok(s) = rustix::net::socket(AddressFamily::UNIX, SocketType::SEQPACKET, None) {
            fds.push(s);
        }
        if let Ok(s) = std::net::UdpSocket::bind("127.0.0.1:0") {
            fds.push(s.into());
        }
        if let Ok(d) = std::fs::File::open("/proc/self") {
            fds.push(d.into());
        }
        Junk { fds, _keep: keep }
    }

    fn some<'a>(&'a self, rng: &mut Rng, max: usize) -> Vec<BorrowedFd<'a>> {
        if self.fds.is_empty() {
            return Vec::new();
        }
        let n = 1 + rng.below(max as u64) as usize;
        (0..n)
            .map(|_| self.fds[rng.below(self.fds.len() as u64) as usize].as_fd())
            .collect()
    }
}

// ------------------------------------------------------------------- context

struct Ctx {
    victim: Door,
    decoy: Option<Door>,
    own: Option<Door>,
    victim_pid: u32,
    parent_pid: u32,
    /// Grants the attacker legitimately holds on its connection to the victim.
    held: Vec<u32>,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    deadline: Instant,
    seed: u64,
}

impl Ctx {
    fn over(&self) -> bool {
        self.stop.load(Relaxed) || Instant::now() >= self.deadline
    }

    fn victim_socket(&self) -> Option<Sock> {
        sockets().into_iter().find(|s| s.peer == self.victim_pid)
    }

    /// The mapping that carries our calls to the victim: the one whose data
    /// region holds the marker our last victim call echoed.
    fn victim_area(&self, marker: &[u8]) -> Option<Region> {
        Region::all()
            .into_iter()
            .find(|r| (0..r.slots()).any(|s| r.get_bytes(slot_base(s) + OFF_DATA, marker.len()) == marker))
    }

    fn count_reply(&self, data: &[u8]) {
        if data.len() >= 8 && data[..8] == PRIVATE_DATUM.to_le_bytes() {
            Stats::add(&self.stats.private_hits, 1);
        }
    }
}

/// The grant index a remote door names (from its `Debug` form).
fn grant_of(d: &Door) -> Option<u32> {
    let s = format!("{d:?}");
    let g = s.split("grant=").nth(1)?;
    g.trim_end_matches(')').parse().ok()
}

fn call(d: &Door, method: u8, arg: &[u8], doors: &[Door]) -> Result<Reply, lintel::CallError> {
    let mut data = vec![method];
    data.extend_from_slice(arg);
    let mut r = Reply::new();
    d.call(&data, doors, &mut r)?;
    Ok(r)
}

/// Threads making legitimate calls during the attack. Their slots get
/// scribbled too, so a call may hang forever: nobody joins them.
fn start_callers(ctx: &Arc<Ctx>, n: usize) {
    for t in 0..n {
        let ctx = ctx.clone();
        std::thread::spawn(move || {
            let mut rng = Rng::new(ctx.seed ^ (0x1000 + t as u64));
            while !ctx.over() {
                let len = match rng.below(4) {
                    0 => rng.below(INLINE as u64 + 1) as usize,
                    1 => rng.below(DATA_CAP as u64) as usize,
                    2 => DATA_CAP - 1,
                    _ => rng.below(64) as usize,
                };
                let arg = rng.bytes(len);
                let mut doors = Vec::new();
                if rng.chance(20) {
                    doors.push(ctx.victim.clone());
                }
                if rng.chance(10) {
                    doors.extend(ctx.own.clone());
                }
                if rng.chance(5) {
                    doors.extend(ctx.decoy.clone()); // a third-party door: tickets
                }
                let r = match rng.below(10) {
                    0 => ctx.own.as_ref().map(|d| call(d, m::ECHO, &arg, &[])),
                    1 => ctx.decoy.as_ref().map(|d| call(d, m::ECHO, &arg, &[])),
                    _ => Some(call(&ctx.victim, m::ECHO, &arg, &doors)),
                };
                match r {
                    Some(Ok(reply)) => {
                        Stats::add(&ctx.stats.legit_ok, 1);
                        ctx.count_reply(&reply.data);
                        if !reply.data.ends_with(&arg) {
                            Stats::add(&ctx.stats.legit_garbled, 1); // our own scribbling
                        }
                    }
                    Some(Err(_)) => Stats::add(&ctx.stats.legit_err, 1),
                    None => {}
                }
            }
        });
    }
}

// ----------------------------------------------------------------- scribble

/// Fill one slot with garbage and publish it. Returns the published
/// sequence if the server's words were left alone (so its reply shows).
fn scribble_slot(r: &Region, s: usize, rng: &mut Rng, stats: &Stats, held: &[u32]) -> Option<u32> {
    let b = slot_base(s);
    let mut words = 0u64;
    let style = rng.below(5);
    if style == 0 {
        // Everything random, the method bytes kept harmless.
        for off in (OFF_REP_SEQ..SLOT_SIZE).step_by(4) {
            let mut w = rng.u32();
            if off == OFF_DATA {
                w = (w & !0xff) | rng.safe_method() as u32;
            }
            r.put(b + off, w);
        }
        words += ((SLOT_SIZE - OFF_REP_SEQ) / 4) as u64;
    } else if style == 1 {
        // Server-written words only: garbage for our own runtime to read.
        for off in (OFF_REP_SEQ..OFF_DATA).step_by(4) {
            r.put(b + off, rng.nasty());
        }
        words += ((OFF_DATA - OFF_REP_SEQ) / 4) as u64;
    }
    // Door descriptors: forged kinds and indices.
    let nd = rng.below(MAX_DOORS as u64 + 1) as usize;
    for i in 0..nd {
        let o = b + OFF_DOORS + i * DOOR_DESCRIPTOR;
        let kind = match rng.below(6) {
            0 => WD_MINE,
            1 | 2 => WD_YOURS,
            3 => WD_THIRD,
            _ => rng.nasty(),
        };
        let mut pid = rng.nasty();
        if kind == WD_THIRD && (pid == 0 || pid == std::process::id()) {
            pid = 1; // adoption of our sockets: see the targeted modes
        }
        r.put(o, kind);
        r.put(o + 4, rng.nasty());
        r.put(o + 8, pid);
        r.put(o + 12, rng.u32());
    }
    words += 4 * nd as u64;
    // Inline and data arguments: random, method byte harmless.
    let mut inline = rng.bytes(INLINE);
    inline[0] = rng.safe_method();
    r.put_bytes(b + OFF_IN_INLINE, &inline);
    let n = rng.below(64) as usize;
    let mut data = rng.bytes(n + 1);
    data[0] = rng.safe_method();
    r.put_bytes(b + OFF_DATA, &data);
    // Header words: boundary values, guesses, held grants.
    let grant = match rng.below(4) {
        0 if !held.is_empty() => rng.pick(held),
        _ => rng.nasty(),
    };
    r.put(b + OFF_GRANT, grant);
    r.put(b + OFF_FLAGS, rng.nasty());
    r.put(b + OFF_IN_LEN, rng.nasty());
    r.put(
        b + OFF_IN_DOORS,
        match rng.below(3) {
            0 => nd as u32,
            _ => rng.nasty(),
        },
    );
    r.put(b + OFF_CLIENT_STATE, rng.nasty());
    words += 6 + (INLINE as u64 + data.len() as u64).div_ceil(4);
    // Publish: a new request sequence, and wake whoever sleeps on it.
    let seq = match rng.below(4) {
        0 => rng.nasty(),
        _ => r.get(b + OFF_REQ_SEQ).wrapping_add(1 + rng.below(3) as u32),
    };
    r.put(b + OFF_REQ_SEQ, seq);
    wake(r.word(b + OFF_REQ_SEQ));
    Stats::add(&stats.words_written, words + 1);
    Stats::add(&stats.published, 1);
    Stats::add(&stats.wakes, 1);
    (style >= 2).then_some(seq)
}

fn scribble(ctx: &Ctx) {
    let mut rng = Rng::new(ctx.seed ^ 0x5C21);
    let stats = &ctx.stats;
    let mut published = std::collections::HashMap::new();
    while !ctx.over() {
        let regions = Region::all();
        stats.maps.fetch_max(regions.len() as u64, Relaxed);
        let socks = sockets();
        for r in &regions {
            // The unused header page, and anything that is not an area.
            let plain = if r.slots() == 0 { r.len } else { AREA_HEADER };
            for off in (0..plain).step_by(4) {
                r.put(off, rng.u32());
            }
            Stats::add(&stats.words_written, (plain / 4) as u64);
            for s in 0..r.slots() {
                if published.get(&(r.base, s)) == Some(&r.get(slot_base(s) + OFF_REP_SEQ)) {
                    Stats::add(&stats.scribble_answered, 1);
                }
                match scribble_slot(r, s, &mut rng, stats, &ctx.held) {
                    Some(seq) => published.insert((r.base, s), seq),
                    None => published.remove(&(r.base, s)),
                };
                if ctx.over() {
                    break;
                }
            }
        }
        // Make the servers look: kicks for unbound slots, alerts, wakes.
        for s in &socks {
            for _ in 0..8 {
                let slot = if rng.chance(80) {
                    rng.below(SLOTS as u64) as u32
                } else {
                    rng.nasty()
                };
                let msg = if rng.chance(80) {
                    ctl::kick(slot)
                } else {
                    ctl::alert(slot, rng.nasty())
                };
                if send(s.fd.as_fd(), &msg, &[]) {
                    Stats::add(&stats.kicks, 1);
                }
            }
        }
        std::thread::yield_now();
    }
}

// ------------------------------------------------------------------ sockets

fn forged_ctl(rng: &mut Rng, ctx: &Ctx, late: bool) -> Vec<u8> {
    let req = match rng.below(3) {
        0 => rng.u64(),
        1 => rng.below(64),
        _ => u64::MAX,
    };
    let mut msg = match rng.below(ctl::KINDS) {
        0 => ctl::hello(rng.nasty(), rng.nasty()),
        1 => ctl::area(),
        2 => ctl::kick(rng.nasty()),
        3 => ctl::alert(rng.nasty(), rng.nasty()),
        4 => {
            // Releasing what we hold only hurts us; keep it for the end.
            let mut g = rng.nasty();
            while !late && ctx.held.contains(&g) {
                g = g.wrapping_add(1);
            }
            ctl::release(g, rng.nasty())
        }
        5 => ctl::mint(req, rng.nasty()),
        6 => ctl::minted(req, rng.chance(50)),
        7 => ctl::redeem(req),
        8 => ctl::redeemed(req, rng.chance(50).then(|| rng.nasty())),
        9 => ctl::tickets(rng.chance(50), rng.nasty(), rng.nasty()),
        10 => {
            // As for a single release: not what we hold, until the end.
            let n = rng.below(200) as usize;
            let grants = (0..n)
                .map(|_| (rng.nasty(), rng.nasty()))
                .filter(|(g, _)| late || !ctx.held.contains(g))
                .collect();
            ctl::releases(grants)
        }
        _ => {
            let n = rng.below(80) as usize;
            let doors: Vec<[u32; 3]> = (0..n)
                .map(|_| {
                    [
                        rng.pick(&[WD_MINE, WD_YOURS, WD_THIRD, 0, 7]),
                        rng.nasty(),
                        rng.nasty(),
                    ]
                })
                .collect();
            let claimed = rng.chance(10).then(|| rng.u64());
            ctl::boot(&doors, claimed)
        }
    };
    match rng.below(10) {
        0 => msg.truncate(rng.below(msg.len() as u64) as usize), // cut short
        1 => {
            let n = 1 + rng.below(8) as usize;
            msg.extend(rng.bytes(n)); // trailing bytes
        }
        2 => msg[0] |= 0x80, // overlong varint
        _ => {}
    }
    if msg.is_empty() {
        msg.push(0xff);
    }
    msg
}

fn spray_sockets(ctx: &Ctx) {
    let mut rng = Rng::new(ctx.seed ^ 0x50C7);
    let junk = Junk::new();
    let stats = &ctx.stats;
    let start = Instant::now();
    let total = ctx.deadline.saturating_duration_since(start);
    while !ctx.over() {
        let socks = sockets();
        stats.sockets.fetch_max(socks.len() as u64, Relaxed);
        if socks.iter().any(|s| s.peer == ctx.victim_pid) {
            stats.victim_socket.store(1, Relaxed);
        }
        let late = start.elapsed() > total * 4 / 5;
        for _ in 0..200 {
            let Some(s) = socks.get(rng.below(socks.len() as u64) as usize) else {
                break;
            };
            let bytes = match rng.below(10) {
                0..=2 => {
                    let len = match rng.below(4) {
                        0 => 1 + rng.below(16) as usize,
                        1 => 1 + rng.below(512) as usize,
                        2 => wire_max_ish(&mut rng),
                        _ => 1 + rng.below(20_000) as usize,
                    };
                    rng.bytes(len)
                }
                _ => forged_ctl(&mut rng, ctx, late),
            };
            // Heavy descriptor loads go only to the victim: the test process
            // is a target too, but it runs the other tests meanwhile.
            let max_fds = if s.peer == ctx.victim_pid { 64 } else { 4 };
            let fds = if rng.chance(25) {
                junk.some(&mut rng, max_fds)
            } else {
                Vec::new()
            };
            if send(s.fd.as_fd(), &bytes, &fds) {
                Stats::add(&stats.msgs_sent, 1);
                Stats::add(&stats.fds_sent, fds.len() as u64);
            } else {
                Stats::add(&stats.msgs_refused, 1);
                if rng.chance(10) {
                    std::thread::sleep(Duration::from_micros(200)); // queue full
                }
            }
        }
    }
}

/// Lengths around the runtime's 16 KiB control-message limit.
fn wire_max_ish(rng: &mut Rng) -> usize {
    16 * 1024 - 2 + rng.below(5) as usize
}

/// Last words: an empty message, which a reader may take for hang-up, and a
/// flood of releases for everything we hold. Nothing usable is left after.
fn parting_shots(ctx: &Ctx) {
    for s in sockets() {
        for g in 0..64 {
            send(s.fd.as_fd(), &ctl::release(g, u32::MAX), &[]);
        }
        if send(s.fd.as_fd(), &[], &[]) {
            Stats::add(&ctx.stats.msgs_sent, 1);
        }
    }
}

// -------------------------------------------------------------------- forge

/// Requests written by hand into one slot of the victim's call area.
struct Forger<'a> {
    area: &'a Region,
    slot: usize,
    seq: u32,
    sock: BorrowedFd<'a>,
    stats: &'a Stats,
}

struct Answer {
    status: u32,
    data: Vec<u8>,
}

impl Forger<'_> {
    fn off(&self, field: usize) -> usize {
        slot_base(self.slot) + field
    }

    /// Write a request for `method` carrying buffer descriptors `ds`.
    fn buffers(&self, method: u8, ds: &[lintel::abi::descriptor::BufferDescriptor]) {
        let a = self.area;
        a.put(self.off(OFF_FLAGS), FLAG_BUFS);
        a.put(self.off(OFF_IN_LEN), 1);
        a.put_bytes(self.off(OFF_IN_INLINE), &[method]);
        a.put(self.off(OFF_IN_DOORS), 0);
        a.put(self.off(OFF_IN_BUFS), ds.len() as u32);
        for (i, d) in ds.iter().enumerate() {
            a.put_bytes(
                self.off(lintel::abi::descriptor::BufferDescriptor::offset(i)),
                &d.to_bytes(),
            );
        }
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        if self.seq == 0 || self.seq == u32::MAX {
            self.seq = 1;
        }
        self.seq
    }

    /// Write a request and publish it the way a client would; `None` if no
    /// reply came within `wait`.
    fn call(
        &mut self,
        grant: u32,
        args: &[u8],
        doors: &[[u32; 4]],
        in_doors: Option<u32>,
        wait: Duration,
    ) -> Option<Answer> {
        let a = self.area;
        a.put(self.off(OFF_FLAGS), 0);
        a.put(self.off(OFF_IN_LEN), args.len() as u32);
        if args.len() <= INLINE {
            a.put_bytes(self.off(OFF_IN_INLINE), args);
        } else {
            a.put_bytes(self.off(OFF_DATA), args);
        }
        for (i, d) in doors.iter().enumerate() {
            for (j, &w) in d.iter().enumerate() {
                a.put(self.off(OFF_DOORS + i * DOOR_DESCRIPTOR + 4 * j), w);
            }
        }
        a.put(self.off(OFF_IN_DOORS), in_doors.unwrap_or(doors.len() as u32));
        self.publish(grant, wait)
    }

    /// Publish the request written in the slot (grant and sequence set
    /// here) and wait up to `wait` for its reply.
    fn publish(&mut self, grant: u32, wait: Duration) -> Option<Answer> {
        let a = self.area;
        let seq = self.next_seq();
        a.put(self.off(OFF_GRANT), grant);
        a.put(self.off(OFF_CLIENT_STATE), 0);
        a.put(self.off(OFF_REQ_SEQ), seq);
        Stats::add(&self.stats.forged_calls, 1);
        Stats::add(&self.stats.published, 1);
        match a.get(self.off(OFF_SERVER_STATE)) {
            SPINNING | BUSY => {}
            SLEEPING => {
                wake(a.word(self.off(OFF_REQ_SEQ)));
                Stats::add(&self.stats.wakes, 1);
            }
            _ => {
                send(self.sock, &ctl::kick(self.slot as u32), &[]);
                Stats::add(&self.stats.kicks, 1);
            }
        }
        let end = Instant::now() + wait;
        let mut turns = 0u32;
        loop {
            if a.get(self.off(OFF_REP_SEQ)) == seq {
                break;
            }
            if Instant::now() > end {
                return None;
            }
            turns += 1;
            if turns < 200 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
            if turns.is_multiple_of(5000) {
                // A kick may have raced with the server letting go.
                send(self.sock, &ctl::kick(self.slot as u32), &[]);
            }
        }
        Stats::add(&self.stats.forged_replies, 1);
        let status = a.get(self.off(OFF_STATUS));
        let out_len = a.get(self.off(OFF_OUT_LEN));
        let n = (out_len as usize).min(DATA_CAP);
        let data = if n <= INLINE {
            a.get_bytes(self.off(OFF_OUT_INLINE), n)
        } else {
            a.get_bytes(self.off(OFF_DATA), n)
        };
        if status == ST_OK {
            Stats::add(&self.stats.forged_ok, 1);
        }
        Some(Answer { status, data })
    }
}

fn forge(ctx: &Ctx, area: &Region, sock: BorrowedFd<'_>, slot: usize, budget: Duration) {
    let stats = &ctx.stats;
    let mut rng = Rng::new(ctx.seed ^ 0xF0F0);
    let mut f = Forger {
        area,
        slot,
        seq: rng.u32() >> 1,
        sock,
        stats,
    };
    let wait = Duration::from_millis(200);
    let end = Instant::now() + budget;
    let ok = |a: &Option<Answer>| a.as_ref().is_some_and(|a| a.status == ST_OK);

    // 1. Guess grants: 0..10000 and the edges.
    let random: Vec<u32> = (0..200).map(|_| rng.u32()).collect();
    let guesses = (0..10_000u32).chain(BOUNDARY).chain(random);
    for g in guesses {
        if Instant::now() > end || ctx.stop.load(Relaxed) {
            break;
        }
        let method = if ctx.held.contains(&g) {
            m::SECRET_CALLS
        } else {
            rng.safe_method()
        };
        let a = f.call(g, &[method], &[], None, wait);
        if let Some(a) = &a {
            ctx.count_reply(&a.data);
        }
        if ok(&a) {
            if ctx.held.contains(&g) {
                Stats::add(&stats.held_grants_ok, 1);
            } else {
                Stats::add(&stats.foreign_grants_ok, 1);
                eprintln!("attacker: grant {g} answered though not held");
            }
        }
    }

    // 2. Forged WD_YOURS: ask the victim for the pid of a door we name by a
    //    guessed grant index; only doors we hold may resolve.
    let Some(&ctl_grant) = ctx.held.first() else {
        return;
    };
    for g in (0..2_000u32).chain(BOUNDARY) {
        if Instant::now() > end || ctx.stop.load(Relaxed) {
            break;
        }
        let d = [WD_YOURS, g, 0, 0];
        let a = f.call(ctl_grant, &[m::SERVER_PID_OF_PASSED], &[d], None, wait);
        if ok(&a) && !ctx.held.contains(&g) {
            Stats::add(&stats.foreign_yours_ok, 1);
            eprintln!("attacker: WD_YOURS {g} resolved though not held");
        }
    }

    // 3. Descriptor salad: full tables of mixed kinds, wrong counts.
    let junk = Junk::new();
    while Instant::now() < end && !ctx.stop.load(Relaxed) {
        let n = rng.below(MAX_DOORS as u64 + 1) as usize;
        let mut third = 0u32;
        let doors: Vec<[u32; 4]> = (0..n)
            .map(|_| match rng.below(4) {
                0 => [WD_MINE, rng.nasty(), rng.u32(), rng.u32()],
                1 => [WD_YOURS, rng.nasty(), 0, 0],
                2 => {
                    third += 1;
                    // Tickets naming real domains; the adoption of sockets
                    // (pid 0 or our own pid) has its own targeted modes.
                    let pid = rng.pick(&[ctx.victim_pid, ctx.parent_pid, 999_999_999, u32::MAX]);
                    [WD_THIRD, rng.below(70) as u32, pid, 0]
                }
                _ => [rng.nasty(), rng.nasty(), rng.nasty(), rng.nasty()],
            })
            .collect();
        let in_doors = match rng.below(4) {
            0 => Some(rng.nasty()),
            _ => None,
        };
        if third > 0 && rng.chance(70) {
            // Park tickets where the server will look for them.
            let fds = junk.some(&mut rng, 64);
            let seq = f.seq.wrapping_add(1);
            if send(sock, &ctl::tickets(true, slot as u32, seq), &fds) {
                Stats::add(&stats.fds_sent, fds.len() as u64);
                Stats::add(&stats.msgs_sent, 1);
            }
        }
        let mut args = vec![rng.safe_method()];
        let n = rng.below(40) as usize;
        args.extend(rng.bytes(n));
        let a = f.call(ctl_grant, &args, &doors, in_doors, wait);
        if let Some(a) = &a {
            ctx.count_reply(&a.data);
        }
    }
}

// --------------------------------------------------------- targeted attacks

/// Return loans never lent to us: every page of the victim's arena by
/// message, then its first pages again in requests (`BUF_RETURNED`
/// descriptors, `MAX_BUFFERS` a request, on an echo). The victim must
/// take back only what it lent this connection (nothing): the loans it
/// lent others stay theirs.
fn forge_returns(ctx: &Ctx, area: &Region, sock: BorrowedFd<'_>) {
    use lintel::abi::control::{encode, Ctl};
    use lintel::abi::descriptor::BufferDescriptor;
    use lintel::abi::{BUF_RETURNED, LOAN_ARENA_SIZE};
    const PAGE: usize = 4096;
    let stats = &ctx.stats;
    let pages: Vec<(u64, u32)> = (0..LOAN_ARENA_SIZE / PAGE)
        .map(|i| ((i * PAGE) as u64, PAGE as u32))
        .collect();
    // Sent without blocking: a full socket is waited out (the victim's
    // watcher drains it), for at most a few seconds in all.
    let give_up = Instant::now() + Duration::from_secs(10);
    let patient = |bytes: &[u8]| loop {
        if send(sock, bytes, &[]) {
            return true;
        }
        if Instant::now() > give_up {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    for batch in pages.chunks(512) {
        if patient(&encode(&Ctl::Returned {
            loans: batch.to_vec(),
        })) {
            Stats::add(&stats.msgs_sent, 1);
            Stats::add(&stats.returns_forged, batch.len() as u64);
        }
    }
    // Whole loans too, of the lengths a lender rounds to.
    for len in [64u32 << 10, 1 << 20] {
        let whole: Vec<(u64, u32)> = (0..64).map(|i| (i * u64::from(len), len)).collect();
        if patient(&encode(&Ctl::Returned { loans: whole })) {
            Stats::add(&stats.returns_forged, 64);
        }
    }
    let Some(&grant) = ctx.held.first() else {
        return;
    };
    let mut f = Forger {
        area,
        slot: SLOTS - 1,
        seq: 5000,
        sock,
        stats,
    };
    let first: Vec<u64> = (0..4096u64).map(|i| i * PAGE as u64).collect();
    for chunk in first.chunks(MAX_BUFFERS) {
        let ds: Vec<BufferDescriptor> = chunk
            .iter()
            .map(|&off| BufferDescriptor {
                kind: BUF_RETURNED,
                len: 64 << 10,
                off,
            })
            .collect();
        f.buffers(m::ECHO, &ds);
        if f.publish(grant, Duration::from_secs(3)).is_some() {
            Stats::add(&stats.returns_forged, chunk.len() as u64);
        }
    }
}

/// Bulk segments and buffers that lie: each forged request must be refused
/// with the status expected (or served, for the honest controls), and the
/// victim must neither fault nor hang. Counts `bulk_cases` and
/// `bulk_expected`; a mismatch is named on stderr.
fn bulk_attacks(ctx: &Ctx, area: &Region, sock: BorrowedFd<'_>) {
    use rustix::fs::{MemfdFlags, SealFlags};
    let Some(&grant) = ctx.held.first() else {
        return;
    };
    let stats = &ctx.stats;
    let mut f = Forger {
        area,
        slot: SLOTS - 1,
        seq: 1000,
        sock,
        stats,
    };
    let wait = Duration::from_secs(3);
    let memfd = |len: u64, seals: SealFlags| -> OwnedFd {
        let fd = rustix::fs::memfd_create("attack", MemfdFlags::ALLOW_SEALING).expect("memfd");
        rustix::fs::ftruncate(&fd, len).expect("ftruncate");
        if !seals.is_empty() {
            rustix::fs::fcntl_add_seals(&fd, seals).expect("seals");
        }
        fd
    };
    let resize = SealFlags::SHRINK | SealFlags::GROW;
    let expect = |name: &str, f: &mut Forger<'_>, want: Option<u32>| {
        Stats::add(&stats.bulk_cases, 1);
        let got = f.publish(grant, wait).map(|a| a.status & !ST_UNTAKEN);
        if got == want {
            Stats::add(&stats.bulk_expected, 1);
        } else {
            eprintln!("attacker: bulk case {name}: status {got:?}, expected {want:?}");
        }
    };
    // Writes a bulk request header naming segment `generation` for `len`
    // bytes; the segment (if any) was sent just before.
    let bulk_header = |f: &Forger<'_>, len: u32, generation: u32| {
        let a = f.area;
        a.put(f.off(OFF_FLAGS), 0);
        a.put(f.off(OFF_IN_LEN), len);
        a.put(f.off(OFF_IN_DOORS), 0);
        a.put(f.off(OFF_IN_SEG), generation);
    };
    let segment = |generation: u32, fd: &OwnedFd| {
        let msg = lintel::abi::control::encode(&lintel::abi::control::Ctl::Segment {
            request: true,
            slot: (SLOTS - 1) as u32,
            generation,
        });
        send(sock, &msg, &[fd.as_fd()])
    };
    let ok = Some(ST_OK);
    let bad = Some(ST_BAD_MESSAGE);

    // A segment never sent.
    bulk_header(&f, DATA_CAP as u32 + 1, 7);
    expect("segment never sent", &mut f, bad);
    // A segment that could shrink (SIGBUS if it were mapped and truncated).
    let loose = memfd(1 << 20, SealFlags::empty());
    segment(8, &loose);
    bulk_header(&f, 100_000, 8);
    expect("unsealed segment", &mut f, bad);
    rustix::fs::ftruncate(&loose, 0).ok();
    // Shorter than the header says.
    let short = memfd(64 << 10, resize);
    segment(9, &short);
    bulk_header(&f, 1 << 20, 9);
    expect("segment shorter than the data", &mut f, bad);
    // Not a whole number of pages.
    let odd = memfd(70_001, resize);
    segment(10, &odd);
    bulk_header(&f, 70_000, 10);
    expect("segment of an odd size", &mut f, bad);
    // Above the victim's limit: refused before anything is read or allocated.
    bulk_header(&f, u32::MAX, 9);
    expect("data above the limit", &mut f, Some(ST_TOO_LARGE));
    // Honest control: a sealed 128 KiB segment, an echo of 100 KB, then a
    // huge sparse one (only what the limit needs is mapped).
    for (generation, size) in [(11u32, 128u64 << 10), (12, 64 << 30)] {
        let seg = memfd(size, resize);
        let map = Region::map_fd(&seg, 128 << 10);
        map.put_bytes(0, &[m::LEN]);
        segment(generation, &seg);
        bulk_header(&f, 100_000, generation);
        expect("honest segment", &mut f, ok);
        // The segment stays ours to scribble on while the victim reads it.
        for i in 0..(128 << 10) / 4 {
            map.put(i * 4, 0xdead_beef);
        }
    }
    // Streamed arguments (`FLAG_STREAM`): never written or dribbled out, the
    // victim refuses the call once the caller's time is up (2 s and a
    // little), and its thread is free again; written late, it waits and
    // serves; claimed written beyond the request, it reads the request's
    // length and no more.
    let seg = memfd(128 << 10, resize);
    let map = Region::map_fd(&seg, 128 << 10);
    map.put_bytes(0, &[m::LEN]);
    segment(13, &seg);
    let streamed = |f: &Forger<'_>, written: u32| {
        bulk_header(f, 100_000, 13);
        f.area.put(f.off(OFF_FLAGS), FLAG_STREAM);
        f.area.put(f.off(OFF_IN_STREAMED), written);
    };
    // The same call area, seen from other threads (mappings stay).
    let at = f.off(OFF_IN_STREAMED);
    let area_again = || Region {
        base: area.base,
        len: area.len,
    };
    let refused_in_time = |name: &str, f: &mut Forger<'_>| {
        Stats::add(&stats.bulk_cases, 1);
        let t0 = Instant::now();
        let got = f
            .publish(grant, Duration::from_secs(30))
            .map(|a| a.status & !ST_UNTAKEN);
        if got == bad && t0.elapsed() >= Duration::from_secs(2) {
            Stats::add(&stats.bulk_expected, 1);
        } else {
            eprintln!(
                "attacker: bulk case {name}: status {got:?} after {:?}",
                t0.elapsed()
            );
        }
    };
    streamed(&f, 8);
    refused_in_time("streamed, never written", &mut f);
    // Progress that keeps moving, 8 bytes at a time: the victim's time is
    // for the whole request, not for each wait.
    streamed(&f, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let dribble = {
        let (stop, area) = (stop.clone(), area_again());
        std::thread::spawn(move || {
            let mut written = 0;
            while !stop.load(SeqCst) && written < 90_000 {
                written += 8;
                area.put(at, written);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    refused_in_time("streamed, dribbled", &mut f);
    stop.store(true, SeqCst);
    let _ = dribble.join();
    streamed(&f, 0);
    let area_late = area_again();
    let late = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        area_late.put(at, 100_000);
    });
    expect("streamed, written late", &mut f, ok);
    let _ = late.join();
    streamed(&f, u32::MAX);
    expect("streamed, claimed written beyond the request", &mut f, ok);

    // Buffers: a sealed snapshot that is not sealed.
    use lintel::abi::descriptor::BufferDescriptor;
    let d = |kind: u32, len: u32, off: u64| BufferDescriptor { kind, len, off };
    let descs = |f: &Forger<'_>, ds: &[BufferDescriptor]| f.buffers(m::BUFFERS_INFO, ds);
    let buffers_msg = |seq: u32| {
        lintel::abi::control::encode(&lintel::abi::control::Ctl::Buffers {
            request: true,
            slot: (SLOTS - 1) as u32,
            seq,
        })
    };
    let writable = memfd(4096, resize);
    send(sock, &buffers_msg(f.seq.wrapping_add(1)), &[writable.as_fd()]);
    descs(&f, &[d(BUF_SEALED, 4096, 0)]);
    expect("snapshot not sealed against writing", &mut f, bad);
    // A snapshot whose descriptor claims more than the file holds.
    let sealed = memfd(4096, resize | SealFlags::WRITE);
    send(sock, &buffers_msg(f.seq.wrapping_add(1)), &[sealed.as_fd()]);
    descs(&f, &[d(BUF_SEALED, 8192, 0)]);
    expect("snapshot shorter than its descriptor", &mut f, bad);
    // Sealed buffers named but never sent.
    descs(&f, &[d(BUF_SEALED, 10, 0)]);
    expect("snapshot never sent", &mut f, bad);
    // A loan before any pool was sent.
    descs(&f, &[d(BUF_LOAN, 10, 0)]);
    expect("loan without a pool", &mut f, bad);
    // Descriptors: named but never sent, one sent for two named, one with
    // a length; then an honest one (a pipe: the victim must not read it).
    descs(&f, &[d(BUF_FD, 0, 0)]);
    expect("descriptor never sent", &mut f, bad);
    let (pipe_r, _pipe_w) = rustix::pipe::pipe().expect("pipe");
    send(sock, &buffers_msg(f.seq.wrapping_add(1)), &[pipe_r.as_fd()]);
    descs(&f, &[d(BUF_FD, 0, 0), d(BUF_FD, 0, 0)]);
    expect("two descriptors named, one sent", &mut f, bad);
    send(sock, &buffers_msg(f.seq.wrapping_add(1)), &[pipe_r.as_fd()]);
    descs(&f, &[d(BUF_FD, 4096, 0)]);
    expect("descriptor with a length", &mut f, bad);
    send(sock, &buffers_msg(f.seq.wrapping_add(1)), &[pipe_r.as_fd()]);
    descs(&f, &[d(BUF_FD, 0, 0)]);
    expect("honest descriptor", &mut f, ok);
    // Unknown kinds, too many buffers.
    descs(&f, &[d(99, 10, 0)]);
    expect("unknown buffer kind", &mut f, bad);
    descs(&f, &vec![d(BUF_LOAN, 1, 0); MAX_BUFFERS + 1]);
    expect("too many buffers", &mut f, bad);
    // A pool (sealed, 1 MiB), then loans outside it or misaligned, then an
    // honest loan whose bytes we scribble while the victim copies them.
    let pool = memfd(1 << 20, resize);
    let pool_map = Region::map_fd(&pool, 1 << 20);
    send(
        sock,
        &lintel::abi::control::encode(&lintel::abi::control::Ctl::Arena),
        &[pool.as_fd()],
    );
    descs(&f, &[d(BUF_LOAN, 4096, 1 << 20)]);
    expect("loan past the pool", &mut f, bad);
    descs(&f, &[d(BUF_LOAN, 8192, (1 << 20) - 4096)]);
    expect("loan running off the pool", &mut f, bad);
    descs(&f, &[d(BUF_LOAN, 100, 12)]);
    expect("misaligned loan", &mut f, bad);
    descs(&f, &[d(BUF_LOAN, 4096, 1 << 32)]);
    expect("loan offset above 4 GiB", &mut f, bad);
    let stop = AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let mut x = 1u32;
            while !stop.load(Relaxed) {
                for i in 0..(256 << 10) / 4 {
                    x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    pool_map.put(i * 4, x);
                }
            }
        });
        for _ in 0..20 {
            descs(&f, &[d(BUF_LOAN, 256 << 10, 0)]);
            expect("honest loan, scribbled", &mut f, ok);
        }
        stop.store(true, Relaxed);
    });
}

/// Requests whose only door is a third-party one whose "ticket" is a socket
/// we made. With `cycle`, the twin end travels in the same batch.
fn plant_ticket_traps(ctx: &Ctx, area: &Region, sock: BorrowedFd<'_>, cycle: bool, keep: &mut Vec<OwnedFd>) {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let Some(&ctl_grant) = ctx.held.first() else {
        return;
    };
    let me = std::process::id();
    for i in 0..24 {
        let slot = SLOTS - 1 - i;
        let Ok((a, b)) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        ) else {
            continue;
        };
        let seq = 7 + i as u32;
        let pid = if i % 2 == 0 { 0 } else { me };
        let fds = if cycle {
            vec![a.as_fd(), b.as_fd()]
        } else {
            vec![a.as_fd()]
        };
        if !send(sock, &ctl::tickets(true, slot as u32, seq), &fds) {
            continue;
        }
        Stats::add(&ctx.stats.fds_sent, fds.len() as u64);
        let mut f = Forger {
            area,
            slot,
            seq: seq - 1,
            sock,
            stats: &ctx.stats,
        };
        // Fire and forget: the reply is what never comes.
        let _ = f.call(
            ctl_grant,
            &[m::ECHO],
            &[[WD_THIRD, 0, pid, 0]],
            None,
            Duration::from_millis(5),
        );
        Stats::add(&ctx.stats.planted, 1);
        drop(a);
        if !cycle {
            keep.push(b);
        }
    }
}

/// Pass the decoy to the victim while a helper thread rewrites the pid of
/// every third-party descriptor in our slots to 0. To win every race, the
/// victim's server threads are first kept busy with legitimate slow calls
/// (its control door's plain sleep), so the transfers wait in its queue
/// while they are rewritten.
fn pass_with_pid_zero(ctx: &Ctx, area: &Region) {
    let Some(decoy) = &ctx.decoy else { return };
    let stats = &ctx.stats;
    for _round in 0..3 {
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..20 {
                s.spawn(|| call(&ctx.victim, m::SLEEP_PLAIN, &300u64.to_le_bytes(), &[]));
            }
            std::thread::sleep(Duration::from_millis(100));
            s.spawn(|| {
                while !done.load(Relaxed) {
                    for slot in 0..SLOTS {
                        let o = slot_base(slot) + OFF_DOORS;
                        if area.get(o) == WD_THIRD && area.get(o + 8) != 0 {
                            area.put(o + 8, 0);
                        }
                    }
                    std::thread::yield_now();
                }
            });
            let passers: Vec<_> = (0..10)
                .map(|_| {
                    s.spawn(|| {
                        let r = call(&ctx.victim, m::ECHO, b"pid0", std::slice::from_ref(decoy));
                        Stats::add(
                            if r.is_ok() {
                                &stats.legit_ok
                            } else {
                                &stats.legit_err
                            },
                            1,
                        );
                        Stats::add(&stats.planted, 1);
                    })
                })
                .collect();
            for p in passers {
                let _ = p.join();
            }
            done.store(true, Relaxed);
        });
    }
}

/// Mail our own end of the victim connection to the victim.
fn mail_own_socket(ctx: &Ctx, sock: BorrowedFd<'_>) {
    let ok1 = send(sock, &ctl::tickets(true, 3, 12345), &[sock]);
    let ok2 = send(sock, &ctl::boot(&[], None), &[sock]);
    let ok3 = send(sock, &ctl::minted(u64::MAX - 3, true), &[sock]);
    Stats::add(&ctx.stats.planted, ok1 as u64 + ok2 as u64 + ok3 as u64);
}

/// Make the victim keep as many descriptors as it will take.
fn flood_fds(ctx: &Ctx, sock: BorrowedFd<'_>) {
    let Ok(null) = std::fs::File::open("/dev/null") else {
        return;
    };
    let fds: Vec<BorrowedFd<'_>> = (0..64).map(|_| null.as_fd()).collect();
    let mut rng = Rng::new(ctx.seed ^ 0xFD);
    let end = Instant::now() + Duration::from_secs(3);
    let mut sent = 0u64;
    // Ticket batches for calls that never come (the runtime parks 1024).
    for i in 0..1100u32 {
        while Instant::now() < end {
            if send(sock, &ctl::tickets(rng.chance(50), i, rng.u32()), &fds) {
                sent += 64;
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    // Unsolicited answers with a descriptor each.
    for i in 0..20_000u64 {
        if Instant::now() >= end {
            break;
        }
        if send(sock, &ctl::minted(1 << 40 | i, true), &fds[..1]) {
            sent += 1;
        } else {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    Stats::add(&ctx.stats.fds_sent, sent);
    Stats::add(&ctx.stats.planted, 1);
}

// ------------------------------------------------------------ other version

/// `other-version`: on the boot connection, say hello as a domain of the
/// next protocol version would and offer no doors; then wait to be killed.
fn speak_another_version() -> ! {
    let raw: i32 = std::env::var("LINTEL_BOOT_FD")
        .ok()
        .and_then(|v| v.parse().ok())
        .expect("started by lintel::boot::spawn");
    // SAFETY: `raw` is the boot socket `spawn` left open for this process;
    // nothing else in it uses the number (the runtime never joins here).
    let sock = unsafe { BorrowedFd::borrow_raw(raw) };
    let pid = std::process::id();
    send(sock, &ctl::hello(pid, VERSION + 1), &[]);
    send(sock, &ctl::boot(&[], None), &[]);
    println!("PLANTED");
    loop {
        std::thread::park();
    }
}

// --------------------------------------------------------------------- main

fn main() {
    // A hostile test domain must not outlive its test.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "all".into());
    let seed: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let ms: u64 = std::env::var("HOSTILE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);

    if mode == "other-version" {
        speak_another_version();
    }
    let doors = match lintel::boot::join(&[]) {
        Ok(d) => d,
        Err(e) => {
            println!("HOSTILE_ERROR join: {e}");
            std::process::exit(2);
        }
    };
    let Some(victim) = doors.first().cloned() else {
        println!("HOSTILE_ERROR no victim door offered");
        std::process::exit(2);
    };
    let decoy = doors.get(1).cloned();
    let victim_pid = victim.server_pid();
    let parent_pid = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32);

    // Legitimate calls first, so areas and connections exist; the marker
    // tells us which mapping carries our calls to the victim.
    let mut rng = Rng::new(seed);
    let mut marker = b"lintel-attacker-marker:".to_vec();
    marker.extend(rng.bytes(41));
    let echoed = call(&victim, m::ECHO, &marker, &[]).map(|r| r.data);
    if echoed.as_deref() != Ok(&marker[..]) {
        println!("HOSTILE_ERROR first call failed: {echoed:?}");
        std::process::exit(3);
    }
    if let Some(d) = &decoy {
        let _ = call(d, m::ECHO, b"decoy", &[]);
    }
    let own = call(&victim, m::MAKE_DOOR, &OWN_DATUM.to_le_bytes(), &[])
        .ok()
        .and_then(|mut r| r.doors.pop());
    if let Some(d) = &own {
        let _ = call(d, m::ECHO, b"own", &[]);
    }
    let held: Vec<u32> = [Some(&victim), own.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(grant_of)
        .collect();
    // Our last victim call must be the marker one for `victim_area`.
    let _ = call(&victim, m::ECHO, &marker, &[]);

    let stats = Arc::new(Stats::default());
    let ctx = Arc::new(Ctx {
        victim,
        decoy,
        own,
        victim_pid,
        parent_pid,
        held,
        stats: stats.clone(),
        stop: Arc::new(AtomicBool::new(false)),
        deadline: Instant::now() + Duration::from_millis(ms),
        seed,
    });
    let area = ctx.victim_area(&marker);
    let vsock = ctx.victim_socket();
    stats.maps.store(Region::all().len() as u64, Relaxed);
    stats.victim_area.store(area.is_some() as u64, Relaxed);
    stats.sockets.store(sockets().len() as u64, Relaxed);
    stats.victim_socket.store(vsock.is_some() as u64, Relaxed);
    let (Some(area), Some(vsock)) = (area, vsock) else {
        println!("{}", stats.line());
        println!("HOSTILE_ERROR cannot find the victim's call area or socket");
        std::process::exit(4);
    };
    let vfd = vsock.fd.as_fd();

    let mut keep = Vec::new();
    match mode.as_str() {
        "scribble" => {
            start_callers(&ctx, 3);
            scribble(&ctx);
        }
        "sockets" => {
            start_callers(&ctx, 2);
            spray_sockets(&ctx);
            parting_shots(&ctx);
        }
        "forge" => {
            start_callers(&ctx, 1);
            let budget = ctx.deadline.saturating_duration_since(Instant::now());
            forge(&ctx, &area, vfd, SLOTS - 1, budget);
        }
        "all" => {
            start_callers(&ctx, 2);
            let budget = ctx.deadline.saturating_duration_since(Instant::now());
            std::thread::scope(|s| {
                s.spawn(|| scribble(&ctx));
                s.spawn(|| spray_sockets(&ctx));
                s.spawn(|| forge(&ctx, &area, vfd, SLOTS - 1, budget));
                s.spawn(|| forge(&ctx, &area, vfd, SLOTS - 2, budget));
            });
            parting_shots(&ctx);
        }
        "ticket-hang" | "ticket-cycle" => {
            plant_ticket_traps(&ctx, &area, vfd, mode == "ticket-cycle", &mut keep);
        }
        "self-socket" => mail_own_socket(&ctx, vfd),
        "ticket-pid0" => pass_with_pid_zero(&ctx, &area),
        "fd-flood" => flood_fds(&ctx, vfd),
        "bulk" => bulk_attacks(&ctx, &area, vfd),
        "loan-return" => forge_returns(&ctx, &area, vfd),
        other => {
            println!("HOSTILE_ERROR unknown mode {other}");
            std::process::exit(2);
        }
    }
    ctx.stop.store(true, Relaxed);

    // Holding modes keep their trap set until the test closes our stdin.
    if matches!(mode.as_str(), "ticket-hang" | "fd-flood") {
        println!("PLANTED");
        let _ = std::io::stdout().flush();
        let mut sink = [0u8; 64];
        let _ = std::io::stdin().read(&mut sink);
    }
    println!("{}", stats.line());
    let _ = std::io::stdout().flush();
    drop(keep);
    std::process::exit(0);
}
