//! A client process's session with the service: its shared page of
//! descriptors, its userfaultfd, and the pager thread that resolves its
//! faults.
//!
//! Between faults the pager maps ahead of them: each 64 KiB chunk a
//! client faults on lets it fill and map `map_ahead` more chunks of the
//! same file into that client, from the next one on, while no fault
//! waits. Filling the cache from the host (about 2 GB/s here) is the
//! cost of a first touch; a fault adds a round trip between two threads
//! (tens of µs across CPUs) to each 64 KiB. Mapping ahead moves the fill
//! off the client's path where the client reads on, and cuts its round
//! trips where it reads at random, for memory bounded by what it touched.
//!
//! The client trusts the service; the service trusts no client. Whatever
//! a client does with its page, its mappings or its userfaultfd, the worst
//! outcome is its own eviction: its descriptors stop working, its open
//! files are revoked, its eventfd is signalled (its library then stops
//! using its windows), and every other client goes on.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::proto::token::{self, Desc, PAGE_LEN, SLOTS};
use crate::proto::{Attached, FsError, MAX_WINDOW, MIN_WINDOW, OpenFileServer, Session, SessionServer};
use crate::service::credentials::As;
use crate::service::host::stat_of;
use crate::service::node::{self, Node, SPAN, TokenHolder};
use crate::service::open::{Opened, Opens};
use crate::service::tally::Tally;
use crate::uffd;
use lintel_sys::Mapping;

/// The window the pager resolves around a fault (when the client touched
/// its mapping outside the window it asked for).
const FAULT_WINDOW: u64 = 64 * 1024;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

struct Binding {
    /// Unique among the session's bindings, ever: a slot and a mapping
    /// address are both reused once a file is let go of, and a late
    /// update meant for the binding before must not land in this one.
    id: u64,
    open: Arc<Opened>,
    /// Where the client mapped the cache, once it said so.
    base: Option<u64>,
    /// 64 KiB chunks already mapped in the client (as of the node's
    /// `epoch`): a window over them needs no fill and no `CONTINUE`.
    mapped: Mapped,
    ahead: Ahead,
}

/// What the pager may still map of a file ahead of the client's faults
/// (see [`Sessions::map_ahead`]).
#[derive(Default)]
struct Ahead {
    /// Chunks it may still map.
    budget: u64,
    /// The chunk it looks from: the one after the last it mapped.
    next: u64,
    /// Whether it went past the file's end to its start since the client
    /// last faulted.
    wrapped: bool,
}

impl Ahead {
    /// The client faulted on `chunk`: `factor` more chunks may follow.
    fn fault(&mut self, chunk: u64, factor: u64) {
        self.budget = self.budget.saturating_add(factor);
        self.next = chunk + 1;
        self.wrapped = false;
    }

    /// The first chunk from `next` on, wrapping once, below `end` and not
    /// in `mapped`, taken from the budget (`next` goes on after it);
    /// `None` when there is none (and nothing more to do).
    fn pick(&mut self, mapped: &std::collections::BTreeSet<u64>, end: u64) -> Option<u64> {
        loop {
            let mut c = self.next;
            for &m in mapped.range(c..) {
                if m != c {
                    break;
                }
                c += 1;
            }
            if c < end {
                self.budget = self.budget.saturating_sub(1);
                self.next = c + 1;
                return Some(c);
            }
            if self.wrapped {
                self.budget = 0;
                return None;
            }
            self.wrapped = true;
            self.next = 0;
        }
    }
}

#[derive(Default)]
struct Mapped {
    epoch: u64,
    chunks: std::collections::BTreeSet<u64>,
}

impl Mapped {
    fn current(&mut self, epoch: u64) -> &mut std::collections::BTreeSet<u64> {
        if self.epoch != epoch {
            self.chunks.clear();
            self.epoch = epoch;
        }
        &mut self.chunks
    }
}

const CHUNK: u64 = 64 * 1024;

/// For tests: `LINTEL_FS_PAGER_DELAY_US` makes the pager sleep that long
/// after it wakes a faulting thread, so what the pager does then races
/// what the woken client does next (nothing may depend on it).
fn pager_delay() -> Option<std::time::Duration> {
    static DELAY: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
    *DELAY.get_or_init(|| {
        let us = std::env::var("LINTEL_FS_PAGER_DELAY_US")
            .ok()?
            .parse::<u64>()
            .ok()?;
        Some(std::time::Duration::from_micros(us))
    })
}

/// The service's half of a session.
struct SessionCore {
    pub id: u64,
    page: Mapping,
    uffd: OwnedFd,
    evicted_fd: OwnedFd,
    bindings: Mutex<Vec<Option<Binding>>>,
    /// The client process is gone (its door was unreferenced).
    dead: AtomicBool,
    evicted: AtomicBool,
    timeout: Duration,
    /// Chunks the pager maps ahead per chunk faulted.
    map_ahead: u64,
    tally: Arc<Tally>,
    /// The service's count of live sessions, ours included until we drop.
    alive: Arc<AtomicUsize>,
}

impl Drop for SessionCore {
    fn drop(&mut self) {
        self.alive.fetch_sub(1, SeqCst);
    }
}

impl SessionCore {
    fn desc(&self, slot: usize) -> Desc<'_> {
        Desc(&self.page, slot)
    }

    fn is_dead(&self) -> bool {
        self.dead.load(SeqCst)
    }

    fn is_evicted(&self) -> bool {
        self.evicted.load(SeqCst)
    }

    fn holder_id(&self, slot: usize) -> u64 {
        self.id << 8 | slot as u64
    }

    /// Throw the client out: it broke the protocol (`why`).
    fn evict(&self, why: &str) {
        if self.evicted.swap(true, SeqCst) {
            return;
        }
        tracing::warn!(session = self.id, "evicting a file-service client: it {why}");
        self.tally.evictions.fetch_add(1, SeqCst);
        for b in self.bindings.lock().iter().flatten() {
            b.open.revoked.store(true, SeqCst);
        }
        let _ = rustix::io::write(&self.evicted_fd, &1u64.to_ne_bytes());
    }

    fn binding(&self, slot: u32) -> Result<(Arc<Opened>, Option<u64>), FsError> {
        if self.is_evicted() {
            return Err(FsError::Closed);
        }
        let b = self.bindings.lock();
        let b = b
            .get(slot as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| FsError::Invalid(format!("no descriptor {slot}")))?;
        Ok((b.open.clone(), b.base))
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.timeout
    }

    /// A userfaultfd operation on the client's memory failed. `ESRCH`: its
    /// address space is gone, so the process is exiting (a client killed
    /// during a window call), which is no misbehaviour: it is dead from
    /// now on, and what it reported written is written back. Anything
    /// else is the client's doing: it is evicted.
    fn uffd_failed(&self, e: &std::io::Error, why: &str) {
        if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) {
            self.dead.store(true, SeqCst);
        } else {
            self.evict(why);
        }
    }

    /// Run `f` on the binding `id` if it is still there (a slot and an
    /// address are reused once a file is let go of; its id never is).
    fn with_binding<R>(&self, id: u64, f: impl FnOnce(&mut Binding) -> R) -> Option<R> {
        self.bindings
            .lock()
            .iter_mut()
            .flatten()
            .find(|b| b.id == id)
            .map(f)
    }

    /// Resolve the fault at `addr`: fill the range around it and map it.
    fn page_in(&self, addr: u64) -> Result<(), &'static str> {
        let found = self.bindings.lock().iter().flatten().find_map(|b| {
            let base = b.base?;
            (base..base + SPAN)
                .contains(&addr)
                .then(|| (b.open.clone(), base, b.id))
        });
        let (open, base, id) = found.ok_or("faulted outside every mapping it declared")?;
        let at = (addr - base) & !(FAULT_WINDOW - 1);
        let epoch = open.node.epoch.load(SeqCst);
        open.node
            .fill(&open.fd, at, FAULT_WINDOW)
            .map_err(|_| "faulted where no window can be")?;
        // Noted before the faulting thread is woken: once it runs on, the
        // client may let the file go and map another one at the same
        // address and slot, which must not inherit this note. (A chunk
        // noted but not mapped only costs a fault later.)
        self.with_binding(id, |b| {
            b.mapped.current(epoch).insert(at / CHUNK);
            b.ahead.fault(at / CHUNK, self.map_ahead);
        });
        // Counted before the faulting thread runs on (it may read the
        // counters at once).
        self.tally.faults.fetch_add(1, SeqCst);
        if let Err(e) = uffd::resolve(&self.uffd, base + at, FAULT_WINDOW) {
            self.uffd_failed(&e, "unmapped a window it declared");
            return Ok(());
        }
        if let Some(d) = pager_delay() {
            std::thread::sleep(d);
        }
        Ok(())
    }

    /// Whether the pager has chunks to map ahead of some binding.
    fn ahead_due(&self) -> bool {
        self.map_ahead > 0
            && self
                .bindings
                .lock()
                .iter()
                .flatten()
                .any(|b| b.ahead.budget > 0 && b.base.is_some())
    }

    /// Map one chunk ahead of the client's faults: of the first binding
    /// with a budget, the next chunk within the host file that the client
    /// has not mapped, filled first. A failure only ends the binding's
    /// mapping ahead (the client may have let the file go or cut it
    /// short meanwhile; its own faults say what it does wrong).
    fn map_ahead_once(&self) {
        let Some((id, open)) = self
            .bindings
            .lock()
            .iter()
            .flatten()
            .find(|b| b.ahead.budget > 0 && b.base.is_some())
            .map(|b| (b.id, b.open.clone()))
        else {
            return;
        };
        let stop = |core: &SessionCore| {
            core.with_binding(id, |b| b.ahead.budget = 0);
        };
        // (A file mapped through the host gets no more windows: nor
        // chunks ahead.)
        if open.node.host_mapped.load(SeqCst) {
            return stop(self);
        }
        let Ok(st) = rustix::fs::fstat(&open.fd) else {
            return stop(self);
        };
        let end = (st.st_size.max(0) as u64).div_ceil(CHUNK);
        let epoch = open.node.epoch.load(SeqCst);
        let picked = self.with_binding(id, |b| {
            let Binding {
                mapped, ahead, base, ..
            } = b;
            ahead.pick(mapped.current(epoch), end).zip(*base)
        });
        let Some((chunk, base)) = picked.flatten() else {
            return;
        };
        let at = chunk * CHUNK;
        // The client may let the file go meanwhile and map another at the
        // same address: `CONTINUE` maps only what that mapping's own memfd
        // holds there (its own bytes), or fails, and the note below goes
        // to this binding only.
        match open.node.fill_then(&open.fd, at, CHUNK, || {
            uffd::resolve(&self.uffd, base + at, CHUNK)
        }) {
            Ok(Ok(())) => {
                self.with_binding(id, |b| b.mapped.current(epoch).insert(chunk));
                self.tally.mapped_ahead.fetch_add(1, SeqCst);
            }
            Ok(Err(e)) if e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) => {
                self.dead.store(true, SeqCst);
            }
            _ => stop(self),
        }
    }

    /// The client is gone: give back every token it held (writing back
    /// what it reported dirty) and let the pager end.
    fn close(&self) {
        self.dead.store(true, SeqCst);
        let bindings: Vec<Binding> = self.bindings.lock().iter_mut().filter_map(Option::take).collect();
        for (slot, b) in bindings.iter().enumerate() {
            let _ = slot;
            release(&b.open.node, self, None);
        }
    }
}

/// The holder of a file's token: descriptor `slot` of `session`, standing
/// for the open file `open` (its offset travels in the token).
struct Holder {
    session: Arc<SessionCore>,
    slot: usize,
    open: Arc<Opened>,
}

impl TokenHolder for Holder {
    fn session_id(&self) -> u64 {
        self.session.id
    }
    fn desc(&self) -> Desc<'_> {
        self.session.desc(self.slot)
    }
    fn is_dead(&self) -> bool {
        self.session.is_dead()
    }
    fn is_evicted(&self) -> bool {
        self.session.is_evicted()
    }
    fn evict(&self, why: &str) {
        self.session.evict(why)
    }
    fn tally(&self) -> &Tally {
        &self.session.tally
    }
    fn set_offset(&self, offset: u64) {
        *self.open.offset.lock() = offset;
    }
    fn write_back_fd(&self) -> Option<Result<&OwnedFd, FsError>> {
        self.open.writable.then(|| self.open.positional_fd())
    }
}

/// If `session` holds `node`'s token (through `slot`, or any slot), take
/// it back.
fn release(node: &Node, session: &SessionCore, slot: Option<usize>) {
    let id = node.holder_id.load(SeqCst);
    let mine = match slot {
        Some(s) => id == session.holder_id(s),
        None => id >> 8 == session.id,
    };
    if mine {
        let mut st = node.token.lock();
        if st.holder.as_ref().is_some_and(|h| h.session_id() == session.id) {
            node.recall(&mut st, session.deadline());
        }
    }
}

/// The session's door implementation.
struct SessionImpl {
    core: Arc<SessionCore>,
    /// The export's open files, which the session maps.
    opens: Arc<Opens>,
}

/// What a session takes of its export: its open files (to map them), its
/// counters, the count of live sessions and their bound, and how long a
/// client may keep its share lock or an active token.
pub(crate) struct Sessions {
    pub opens: Arc<Opens>,
    pub tally: Arc<Tally>,
    pub alive: Arc<AtomicUsize>,
    pub max: usize,
    pub timeout: Duration,
    /// Chunks of a file the pager maps into a client ahead of its faults,
    /// per chunk it faulted on (0: none).
    pub map_ahead: u64,
}

/// What kind of anonymous-inode descriptor `fd` is (`[userfaultfd]`,
/// `[eventfd]`), as the kernel names it.
fn anon_kind(fd: &OwnedFd) -> Option<String> {
    let link = String::from_utf8(crate::service::host::link_of(fd).ok()?).ok()?;
    link.strip_prefix("anon_inode:").map(str::to_string)
}

/// Start a session: map its page, start its pager.
pub(crate) fn start(
    export: Sessions,
    uffd: OwnedFd,
    evicted_fd: OwnedFd,
) -> Result<(lintel::Door, OwnedFd), FsError> {
    // A pager thread polls the one and writes the other: anything else (a
    // file that is always readable, a pipe that fills) would spin or block it.
    if anon_kind(&uffd).as_deref() != Some("[userfaultfd]") {
        return Err(FsError::Invalid(
            "the session's pager descriptor is not a userfaultfd".into(),
        ));
    }
    if anon_kind(&evicted_fd).as_deref() != Some("[eventfd]") {
        return Err(FsError::Invalid(
            "the session's eviction descriptor is not an eventfd".into(),
        ));
    }
    let page_fd = rustix::fs::memfd_create(
        "lintel-fs-session",
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )?;
    rustix::fs::ftruncate(&page_fd, PAGE_LEN as u64)?;
    use rustix::fs::SealFlags;
    rustix::fs::fcntl_add_seals(&page_fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
    let page = Mapping::map_shared(&page_fd, PAGE_LEN, true)?;
    // Never block on the client's eventfd (it might have passed a pipe).
    let flags = rustix::fs::fcntl_getfl(&evicted_fd)?;
    rustix::fs::fcntl_setfl(&evicted_fd, flags | rustix::fs::OFlags::NONBLOCK)?;
    if export.alive.fetch_add(1, SeqCst) >= export.max {
        export.alive.fetch_sub(1, SeqCst);
        return Err(FsError::Invalid(
            "the service has all the sessions it takes".into(),
        ));
    }
    // The count is the session's from here: dropping it gives it back.
    let core = Arc::new(SessionCore {
        id: NEXT_ID.fetch_add(1, SeqCst),
        page,
        uffd,
        evicted_fd,
        bindings: Mutex::new((0..SLOTS).map(|_| None).collect()),
        dead: AtomicBool::new(false),
        evicted: AtomicBool::new(false),
        timeout: export.timeout,
        map_ahead: export.map_ahead,
        tally: export.tally,
        alive: export.alive,
    });
    let pager = Arc::downgrade(&core);
    std::thread::Builder::new()
        .name(format!("lintel-fs-pager-{}", core.id))
        .spawn(move || pager_loop(pager))
        .map_err(|e| FsError::Invalid(format!("cannot start a pager: {e}")))?;
    let on_unref = Arc::downgrade(&core);
    let door = lintel::Door::create_with_unref(
        core.id,
        SessionServer::new(SessionImpl {
            core,
            opens: export.opens,
        }),
        move |_| {
            if let Some(core) = on_unref.upgrade() {
                core.close();
            }
        },
    );
    Ok((door, page_fd))
}

fn pager_loop(core: Weak<SessionCore>) {
    loop {
        let Some(c) = core.upgrade() else { return };
        if c.is_dead() || c.is_evicted() {
            return;
        }
        // Faults first; while none waits, map ahead of them.
        let ahead = c.ahead_due();
        let wait = if ahead {
            Duration::ZERO
        } else {
            Duration::from_millis(200)
        };
        match uffd::next_fault(&c.uffd, wait) {
            Ok(Some(addr)) => {
                if let Err(why) = c.page_in(addr) {
                    c.evict(why);
                }
            }
            Ok(None) if ahead => c.map_ahead_once(),
            Ok(None) => {}
            Err(e) => {
                c.uffd_failed(&e, "passed a descriptor that is not a working userfaultfd");
                return;
            }
        }
    }
}

impl Session for SessionImpl {
    fn attach(&self, file: lintel::Door) -> Result<Attached, FsError> {
        if self.core.is_evicted() {
            return Err(FsError::Closed);
        }
        let id = file
            .with_local(|_: &OpenFileServer, datum| datum)
            .and_then(Result::ok)
            .ok_or_else(|| FsError::Invalid("not an open file of this export".into()))?;
        let open = self.opens.get(id).ok_or(FsError::Closed)?;
        if !open.readable || !open.regular {
            return Err(FsError::Invalid(
                "only regular files opened for reading map".into(),
            ));
        }
        // A write to a set-user-ID or set-group-ID file must clear the
        // bits as it lands, as Linux does (the kernel does it when the
        // service writes as the caller): such a file is written through
        // calls, never a window.
        let set_id = libc::S_ISUID | libc::S_ISGID;
        if open.writable && rustix::fs::fstat(&open.fd)?.st_mode & set_id != 0 {
            return Err(FsError::Invalid(
                "a set-user-ID or set-group-ID file is written through calls".into(),
            ));
        }
        let cache = open.node.cache_fd()?;
        // The host file: a writer writes back through it should we die
        // (its keeper); a reader reads through it while it holds the token
        // with nothing dirty. Either way it gives the client nothing it
        // could not do through calls with its own credentials, but for a
        // read-only export, whose files its owner could change through a
        // descriptor (`fchmod`): none there.
        // (A writer's positional descriptor is a second open of the file
        // when it appends: a lock through it would not be this open's.)
        let (cache, host, locks) = if open.writable {
            let positional = open.positional_fd()?;
            let own = std::ptr::eq(positional, &open.fd);
            (cache, Some(positional.try_clone()?), own)
        } else if open.export_read_only {
            (node::read_only(&cache)?, None, false)
        } else {
            (node::read_only(&cache)?, Some(open.fd.try_clone()?), true)
        };
        let mut bindings = self.core.bindings.lock();
        let slot = bindings
            .iter()
            .position(Option::is_none)
            .ok_or_else(|| FsError::Invalid("every descriptor of the session is in use".into()))?;
        let writable = open.writable;
        static NEXT_BINDING: AtomicU64 = AtomicU64::new(1);
        bindings[slot] = Some(Binding {
            id: NEXT_BINDING.fetch_add(1, SeqCst),
            open,
            base: None,
            mapped: Mapped::default(),
            ahead: Ahead::default(),
        });
        Ok((slot as u32, cache, host, locks, SPAN, writable))
    }

    fn mapped(&self, slot: u32, base: u64) -> Result<(), FsError> {
        if !base.is_multiple_of(4096) || base.checked_add(SPAN).is_none() {
            return Err(FsError::Invalid(format!("mapping base {base:#x}")));
        }
        let mut bindings = self.core.bindings.lock();
        let b = bindings
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .ok_or_else(|| FsError::Invalid(format!("no descriptor {slot}")))?;
        b.base = Some(base);
        Ok(())
    }

    fn acquire(&self, slot: u32) -> Result<(), FsError> {
        let (open, _) = self.core.binding(slot)?;
        let node = &open.node;
        let me = self.core.holder_id(slot as usize);
        let mut st = node.token.lock();
        if node.holder_id.load(SeqCst) == me {
            return Ok(());
        }
        if node.host_mapped.load(SeqCst) {
            return Err(FsError::Invalid(
                "the file is mapped through the host: no windows".into(),
            ));
        }
        node.recall(&mut st, self.core.deadline());
        let stat = stat_of(&open.fd)?;
        let offset = *open.offset.lock();
        let desc = self.core.desc(slot as usize);
        // `O_APPEND` travels with the token: `fcntl(F_SETFL)` takes every
        // token back before it changes the flag.
        token::set_flags(&desc, if open.appends() { token::FLAG_APPEND } else { 0 });
        if let Err(why) = token::grant(
            &desc,
            offset,
            stat.size,
            &token::stat_to_words(&stat),
            self.core.deadline(),
        ) {
            self.core.evict(why.0);
            return Err(FsError::Closed);
        }
        self.core.tally.grants.fetch_add(1, SeqCst);
        st.holder = Some(Box::new(Holder {
            session: self.core.clone(),
            slot: slot as usize,
            open: open.clone(),
        }));
        node.holder_id.store(me, SeqCst);
        Ok(())
    }

    fn window(&self, slot: u32, at: u64, len: u64) -> Result<(u64, u64), FsError> {
        let (open, base) = self.core.binding(slot)?;
        let base = base.ok_or_else(|| FsError::Invalid("the cache is not mapped yet".into()))?;
        if open.node.holder_id.load(SeqCst) != self.core.holder_id(slot as usize) {
            return Err(FsError::Invalid("the token is not held".into()));
        }
        if !len.is_power_of_two() || !(MIN_WINDOW..=MAX_WINDOW).contains(&len) {
            return Err(FsError::Invalid(format!("window length {len}")));
        }
        let off = at & !(len - 1);
        if off + len > SPAN {
            return Err(FsError::Invalid("a window beyond the mapped span".into()));
        }
        // Map what the client does not have mapped yet, a run of chunks
        // at a time (a window it had before costs no fill, no ioctl).
        let epoch = open.node.epoch.load(SeqCst);
        let chunks: Vec<u64> = (off / CHUNK..(off + len).div_ceil(CHUNK)).collect();
        let (missing, id): (Vec<u64>, u64) = {
            let mut b = self.core.bindings.lock();
            match b[slot as usize].as_mut() {
                Some(b) => {
                    let done = b.mapped.current(epoch);
                    (chunks.into_iter().filter(|c| !done.contains(c)).collect(), b.id)
                }
                None => return Err(FsError::Closed),
            }
        };
        // The cache must reach past the window whatever the notes say: a
        // mapping is read past its file's end with SIGBUS, not a fault the
        // pager sees.
        open.node.grow(off + len)?;
        for run in missing.chunk_by(|a, b| a + 1 == *b) {
            let (from, to) = (run[0] * CHUNK, (run[run.len() - 1] + 1) * CHUNK);
            open.node.fill(&open.fd, from, to - from)?;
            if let Err(e) = uffd::resolve(&self.core.uffd, base + from, to - from) {
                self.core.uffd_failed(&e, "unmapped the cache it declared");
                return Err(FsError::Closed);
            }
        }
        if let Some(b) = self.core.bindings.lock()[slot as usize].as_mut()
            && b.id == id
        {
            b.mapped.current(epoch).extend(missing);
        }
        token::set_window(&self.core.desc(slot as usize), off, len);
        self.core.tally.windows.fetch_add(1, SeqCst);
        Ok((off, len))
    }

    fn extent(&self, slot: u32, end: u64) -> Result<u64, FsError> {
        let (open, _) = self.core.binding(slot)?;
        if open.node.host_mapped.load(SeqCst) {
            return Err(FsError::Invalid(
                "the file is mapped through the host: no views".into(),
            ));
        }
        open.node.grow(end)
    }

    fn read_ahead(&self, slot: u32, pipe: u32, at: u64, len: u32, next: u32) -> Result<u32, FsError> {
        let (open, _) = self.core.binding(slot)?;
        // Held active by the caller, the token cannot be taken back while
        // the bytes are spliced: no write lands in between.
        let holder = self.core.holder_id(slot as usize);
        if open.node.holder_id.load(SeqCst) != holder {
            return Err(FsError::Invalid("the token is not held".into()));
        }
        open.read_ahead(pipe, at, len, next, holder).map(|n| n as u32)
    }

    fn detach(&self, slot: u32) -> Result<(), FsError> {
        let (open, _) = self.core.binding(slot)?;
        // The client's window writes land now, made as the client.
        let _as = open.creds.adopt(As::Effective)?;
        release(&open.node, &self.core, Some(slot as usize));
        self.core.bindings.lock()[slot as usize] = None;
        self.core.tally.detached.fetch_add(1, SeqCst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Ahead;
    use std::collections::BTreeSet;

    /// Mapping ahead goes on from the chunk after the fault, skips what
    /// the client has mapped, wraps to the file's start once, and ends
    /// (its budget spent) when every chunk is mapped.
    #[test]
    fn mapping_ahead_goes_on_from_the_fault_and_wraps_once() {
        let mut a = Ahead::default();
        let mut mapped: BTreeSet<u64> = [5, 6, 7].into();
        a.fault(5, 8);
        assert_eq!(a.budget, 8);
        assert_eq!(a.pick(&mapped, 10), Some(8), "after the mapped run");
        mapped.insert(8);
        a.next = 9;
        assert_eq!(a.pick(&mapped, 10), Some(9));
        mapped.insert(9);
        a.next = 10;
        assert_eq!(a.pick(&mapped, 10), Some(0), "past the end: the start");
        mapped.extend(0..5);
        a.next = 5;
        assert_eq!(a.pick(&mapped, 10), None, "all mapped");
        assert_eq!(a.budget, 0, "nothing left to do");
        // A fault gives a new budget and a new start; the file grew.
        a.fault(9, 2);
        assert_eq!((a.budget, a.pick(&mapped, 12)), (2, Some(10)));
    }

    #[test]
    fn an_empty_file_has_nothing_to_map_ahead() {
        let mut a = Ahead::default();
        a.fault(0, 8);
        assert_eq!(a.pick(&BTreeSet::from([0]), 0), None);
        assert_eq!(a.budget, 0);
    }
}
