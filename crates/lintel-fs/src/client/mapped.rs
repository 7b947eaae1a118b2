//! The client's half of mapped windows: a session per export and process,
//! and per open file a mapping of the file's cache with its descriptor.
//!
//! An operation on a mapped file takes the token `PASSIVE → ACTIVE` in the
//! shared page (no call), copies between the caller's buffer and the
//! window with `memcpy`, stores the new offset, size and dirty range, and
//! leaves the token `PASSIVE` (or gives it back, if the service asked). A
//! call is made only to get the token when the service took it
//! ([`Session::acquire`]) and to move the window ([`Session::window`]),
//! which maps the window's pages before it returns, so the copy itself
//! does not fault.
//!
//! If the service dies or evicts this process, a watcher thread marks the
//! session gone, then takes the mappings off the userfaultfd, which wakes
//! any thread blocked on a fault there (the kernel then maps a page of
//! zeros where the service had not filled one). Every operation checks
//! the session after its copy too, so one that raced the death fails with
//! `EIO` (service gone) or `EBADF` (evicted) and never returns those
//! zeros as data.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicU32, AtomicU64};

use lintel::CallError;
use lintel::stub::StubError;
use parking_lot::Mutex;

use crate::client::direct;
use crate::client::keeper::Keeper;
use crate::client::read_ahead::ReadAhead;
use crate::client::spliced::{self, Ahead, Pipe, Pipes};
use crate::proto::token::{self, Begin, Desc, Held, PAGE_LEN};
use crate::proto::{
    Export, ExportClient, FsError, MAX_IO, MAX_WINDOW, MIN_WINDOW, OpenFileClient, Session, SessionClient,
    Stat, Whence,
};
use crate::uffd;
use lintel_sys::Mapping;

/// The window a file asks for: 64 KiB unless [`set_window_size`] or
/// `LINTEL_FS_WINDOW` (bytes) says otherwise.
pub const DEFAULT_WINDOW: u64 = 64 * 1024;

static WINDOW: AtomicU64 = AtomicU64::new(0);

/// Set the window size files opened from now on ask for: a power of two
/// from 4 KiB to 64 MiB (others are rounded into that range).
pub fn set_window_size(bytes: u64) {
    WINDOW.store(clamp_window(bytes), SeqCst);
}

/// The window size in force.
pub fn window_size() -> u64 {
    match WINDOW.load(SeqCst) {
        0 => {
            let w = std::env::var("LINTEL_FS_WINDOW")
                .ok()
                .and_then(|v| v.parse().ok())
                .map_or(DEFAULT_WINDOW, clamp_window);
            WINDOW.store(w, SeqCst);
            w
        }
        w => w,
    }
}

fn clamp_window(bytes: u64) -> u64 {
    bytes
        .clamp(MIN_WINDOW, MAX_WINDOW)
        .next_power_of_two()
        .min(MAX_WINDOW)
}

const GONE_DIED: u32 = 1;
const GONE_EVICTED: u32 = 2;

/// This process's session with one export.
pub(crate) struct MappedSession {
    session: SessionClient,
    page: Arc<Mapping>,
    uffd: OwnedFd,
    /// 0 while the service serves us; why not, after.
    gone: Arc<AtomicU32>,
    /// Every cache mapping of ours (address, length), for the watcher.
    maps: Arc<Mutex<Vec<MapEntry>>>,
    stop: OwnedFd,
}

/// One cache mapping of ours, as the watcher needs it: where it is, and
/// for a file we may write, what writes it back should the service die.
struct MapEntry {
    addr: u64,
    len: usize,
    keeper: Option<Arc<Keeper>>,
}

/// Where a file's window finds its session when it first attaches: the
/// process's session with the export, made then if there is none yet. An
/// open does not make one: a program that only opens, looks and closes
/// (directories, `stat` through an open, a shell's redirections it never
/// reads) starts no pager thread and maps no shared page.
#[derive(Clone)]
pub(crate) struct SessionSource {
    pub(crate) cell: Arc<Mutex<Option<Arc<MappedSession>>>>,
    pub(crate) export: ExportClient,
}

impl SessionSource {
    /// The session, made now if there is none ([`MappedSession::get`]).
    pub(crate) fn get(&self) -> Option<Arc<MappedSession>> {
        MappedSession::get(&self.cell, &self.export)
    }
}

impl MappedSession {
    /// The session with `export` kept in `cell`, or a new one if there is
    /// none yet or the last one ended (its service died or evicted it);
    /// `None` if none can be had now (no userfaultfd here, the service has
    /// no room): files then take the copy path, and a later open asks again.
    pub(crate) fn get(
        cell: &Mutex<Option<Arc<MappedSession>>>,
        export: &ExportClient,
    ) -> Option<Arc<MappedSession>> {
        let mut c = cell.lock();
        if let Some(s) = c.as_ref().filter(|s| s.check().is_ok()) {
            return Some(s.clone());
        }
        match MappedSession::start(export) {
            Ok(s) => {
                let s = Arc::new(s);
                *c = Some(s.clone());
                Some(s)
            }
            Err(e) => {
                tracing::debug!("mapped windows unavailable, using the copy path: {e}");
                None
            }
        }
    }

    fn start(export: &ExportClient) -> Result<MappedSession, FsError> {
        use rustix::event::{EventfdFlags, eventfd};
        let uffd = uffd::create()?;
        let high = lintel::above_descriptor_floor;
        let evicted = high(eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?);
        let stop = high(eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?);
        let (session, page_fd) = export.session(high(uffd.try_clone()?), high(evicted.try_clone()?))?;
        let page = Arc::new(Mapping::map_shared(&page_fd, PAGE_LEN, true)?);
        let door = export.door();
        let pidfd = if door.is_local() {
            None
        } else {
            let pid = rustix::process::Pid::from_raw(door.server_pid() as i32)
                .ok_or_else(|| FsError::Invalid("the service has no pid".into()))?;
            Some(high(rustix::process::pidfd_open(
                pid,
                rustix::process::PidfdFlags::empty(),
            )?))
        };
        let gone = Arc::new(AtomicU32::new(0));
        let maps = Arc::new(Mutex::new(Vec::new()));
        let watcher = Watcher {
            pidfd,
            evicted,
            stop: high(stop.try_clone()?),
            uffd: high(uffd.try_clone()?),
            gone: gone.clone(),
            maps: maps.clone(),
            page: page.clone(),
        };
        std::thread::Builder::new()
            .name("lintel-fs-watch".into())
            .spawn(move || watcher.run())
            .map_err(|e| FsError::Invalid(format!("cannot start the watcher: {e}")))?;
        Ok(MappedSession {
            session,
            page,
            uffd,
            gone,
            maps,
            stop,
        })
    }

    fn check(&self) -> Result<(), FsError> {
        match self.gone.load(SeqCst) {
            0 => Ok(()),
            GONE_EVICTED => Err(FsError::Closed),
            _ => Err(FsError::Stub(StubError::Call(CallError::PeerDied))),
        }
    }
}

impl Drop for MappedSession {
    fn drop(&mut self) {
        let _ = rustix::io::write(&self.stop, &1u64.to_ne_bytes());
    }
}

/// Waits for the service to die or evict us, then frees the faults.
struct Watcher {
    pidfd: Option<OwnedFd>,
    evicted: OwnedFd,
    stop: OwnedFd,
    uffd: OwnedFd,
    gone: Arc<AtomicU32>,
    maps: Arc<Mutex<Vec<MapEntry>>>,
    page: Arc<Mapping>,
}

impl Watcher {
    fn run(self) {
        use rustix::event::{PollFd, PollFlags, poll};
        let why = loop {
            let mut fds = vec![
                PollFd::new(&self.stop, PollFlags::IN),
                PollFd::new(&self.evicted, PollFlags::IN),
            ];
            if let Some(p) = &self.pidfd {
                fds.push(PollFd::new(p, PollFlags::IN));
            }
            match poll(&mut fds, None) {
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return,
                Ok(_) => {}
            }
            if !fds[0].revents().is_empty() {
                return;
            }
            if !fds[1].revents().is_empty() {
                break GONE_EVICTED;
            }
            if fds.get(2).is_some_and(|p| !p.revents().is_empty()) {
                break GONE_DIED;
            }
        };
        let maps = self.maps.lock();
        self.gone.store(why, SeqCst);
        for m in maps.iter() {
            let _ = uffd::unregister(&self.uffd, m.addr, m.len as u64);
            let _ = uffd::wake(&self.uffd, m.addr, m.len as u64);
        }
        // What we wrote through windows and the service had not written
        // out yet goes to the host now (an evicted client's writes are
        // not believed, by the service or by us).
        if why == GONE_DIED {
            for k in maps.iter().filter_map(|m| m.keeper.as_ref()) {
                if let Err(e) = k.write_back(&Desc(&self.page, k.slot)) {
                    tracing::warn!("cannot write a file back after its service died: {e}");
                }
            }
        }
    }
}

/// One open file mapped by this process.
pub(crate) struct Mapped {
    session: Arc<MappedSession>,
    slot: u32,
    map: Mapping,
    writable: bool,
    window: u64,
    /// One operation at a time per file in this process, and what
    /// [`Mapped::read_host`] read ahead.
    local: Mutex<ReadAhead>,
    /// Bytes of the cache known to exist (so a read there faults into the
    /// pager, never past the memfd's end).
    covered: AtomicU64,
    /// Token grants this descriptor asked for: a new one means the token
    /// was taken back since, and what was read ahead may be stale.
    grants: AtomicU64,
    /// The service grants no token for this file any more (it is mapped
    /// through the host): every operation takes the copy path.
    refused: std::sync::atomic::AtomicBool,
    /// Odd while a thread of ours works under the token (between taking
    /// `local` and letting it go): a lock-free read (`read_passive`) that
    /// saw the same even value before and after raced none of them.
    epoch: AtomicU64,
    /// The host file, read directly by a long read while the
    /// token is here and nothing is dirty ([`Mapped::read_host`]); none
    /// from a read-only export.
    host: Option<OwnedFd>,
    /// `host` is the open's own open file description: its byte-range
    /// and `flock` locks are the open's, taken without a call.
    locks: bool,
    /// For a file we may write: what writes back what we wrote through
    /// the window, should the service die, or to sync without a call.
    keeper: Option<Arc<Keeper>>,
}

/// `Mapped::epoch` odd for as long as it lives (its holder holds `local`,
/// so it is the only writer).
/// Why [`Mapped::refill`] put nothing in the pipe.
enum Refused {
    /// No pipe could be attached.
    NoPipe,
    /// The service would not use the pipe, or said too much: drop the pipes.
    Spoiled,
    /// The call failed.
    Failed(FsError),
}

struct Epoch<'a>(&'a AtomicU64);

impl<'a> Epoch<'a> {
    fn begin(epoch: &'a AtomicU64) -> Epoch<'a> {
        epoch.store(epoch.load(Relaxed) + 1, Relaxed);
        // What we do under the token comes after the odd value.
        std::sync::atomic::fence(Release);
        Epoch(epoch)
    }
}

impl Drop for Epoch<'_> {
    fn drop(&mut self) {
        self.0.store(self.0.load(Relaxed) + 1, Release);
    }
}

/// How often an operation asks for the token before it takes the copy
/// path instead (other processes keep taking it).
const ACQUIRE_TRIES: usize = 8;

impl Mapped {
    /// Map `file` (a regular file opened for reading) through `session`.
    pub(crate) fn attach(session: &Arc<MappedSession>, file: &OpenFileClient) -> Result<Mapped, FsError> {
        session.check()?;
        let (slot, cache, host, locks, span, writable) = session.session.attach(file.door().clone())?;
        // (Without a copy, out of descriptors, long reads take the pipes;
        // so they do where the descriptor does not read: an appending
        // writer's is a second open of the file for writing only.)
        let reads = host
            .as_ref()
            .filter(|h| {
                rustix::fs::fcntl_getfl(h)
                    .is_ok_and(|f| f & rustix::fs::OFlags::ACCMODE != rustix::fs::OFlags::WRONLY)
            })
            .and_then(|h| h.try_clone().ok())
            .map(lintel::above_descriptor_floor);
        // A file we may write is one we must be able to write back
        // ourselves (see `keeper`); without that it takes the copy path.
        let keeper = || -> Result<Option<Arc<Keeper>>, FsError> {
            if !writable {
                return Ok(None);
            }
            let host =
                host.ok_or_else(|| FsError::Invalid("no host descriptor to write back through".into()))?;
            Ok(Some(Arc::new(Keeper {
                slot: slot as usize,
                host: lintel::above_descriptor_floor(host),
                cache: lintel::above_descriptor_floor(cache.try_clone()?),
            })))
        };
        let keeper = match keeper() {
            Ok(k) => k,
            Err(e) => {
                let _ = session.session.detach(slot);
                return Err(e);
            }
        };
        let map = if writable {
            Mapping::map_shared(&cache, span as usize, true)?
        } else {
            Mapping::map_private_read(&cache, span as usize)?
        };
        let mapped = Mapped {
            session: session.clone(),
            slot,
            map,
            writable,
            window: window_size(),
            local: Mutex::new(ReadAhead::default()),
            covered: AtomicU64::new(0),
            grants: AtomicU64::new(0),
            refused: std::sync::atomic::AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            locks,
            host: reads,
            keeper: keeper.clone(),
        };
        uffd::register(&session.uffd, mapped.map.addr(), span)?;
        session.session.mapped(slot, mapped.map.addr())?;
        session.maps.lock().push(MapEntry {
            addr: mapped.map.addr(),
            len: span as usize,
            keeper,
        });
        Ok(mapped)
    }

    /// The cache mapping's address in this process.
    pub(crate) fn cache_addr(&self) -> u64 {
        self.map.addr()
    }

    fn desc(&self) -> Desc<'_> {
        Desc(&self.session.page, self.slot as usize)
    }

    /// Run `f` with the token active; `None` if the token could not be had
    /// (take the copy path).
    fn with_token<R>(
        &self,
        f: impl FnOnce(&mut Active<'_>) -> Result<R, FsError>,
    ) -> Result<Option<R>, FsError> {
        self.with_token_or(true, f)
    }

    /// As [`Mapped::with_token`]; without `acquire`, `None` at once if the
    /// token is not here (nothing asked of the service).
    fn with_token_or<R>(
        &self,
        acquire: bool,
        f: impl FnOnce(&mut Active<'_>) -> Result<R, FsError>,
    ) -> Result<Option<R>, FsError> {
        let mut one = self.local.lock();
        if self.refused.load(SeqCst) {
            return Ok(None);
        }
        let _epoch = Epoch::begin(&self.epoch);
        for _ in 0..ACQUIRE_TRIES {
            self.session.check()?;
            match token::client_begin(&self.desc()) {
                Begin::Ready(held, window) => {
                    let mut a = Active {
                        m: self,
                        held,
                        window,
                        ahead: &mut one,
                    };
                    let r = f(&mut a);
                    token::client_end(&self.desc(), a.held);
                    // The service may have died while we copied: what we
                    // read may be the kernel's zeros, not the file.
                    self.session.check()?;
                    return r.map(Some);
                }
                Begin::Acquire if !acquire => return Ok(None),
                Begin::Acquire => {
                    self.grants.fetch_add(1, SeqCst);
                    match self.session.session.acquire(self.slot) {
                        Ok(()) => {}
                        Err(FsError::Invalid(why)) => {
                            tracing::debug!("no token for this file from now on: {why}");
                            self.refused.store(true, SeqCst);
                            return Ok(None);
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(None)
    }

    /// Run `f` as a short operation ([`token::client_short`]): inside the
    /// share lock, the token left `PASSIVE`, with neither the handle's
    /// local lock nor a call. For what only reads the cache where it is
    /// mapped and moves the offset (the reads and seeks of a program that
    /// `lseek`s and `read`s): nothing another thread of ours reads without
    /// the lock changes ([`Self::read_passive`] looks at the size and the
    /// state only). `None`: the token is not `PASSIVE` here, or `f`
    /// declined; take [`Self::with_token`].
    #[inline]
    fn short<R>(&self, f: impl FnOnce(&mut Held, (u64, u64)) -> Option<R>) -> Result<Option<R>, FsError> {
        if self.refused.load(Relaxed) {
            return Ok(None);
        }
        let r = token::client_short(&self.desc(), f);
        // As in `with_token`: a service that died may have left zeros.
        self.session.check()?;
        Ok(r)
    }

    /// Read at `at` (or the shared offset, moving it); `None`: use the
    /// copy path.
    pub(crate) fn read(&self, at: Option<u64>, buf: &mut [u8]) -> Result<Option<usize>, FsError> {
        if let Some(at) = at
            && let Some(n) = self.read_passive(at, buf)?
        {
            return Ok(Some(n));
        }
        // Within the window (mapped when it was moved there): a short
        // operation.
        let short = self.short(|h, (w_off, w_len)| {
            let off = at.unwrap_or(h.offset);
            let n = (buf.len() as u64).min(h.size.saturating_sub(off));
            if n > 0 && !(off >= w_off && off + n <= w_off + w_len && off + n <= self.map.len() as u64) {
                return None;
            }
            self.map.read(off as usize, &mut buf[..n as usize]);
            if at.is_none() {
                h.offset = off + n;
            }
            Some(n as usize)
        })?;
        if short.is_some() {
            return Ok(short);
        }
        Ok(self
            .with_token(|a| {
                let off = at.unwrap_or(a.held.offset);
                let n = (buf.len() as u64).min(a.held.size.saturating_sub(off));
                if off + n > self.map.len() as u64 {
                    return Ok(None);
                }
                // A positional read outside the window reads the cache in
                // place: the pager maps a range the first time it is
                // touched, and every later read there is a memcpy. (The
                // window, moved by a call, suits reading on from the
                // offset: one call maps the next 64 KiB before it is read.)
                let (w_off, w_len) = a.window;
                let in_window = w_len > 0 && off >= w_off && off + n <= w_off + w_len;
                if at.is_some() && !in_window && n > 0 {
                    if off + n > self.covered.load(SeqCst) {
                        let c = self.session.session.extent(self.slot, a.held.size.max(off + n))?;
                        self.covered.fetch_max(c, SeqCst);
                    }
                    self.map.read(off as usize, &mut buf[..n as usize]);
                    return Ok(Some(n as usize));
                }
                let mut done = 0;
                while done < n {
                    let avail = a.ensure(off + done)?;
                    let k = avail.min(n - done);
                    self.map.read(
                        (off + done) as usize,
                        &mut buf[done as usize..(done + k) as usize],
                    );
                    done += k;
                }
                if at.is_none() {
                    a.held.offset = off + n;
                }
                Ok(Some(n as usize))
            })?
            .flatten())
    }

    /// A positional read with no lock and no atomic read-modify-write: if
    /// the token is here and `PASSIVE`, nothing of ours works under it,
    /// and the bytes are in the part of the cache known to exist, copy
    /// them in place and check afterwards that none of that changed
    /// (`token::client_passive_size`). `None`: it did, or could not be
    /// tried; take the locked path.
    #[inline]
    fn read_passive(&self, at: u64, buf: &mut [u8]) -> Result<Option<usize>, FsError> {
        let e = self.epoch.load(Acquire);
        if !e.is_multiple_of(2) {
            return Ok(None);
        }
        let Some(size) = token::client_passive_size(&self.desc()) else {
            return Ok(None);
        };
        let n = (buf.len() as u64).min(size.saturating_sub(at));
        if n > 0 {
            if at + n > self.covered.load(Acquire).min(self.map.len() as u64) {
                return Ok(None);
            }
            self.map.read(at as usize, &mut buf[..n as usize]);
        }
        if !token::client_still_passive(&self.desc()) || self.epoch.load(Relaxed) != e {
            return Ok(None);
        }
        // As in `with_token`: a service that died may have left zeros.
        self.session.check()?;
        Ok(Some(n as usize))
    }

    /// Sync the file (`fdatasync` with `data_only`, else `fsync`) with no
    /// call, while the token is here: what this client wrote through the
    /// window is written back to the host file first, as the service's
    /// write-out does (the same function, [`keeper::write_back`]), and
    /// its marks cleared. While the token is here nobody else has writes
    /// of this file that are not on the host. The host file is synced
    /// after the operation ends: a slow disk keeps no token active.
    /// `false`: no token here or no host descriptor (a read-only export's
    /// file): the service syncs.
    ///
    /// [`keeper::write_back`]: crate::client::keeper::write_back
    pub(crate) fn sync(&self, data_only: bool) -> Result<bool, FsError> {
        let Some(host) = &self.host else {
            return Ok(false);
        };
        let here = self.with_token_or(false, |a| {
            if a.held.dirty.0 < a.held.dirty.1 {
                let Some(k) = &self.keeper else {
                    return Ok(false);
                };
                crate::client::keeper::write_back(&k.cache, &k.host, a.held, token::dirty_map(&self.desc()))?;
                token::client_clean(&self.desc());
                a.held.dirty = token::CLEAN;
            }
            Ok(true)
        })?;
        if here != Some(true) {
            return Ok(false);
        }
        if data_only {
            rustix::fs::fdatasync(host)?;
        } else {
            rustix::fs::fsync(host)?;
        }
        Ok(true)
    }

    /// Read at `at` (or at the shared offset, moving it) from the host file
    /// itself, while the token is here and nothing is dirty: the host file
    /// is then the file (a write anywhere else takes the token back first),
    /// and one `pread` moves its bytes as a native read does, with no call;
    /// a read that goes on from the last takes them from the handle's
    /// [`ReadAhead`], filled by one `pread` for several reads.
    /// `None`: no host descriptor (a read-only export), something dirty
    /// here, or no token: read another way. For long reads, which would
    /// otherwise make a call and a splice each, or drain a pipe.
    pub(crate) fn read_host(&self, at: Option<u64>, buf: &mut [u8]) -> Result<Option<usize>, FsError> {
        let Some(host) = &self.host else {
            return Ok(None);
        };
        Ok(self
            .with_token(|a| {
                if a.held.dirty.0 < a.held.dirty.1 {
                    return Ok(None);
                }
                let from = at.unwrap_or(a.held.offset);
                // At most what one call moves: the token stays active (a
                // recall waits) only as long as a call would take.
                let most = buf.len().min(crate::proto::MAX_IO as usize) as u64;
                let avail = a.held.size.saturating_sub(from);
                let n = most.min(avail) as usize;
                let grant = self.grants.load(SeqCst);
                let got = a.ahead.read(from, &mut buf[..n], avail, grant, |b, at| {
                    direct::read_at(host, b, at)
                })?;
                if at.is_none() {
                    a.held.offset = from + got as u64;
                }
                Ok(Some(got))
            })?
            .flatten())
    }

    /// Read at the shared offset through the handle's pipes, reading
    /// ahead: while this descriptor holds the token, nobody else writes the
    /// file or moves the offset, so the service splices a pipeful from the
    /// offset on ([`Session::read_ahead`]) and reads that follow take their
    /// bytes from the pipe with no call, one `read` of the pipe each, as a
    /// native `read` of the file. Each such call also names the second
    /// pipe, which the service fills with the next pipeful after its reply
    /// while this one is drained: a long sequential read waits for a splice
    /// only at its start. What a pipe holds is used only at the offset it
    /// was read for and under the grant it was read under; anything else,
    /// and any write through the window (the host file then lags the
    /// cache), sends the read elsewhere. `None`: read another way. For a
    /// window with no host descriptor (a read-only export's): where there
    /// is one, [`Mapped::read_host`] is faster, one `pread` where this is a
    /// `read` of the pipe and a call per pipeful.
    pub(crate) fn read_streamed(
        &self,
        pipes: &mut Pipes,
        file: &OpenFileClient,
        buf: &mut [u8],
    ) -> Result<Option<usize>, FsError> {
        let r = self.with_token(|a| {
            if a.held.dirty.0 < a.held.dirty.1 {
                return Ok(None);
            }
            let grant = self.grants.load(SeqCst);
            let off = a.held.offset;
            let n = (buf.len() as u64).min(a.held.size.saturating_sub(off)) as usize;
            // `spoiled`: a pipe's contents are no longer known; drop both.
            let (mut done, mut spoiled) = (0, false);
            while done < n {
                let at = off + done as u64;
                let here = |h: &Ahead| h.len > 0 && h.start == at && h.grant == grant;
                if !matches!(&pipes.now, Pipe::Attached { ahead: Some(h), .. } if here(h)) {
                    match self.refill(pipes, file, at, grant) {
                        Ok(true) => {}
                        Ok(false) => break,
                        Err(Refused::Spoiled) => {
                            spoiled = true;
                            break;
                        }
                        Err(Refused::NoPipe) if done == 0 => return Ok(None),
                        Err(Refused::NoPipe) => break,
                        Err(Refused::Failed(e)) if done == 0 => return Err(e),
                        // A late splice may still land in a pipe.
                        Err(Refused::Failed(_)) => {
                            spoiled = true;
                            break;
                        }
                    }
                }
                let Pipe::Attached {
                    read, ahead: Some(h), ..
                } = &mut pipes.now
                else {
                    spoiled = true;
                    break;
                };
                let k = (n - done).min(h.len);
                if let Err(e) = spliced::drain(read, &mut buf[done..done + k]) {
                    if done == 0 {
                        return Err(e);
                    }
                    spoiled = true;
                    break;
                }
                h.start += k as u64;
                h.len -= k;
                done += k;
            }
            a.held.offset = off + done as u64;
            Ok(Some((done, spoiled)))
        });
        match r {
            Ok(Some(Some((done, spoiled)))) => {
                if spoiled {
                    pipes.drop_all();
                }
                // Nothing read and the pipe spoiled: the caller reads
                // another way.
                Ok((done > 0 || !spoiled).then_some(done))
            }
            // Not read here: the pipes stay (a read through one drops what it
            // holds ahead, if anything).
            Ok(_) => Ok(None),
            Err(e) => {
                pipes.drop_all();
                Err(e)
            }
        }
    }

    /// Put the file's bytes from `at` in `pipes.now` (under token grant
    /// `grant`, held active): the pipeful the service filled in `then`
    /// if that was asked for `at` (the pipes swap), else one spliced now;
    /// and name the other pipe for the service to fill next. `false`: the
    /// file ends at `at`.
    fn refill(&self, pipes: &mut Pipes, file: &OpenFileClient, at: u64, grant: u64) -> Result<bool, Refused> {
        let asked = pipes.asked.take();
        if asked == Some((at, grant)) {
            std::mem::swap(&mut pipes.now, &mut pipes.then);
            if !pipes.then.is_empty_attached() {
                // Bytes left for another offset: of no use.
                pipes.then = Pipe::Unattached;
            }
        } else if asked.is_some() || !pipes.then.is_empty_attached() {
            // Filled, or being filled, for another offset or grant (its
            // `ahead` does not say so: only `asked` does).
            pipes.then = Pipe::Unattached;
        }
        let next = pipes
            .then
            .ready(file, false)
            .map_or(0, |(_, number, _, _)| number);
        let Some((_, number, per_call, ahead)) = pipes.now.ready(file, false) else {
            return Err(Refused::NoPipe);
        };
        match self
            .session
            .session
            .read_ahead(self.slot, number, at, per_call as u32, next)
        {
            Ok(0) => Ok(false),
            Ok(k) if k as usize <= per_call => {
                *ahead = Some(Ahead {
                    start: at,
                    len: k as usize,
                    grant,
                });
                // The service fills `then` only after a full pipeful.
                if next != 0 && k as usize == per_call.min(MAX_IO as usize) {
                    pipes.asked = Some((at + k as u64, grant));
                }
                Ok(true)
            }
            // More than asked for, or a pipe the service will not use: read
            // the rest another way.
            Ok(_) | Err(FsError::Invalid(_)) => Err(Refused::Spoiled),
            Err(e) => Err(Refused::Failed(e)),
        }
    }

    /// Write at `at` (or the shared offset, moving it; at the end if the
    /// open file appends, as its grant says); `None`: use the copy path.
    pub(crate) fn write(&self, at: Option<u64>, data: &[u8]) -> Result<Option<usize>, FsError> {
        if !self.writable {
            return Ok(None);
        }
        Ok(self
            .with_token(|a| {
                let append = token::flags(&self.desc()) & token::FLAG_APPEND != 0;
                let off = if append {
                    a.held.size
                } else {
                    at.unwrap_or(a.held.offset)
                };
                let n = data.len() as u64;
                if off + n > self.map.len() as u64 {
                    return Ok(None);
                }
                a.ahead.forget();
                token::client_mark(&self.desc(), off, off + n);
                let mut done = 0;
                while done < n {
                    let avail = a.ensure(off + done)?;
                    let k = avail.min(n - done);
                    self.map
                        .write((off + done) as usize, &data[done as usize..(done + k) as usize]);
                    done += k;
                }
                // An empty write changes nothing: not the size past the
                // end it was made at, not an appending file's offset.
                if n > 0 {
                    let (lo, hi) = a.held.dirty;
                    a.held.dirty = (lo.min(off), hi.max(off + n));
                    a.held.size = a.held.size.max(off + n);
                    if at.is_none() {
                        a.held.offset = off + n;
                    }
                }
                Ok(Some(n as usize))
            })?
            .flatten())
    }

    /// The open's own open file description, for its locks: `None` if
    /// this handle has none (a read-only export, an appending writer's
    /// second open), or the session is over (the locks then fail as
    /// calls would).
    pub(crate) fn lock_owner(&self) -> Result<Option<BorrowedFd<'_>>, FsError> {
        self.session.check()?;
        Ok(self.host.as_ref().filter(|_| self.locks).map(|h| h.as_fd()))
    }

    /// Move the shared offset without a call.
    pub(crate) fn seek(&self, whence: Whence, delta: i64) -> Result<Option<u64>, FsError> {
        if matches!(whence, Whence::Data | Whence::Hole) {
            // Only the host's file system knows its holes: the copy path
            // takes the token back and asks it.
            return Ok(None);
        }
        let target = |h: &Held| {
            let base = match whence {
                Whence::Start => 0,
                Whence::Current => h.offset,
                Whence::End | Whence::Data | Whence::Hole => h.size,
            };
            base.checked_add_signed(delta)
                .filter(|&t| t <= token::MAX_OFFSET)
                .ok_or_else(|| FsError::Invalid(format!("seek to {base} + {delta}")))
        };
        // A seek that fails declines the short way and says why the long
        // way.
        let short = self.short(|h, _| {
            let to = target(h).ok()?;
            h.offset = to;
            Some(to)
        })?;
        if short.is_some() {
            return Ok(short);
        }
        self.with_token(|a| {
            let to = target(&a.held)?;
            a.held.offset = to;
            Ok(to)
        })
    }

    /// The file's metadata from the shared page, without a call.
    pub(crate) fn stat(&self) -> Result<Option<Stat>, FsError> {
        let short =
            self.short(|h, _| Some(token::stat_from_words(&token::stat_words(&self.desc()), h.size)))?;
        if short.is_some() {
            return Ok(short);
        }
        self.with_token(|a| {
            Ok(token::stat_from_words(
                &token::stat_words(&self.desc()),
                a.held.size,
            ))
        })
    }
}

/// A read-only view of a mapped file's pages, without token or window: the
/// service pages them in as they are first touched (the pager resolves the
/// fault for a 64 KiB range), and they change as other clients write. What
/// `mmap(MAP_SHARED)` of the file would show.
pub struct View {
    m: Arc<Mapped>,
    covered: AtomicU64,
}

impl View {
    pub(crate) fn new(m: Arc<Mapped>) -> View {
        View {
            m,
            covered: AtomicU64::new(0),
        }
    }

    /// Copy the file's bytes at `at` into `buf` (as many as the file has
    /// there, by its size now).
    pub fn read_at(&self, at: u64, buf: &mut [u8]) -> Result<usize, FsError> {
        self.m.session.check()?;
        let size = match self.m.stat()? {
            Some(st) => st.size,
            None => return Err(FsError::Invalid("the file's token is contended".into())),
        };
        let n = (buf.len() as u64).min(size.saturating_sub(at));
        let end = at + n;
        if end > self.m.map.len() as u64 {
            return Err(FsError::Invalid("beyond the mapped span".into()));
        }
        if end > self.covered.load(SeqCst) {
            // Cover the whole file at once: one call, not one per range.
            let covered = self.m.session.session.extent(self.m.slot, size.max(end))?;
            self.covered.fetch_max(covered, SeqCst);
        }
        self.m.session.check()?;
        self.m.map.read(at as usize, &mut buf[..n as usize]);
        self.m.session.check()?;
        Ok(n as usize)
    }
}

impl Drop for Mapped {
    /// The token goes back with what we wrote: to the service, or, if it
    /// died and the watcher has not written this file back yet (it takes
    /// the same lock), to the host through the keeper. Either way the
    /// writes are on the host when a close returns.
    fn drop(&mut self) {
        let keeper = {
            let mut maps = self.session.maps.lock();
            let i = maps.iter().position(|m| m.addr == self.map.addr());
            i.and_then(|i| maps.swap_remove(i).keeper)
        };
        let died = match self.session.check() {
            Ok(()) => matches!(
                self.session.session.detach(self.slot),
                Err(FsError::Stub(StubError::Call(CallError::PeerDied)))
            ),
            Err(e) => e.errno() == rustix::io::Errno::IO.raw_os_error(),
        };
        if died && let Some(k) = keeper {
            // After the watcher, the token is no longer here: nothing to do.
            if let Err(e) = k.write_back(&self.desc()) {
                tracing::warn!("cannot write a file back after its service died: {e}");
            }
        }
    }
}

/// An operation with the token active.
struct Active<'a> {
    m: &'a Mapped,
    held: Held,
    window: (u64, u64),
    /// What the host file was read ahead into, under the handle's lock.
    ahead: &'a mut ReadAhead,
}

impl Active<'_> {
    /// Bytes of the window from `off` on, moving it there if needed.
    fn ensure(&mut self, off: u64) -> Result<u64, FsError> {
        let (w_off, w_len) = self.window;
        if w_len > 0 && (w_off..w_off + w_len).contains(&off) {
            return Ok(w_off + w_len - off);
        }
        self.window = self.m.session.session.window(self.m.slot, off, self.m.window)?;
        let (w_off, w_len) = self.window;
        if !(w_off..w_off + w_len).contains(&off) {
            return Err(FsError::Invalid("the service moved the window elsewhere".into()));
        }
        Ok(w_off + w_len - off)
    }
}
