//! One file of the export, as the service keeps it for every open of it:
//! who holds its token, and the page cache behind mapped windows.
//!
//! **The cache** is a memfd the size of the windows handed out, mapped
//! here (the pager writes file data through this mapping) and by each
//! client that maps the file. A page is *resident* once the service has
//! filled it from the host file; the client's mapping of it is made by
//! the pager (`UFFDIO_CONTINUE`), never by a copy. The memfd is sealed
//! against shrinking, so no client can pull pages out from under the
//! service's mapping; pages are dropped by punching holes.
//!
//! **Coherence.** While a client holds the token, the bytes it wrote
//! through its window are in the cache only, and the size it extended to
//! is in its descriptor only. Taking the token back ([`Node::recall`])
//! writes back what it reports dirty (the chunks its dirty map marks,
//! within its dirty range) and sets the host size, so that whenever no token is out, the host file is the truth
//! and the copy path reads and writes it directly; copy-path writes also
//! update resident cache pages, and truncation drops the pages past the
//! end. Every copy-path call on the file runs under the token lock, so no
//! grant slips in between.

use std::collections::BTreeSet;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};
use rustix::fs::{FallocateFlags, SealFlags};

use crate::proto::FsError;
use crate::proto::token::{self, Desc, Held};
use crate::proto::write_back::{copy_back, set_size};
use crate::service::tally::Tally;
use lintel_sys::Mapping;

/// Address space a client reserves for one file's cache: files (and
/// windows) beyond it are served by the copy path.
pub(crate) const SPAN: u64 = 1 << 36;
const PAGE: u64 = 4096;

/// The holder of a file's token, as the node sees it: one descriptor of
/// one session, standing for one open file (whose offset travels in the
/// token). A session grants the token and makes the holder
/// (`session::Holder`); the node only takes the token back through it.
pub(crate) trait TokenHolder: Send {
    /// The holding session's id.
    fn session_id(&self) -> u64;
    /// The descriptor in the session's shared page.
    fn desc(&self) -> Desc<'_>;
    /// The session's client process is gone: nothing writes the
    /// descriptor any more.
    fn is_dead(&self) -> bool;
    /// The session was evicted: nothing it reports is believed.
    fn is_evicted(&self) -> bool;
    /// Evict the session: it broke the protocol (`why`).
    fn evict(&self, why: &str);
    /// The export's counters.
    fn tally(&self) -> &Tally;
    /// The token came back: the open file's offset is `offset` now.
    fn set_offset(&self, offset: u64);
    /// A descriptor of the host file that writes at the offsets given, to
    /// write back what the holder wrote; `None` if the open file does not
    /// write.
    fn write_back_fd(&self) -> Option<Result<&OwnedFd, FsError>>;
}

pub(crate) struct TokenState {
    pub holder: Option<Box<dyn TokenHolder>>,
}

/// How [`Node::recall`] got the token back.
enum Taken {
    /// Given back: what it holds, to write out.
    Given(Held),
    /// Its holder is dead.
    Dead,
    /// Its holder broke the protocol (why).
    Misbehaved(&'static str),
}

pub(crate) struct Cache {
    pub memfd: OwnedFd,
    /// A second open file description of the memfd, the service's own:
    /// a fill writes at its position (`sendfile`), which no client moves.
    /// Clients that write get `memfd` itself, whose position is theirs
    /// too (a keeper seeks it for the data it writes back).
    fill: OwnedFd,
    pub map: Mapping,
    /// Bytes of the memfd (it grows by windows).
    pub len: u64,
    /// Page numbers filled from the host.
    resident: BTreeSet<u64>,
}

/// A file of the export, shared by every open of it.
pub(crate) struct Node {
    pub token: Mutex<TokenState>,
    /// `SessionCore::id << 8 | slot` of the holder, 0 if none: read
    /// without the token lock by window calls and the pager.
    pub holder_id: AtomicU64,
    pub cache: Mutex<Option<Cache>>,
    /// Bumped whenever cached pages are dropped (truncation): what a
    /// session remembers as mapped in its client is then stale.
    pub epoch: AtomicU64,
    /// A client holds a descriptor of the host file for a shared mapping
    /// ([`crate::proto::OpenFile::map_descriptor`]): the page cache of the
    /// host is the file's only copy from then on, so no token is granted
    /// (windows would show the service's cache, which such a mapping
    /// does not see). For the node's life, i.e. until every open of the
    /// file is closed.
    pub host_mapped: AtomicBool,
}

impl Cache {
    /// The runs of resident bytes within `[lo, hi)`, clipped to it.
    fn resident_runs(&self, lo: u64, hi: u64) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        if lo >= hi {
            return runs;
        }
        for &page in self.resident.range(lo / PAGE..hi.div_ceil(PAGE)) {
            let (from, to) = ((page * PAGE).max(lo), ((page + 1) * PAGE).min(hi));
            match runs.last_mut() {
                Some(last) if last.1 == from => last.1 = to,
                _ => runs.push((from, to)),
            }
        }
        runs
    }
}

impl Node {
    pub(crate) fn new() -> Node {
        Node {
            token: Mutex::new(TokenState { holder: None }),
            holder_id: AtomicU64::new(0),
            cache: Mutex::new(None),
            epoch: AtomicU64::new(0),
            host_mapped: AtomicBool::new(false),
        }
    }

    /// Take the token back from its holder, if any, and bring the host
    /// file up to date (data and size). A holder that does not give it
    /// back in time, or lies, is evicted; what it wrote since the grant is
    /// then not written back. One found dead has what it last reported
    /// written back. Either way the cache is dropped ([`Node::drop_cache`]):
    /// it may hold bytes that holder wrote and did not report.
    pub(crate) fn recall(&self, st: &mut TokenState, deadline: Instant) {
        let Some(h) = st.holder.take() else {
            return;
        };
        h.tally().recalls.fetch_add(1, SeqCst);
        if h.is_evicted() {
            // Nothing it reports is believed: what it wrote since its
            // grant is lost.
            self.holder_id.store(0, SeqCst);
            self.drop_cache();
            return;
        }
        let taken = if h.is_dead() {
            Taken::Dead
        } else {
            // Its window calls go on working while it finishes (the holder
            // id still names it).
            match token::take(&h.desc(), deadline, &|| h.is_dead()) {
                Ok(held) => Taken::Given(held),
                // It died holding the lock or the token active.
                Err(token::Untaken::Gone) => Taken::Dead,
                Err(token::Untaken::Misbehaved(why)) => Taken::Misbehaved(why.0),
            }
        };
        self.holder_id.store(0, SeqCst);
        match taken {
            Taken::Given(held) => {
                self.write_out(&*h, held);
                // Written out: should the service die from here on, the
                // client has nothing to write back for this token.
                token::recalled(&h.desc());
            }
            Taken::Dead => {
                // Nothing writes its descriptor any more: its last stores
                // stand. The write it may have been making (its chunks
                // marked, its range not stored) stays out of the cache.
                self.write_out(&*h, token::peek(&h.desc()));
                token::recalled(&h.desc());
                self.drop_cache();
            }
            Taken::Misbehaved(why) => {
                h.evict(why);
                self.drop_cache();
            }
        }
    }

    /// Bring the host file up to date with what the token's holder wrote,
    /// and leave it the token (a sync): taken, written out and given
    /// straight back ([`token::regrant`]), its window kept and nothing
    /// dirty, with the metadata of `host` (a descriptor of the file), so
    /// that the holder's next read or write makes no call. The holder id
    /// names the holder throughout: an operation it begins meanwhile asks
    /// for the token and is answered once this is done. A holder that is
    /// gone, evicted or breaks the protocol is recalled as
    /// [`Node::recall`] does.
    pub(crate) fn flush(&self, st: &mut TokenState, deadline: Instant, host: impl AsFd) {
        let Some(h) = st.holder.as_ref().filter(|h| !h.is_evicted() && !h.is_dead()) else {
            return self.recall(st, deadline);
        };
        let held = match token::take(&h.desc(), deadline, &|| h.is_dead()) {
            Ok(held) => held,
            Err(token::Untaken::Gone) => return self.recall(st, deadline),
            Err(token::Untaken::Misbehaved(why)) => {
                h.evict(why.0);
                return self.recall(st, deadline);
            }
        };
        self.write_out(&**h, held);
        // Written out: from here on, a holder that cannot have the token
        // back has nothing of it to write.
        let given = crate::service::host::stat_of(host)
            .map_err(|_| None)
            .and_then(|stat| {
                token::regrant(&h.desc(), held, &token::stat_to_words(&stat), deadline, &|| {
                    h.is_dead()
                })
                .map_err(Some)
            });
        if let Err(why) = given {
            if let Some(token::Untaken::Misbehaved(why)) = why {
                h.evict(why.0);
            }
            token::recalled(&h.desc());
            st.holder = None;
            self.holder_id.store(0, SeqCst);
        }
    }

    /// What a holder's token carried, taken back: its offset to the open
    /// file, its bytes and size to the host file.
    fn write_out(&self, h: &dyn TokenHolder, held: token::Held) {
        h.set_offset(held.offset);
        match h.write_back_fd() {
            Some(Ok(fd)) => {
                let bytes = self.write_back(fd, held, token::dirty_map(&h.desc()));
                h.tally().written_back.fetch_add(bytes, SeqCst);
            }
            // Reopening failed (out of descriptors): the
            // bytes stay in the cache; say so.
            Some(Err(e)) => tracing::warn!("cannot write a file back: {e}"),
            None => {}
        }
    }

    /// Write what the token reports dirty (within its size) from the
    /// cache to the host file, and set the host size to the token's; the
    /// bytes written.
    ///
    /// The dirty range spans the lowest to the highest byte written; its
    /// dirty map says which chunks of it (pages, for a file written within
    /// its first 8 MiB): a database that rewrites its first page and
    /// appends has two runs written back per commit, not the whole file.
    /// Only resident pages are written: a client writes only through
    /// windows, which are filled before it can touch them, so a page never
    /// filled holds nothing the client wrote, and its zeros must not reach
    /// the host.
    fn write_back(&self, fd: &OwnedFd, held: token::Held, map: token::DirtyMap) -> u64 {
        let size = held.size;
        let cache = self.cache.lock();
        let r = match cache.as_ref() {
            Some(c) => {
                let lo = held.dirty.0.min(size);
                let hi = held.dirty.1.min(size).min(c.len);
                let runs: Vec<(u64, u64)> = map
                    .runs(lo, hi)
                    .into_iter()
                    .flat_map(|(from, to)| c.resident_runs(from, to))
                    .collect();
                copy_back(&c.memfd, fd, &runs, size)
            }
            None => set_size(fd, size).map(|()| 0),
        };
        r.unwrap_or_else(|e| {
            tracing::warn!("cannot write a file back: {e}");
            0
        })
    }

    /// The token lock, for a copy-path call: the token is back and the
    /// host file is current until the guard drops.
    /// A recall waits for the holder up to `timeout` (the clock is read
    /// only then: most copy-path calls find no holder).
    pub(crate) fn settle(&self, timeout: Duration) -> MutexGuard<'_, TokenState> {
        let mut st = self.token.lock();
        if st.holder.is_some() {
            self.recall(&mut st, Instant::now() + timeout);
        }
        st
    }

    /// The token lock of the file, the host file brought up to date with
    /// what a holder wrote, the holder keeping its token ([`Node::flush`]).
    pub(crate) fn flushed(&self, timeout: Duration, host: impl AsFd) -> MutexGuard<'_, TokenState> {
        let mut st = self.token.lock();
        if st.holder.is_some() {
            self.flush(&mut st, Instant::now() + timeout, host);
        }
        st
    }

    /// Grow the cache's memfd to at least `end` bytes (within [`SPAN`]).
    pub(crate) fn grow(&self, end: u64) -> Result<u64, FsError> {
        let mut cache = self.cache.lock();
        let c = cache
            .as_mut()
            .ok_or_else(|| FsError::Invalid("the file has no cache".into()))?;
        let end = end.next_multiple_of(64 * 1024).min(SPAN);
        if end > c.len {
            rustix::fs::ftruncate(&c.memfd, end)?;
            c.len = end;
        }
        Ok(c.len)
    }

    /// Make `[at, at + len)` of the cache resident, filling missing pages
    /// from the host file through `fd` (zeros past its end).
    pub(crate) fn fill(&self, fd: &OwnedFd, at: u64, len: u64) -> Result<(), FsError> {
        self.fill_then(fd, at, len, || ())
    }

    /// [`Node::fill`], then `then` before any other change to the cache
    /// (a truncation cannot punch the range between the two: the pager
    /// maps ahead of a client this way).
    pub(crate) fn fill_then<T>(
        &self,
        fd: &OwnedFd,
        at: u64,
        len: u64,
        then: impl FnOnce() -> T,
    ) -> Result<T, FsError> {
        let mut cache = self.cache.lock();
        let c = match cache.as_mut() {
            Some(c) => c,
            None => return Err(FsError::Invalid("the file has no cache".into())),
        };
        let end = at + len;
        if end > SPAN {
            return Err(FsError::Invalid("a window beyond the mapped span".into()));
        }
        if end > c.len {
            rustix::fs::ftruncate(&c.memfd, end)?;
            c.len = end;
        }
        let mut page = at / PAGE;
        while page * PAGE < end {
            if !c.resident.contains(&page) {
                // Fill a run of missing pages with one read.
                let first = page;
                while page * PAGE < end && !c.resident.contains(&page) {
                    page += 1;
                }
                let (from, to) = (first * PAGE, page * PAGE);
                fill_from(&c.fill, fd, from, to - from)?;
                c.resident.extend(first..page);
            } else {
                page += 1;
            }
        }
        Ok(then())
    }

    /// Make the file's I/O the host's from now on, if it has no cache:
    /// clients read and write it through calls and descriptors of the
    /// host file (`OpenFile::io_descriptor`), and no cache is made while
    /// the node lives. Whether it has none.
    pub(crate) fn host_io(&self) -> bool {
        let cache = self.cache.lock();
        if cache.is_some() {
            return false;
        }
        self.host_mapped.store(true, SeqCst);
        true
    }

    /// The cache, made on first use: the memfd (sealed against shrinking)
    /// a client maps. None is made for a file whose I/O is the host's
    /// ([`Node::host_io`]).
    pub(crate) fn cache_fd(&self) -> Result<OwnedFd, FsError> {
        let mut cache = self.cache.lock();
        if cache.is_none() && self.host_mapped.load(SeqCst) {
            return Err(FsError::Invalid(
                "the file is read and written through the host: no windows".into(),
            ));
        }
        if cache.is_none() {
            let memfd = rustix::fs::memfd_create(
                "lintel-fs-cache",
                rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
            )?;
            rustix::fs::fcntl_add_seals(&memfd, SealFlags::SHRINK | SealFlags::SEAL)?;
            let map = Mapping::map_shared(&memfd, SPAN as usize, true)?;
            let fill = reopen_memfd(&memfd, rustix::fs::OFlags::RDWR)?;
            *cache = Some(Cache {
                memfd,
                fill,
                map,
                len: 0,
                resident: BTreeSet::new(),
            });
        }
        let c = cache.as_ref().expect("made above");
        Ok(c.memfd.try_clone()?)
    }

    /// A copy-path write of `data` at `at` reached the host: resident
    /// pages get the same bytes.
    pub(crate) fn write_through(&self, at: u64, data: &[u8]) {
        let cache = self.cache.lock();
        let Some(c) = cache.as_ref() else { return };
        let end = (at + data.len() as u64).min(c.len);
        let mut page = at / PAGE;
        while page * PAGE < end {
            if c.resident.contains(&page) {
                let from = (page * PAGE).max(at);
                let to = ((page + 1) * PAGE).min(end);
                c.map
                    .write(from as usize, &data[(from - at) as usize..(to - at) as usize]);
            }
            page += 1;
        }
    }

    /// The host file reads as zeros in `[lo, hi)` now (a punched hole, a
    /// zeroed range, an extension): resident pages there get zeros, in
    /// place, so every client's mapping of them sees the host's bytes.
    /// Pages that are not resident are filled from the host when touched.
    pub(crate) fn zero_cache(&self, lo: u64, hi: u64) {
        let cache = self.cache.lock();
        let Some(c) = cache.as_ref() else { return };
        for (from, to) in c.resident_runs(lo, hi.min(c.len)) {
            c.map.zero(from as usize, (to - from) as usize);
        }
    }

    /// The file was cut to `len` bytes: cached bytes past it are gone
    /// (the tail of the last page is zeroed; whole pages are punched out,
    /// which also unmaps them from every client).
    pub(crate) fn truncate_cache(&self, len: u64) {
        let mut cache = self.cache.lock();
        let Some(c) = cache.as_mut() else { return };
        if len >= c.len {
            return;
        }
        let whole = len.div_ceil(PAGE) * PAGE;
        if len < whole && c.resident.contains(&(len / PAGE)) {
            c.map.zero(len as usize, (whole - len) as usize);
        }
        self.drop_pages(c, whole);
    }

    /// Drop every cached page, to be filled from the host again as it is
    /// read: the cache may hold bytes that a holder wrote through its window
    /// and the host never got (a holder that died during a write, its mark
    /// made and its range not yet stored; one evicted, whose reports are
    /// not believed). Left there, the next holder would read them, and its
    /// write-back of a chunk around them would put them on the host after
    /// writes made since.
    pub(crate) fn drop_cache(&self) {
        let mut cache = self.cache.lock();
        if let Some(c) = cache.as_mut() {
            self.drop_pages(c, 0);
        }
    }

    /// Drop the cached pages from byte `from` (a page boundary) on.
    fn drop_pages(&self, c: &mut Cache, from: u64) {
        self.epoch.fetch_add(1, SeqCst);
        if from < c.len {
            let _ = rustix::fs::fallocate(
                &c.memfd,
                FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                from,
                c.len - from,
            );
            let gone: Vec<u64> = c.resident.range(from / PAGE..).copied().collect();
            for p in gone {
                c.resident.remove(&p);
            }
        }
    }
}

/// Copy `len` bytes of the host file `host` at `at` into the cache memfd
/// at the same offset. Only the host's data is read: its holes (and
/// unwritten extents, which Linux reports as holes) become zeroed pages,
/// so filling a window does not make the host's page cache report data
/// where the file has none (`SEEK_DATA`, and `cp`'s sparse copies, see
/// what a native file would show). A file system that cannot say where
/// its data lies is read whole.
fn fill_from(memfd: &OwnedFd, host: &OwnedFd, at: u64, len: u64) -> Result<(), FsError> {
    use rustix::fs::SeekFrom;
    let end = at + len;
    let mut pos = at;
    while pos < end {
        let data = match rustix::fs::seek(host, SeekFrom::Data(pos)) {
            Ok(d) => d.clamp(pos, end),
            // No data at or after `pos`.
            Err(rustix::io::Errno::NXIO) => end,
            Err(_) => return copy_from(memfd, host, pos, end - pos),
        };
        zero_range(memfd, pos, data)?;
        if data == end {
            break;
        }
        // Past `data` (there is data there), within the range.
        let hole = rustix::fs::seek(host, SeekFrom::Hole(data)).map_or(end, |h| h.clamp(data + 1, end));
        copy_from(memfd, host, data, hole - data)?;
        pos = hole;
    }
    Ok(())
}

/// Copy `len` bytes of the host at `at` into the memfd at the same offset,
/// in the kernel (`sendfile`: page cache to page cache, the memfd's pages
/// allocated by its write path rather than by a fault apiece through a
/// mapping, which costs several times more). Past the host's end, zeros.
fn copy_from(memfd: &OwnedFd, host: &OwnedFd, at: u64, len: u64) -> Result<(), FsError> {
    let mut done = 0u64;
    rustix::fs::seek(memfd, rustix::fs::SeekFrom::Start(at))?;
    while done < len {
        let mut from = at + done;
        match rustix::fs::sendfile(memfd, host, Some(&mut from), (len - done) as usize) {
            Ok(0) => break,
            Ok(n) => done += n as u64,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    zero_range(memfd, at + done, at + len)
}

/// Zeros in the memfd's `[from, to)`, its pages allocated (a page may hold
/// stale bytes past a truncation point: punched, then allocated, so a
/// client's touch finds a page rather than faulting to the pager).
fn zero_range(memfd: &OwnedFd, from: u64, to: u64) -> Result<(), FsError> {
    if from >= to {
        return Ok(());
    }
    let first = from.next_multiple_of(PAGE).min(to);
    if from < first {
        rustix::io::pwrite(memfd, &vec![0u8; (first - from) as usize], from)?;
    }
    let last = (to / PAGE * PAGE).max(first);
    if first < last {
        let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        rustix::fs::fallocate(memfd, flags, first, last - first)?;
        rustix::fs::fallocate(memfd, FallocateFlags::KEEP_SIZE, first, last - first)?;
    }
    if last < to {
        rustix::io::pwrite(memfd, &vec![0u8; (to - last) as usize], last)?;
    }
    Ok(())
}

/// `fd` reopened read-only (a new open file description of the same
/// memfd), for clients that may only read.
pub(crate) fn read_only(fd: impl AsFd) -> Result<OwnedFd, FsError> {
    reopen_memfd(fd, rustix::fs::OFlags::RDONLY)
}

/// A new open file description of the memfd `fd`, with `access`.
fn reopen_memfd(fd: impl AsFd, access: rustix::fs::OFlags) -> Result<OwnedFd, FsError> {
    use std::os::fd::AsRawFd;
    let path = format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd());
    Ok(rustix::fs::open(
        path.as_str(),
        access | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(bytes: &[u8]) -> OwnedFd {
        let fd = rustix::fs::memfd_create("host", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::io::pwrite(&fd, bytes, 0).unwrap();
        fd
    }

    fn cached(n: &Node, at: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        n.cache.lock().as_ref().unwrap().map.read(at as usize, &mut v);
        v
    }

    #[test]
    fn the_cache_fills_from_the_host_and_follows_copy_path_writes_and_truncation() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 200) as u8 + 1).collect();
        let fd = host(&data);
        let n = Node::new();
        assert!(n.fill(&fd, 0, 4096).is_err(), "no cache before one is asked for");
        n.cache_fd().unwrap();
        n.fill(&fd, 4096, 8192).unwrap();
        assert_eq!(cached(&n, 4096, 5904), data[4096..]);
        assert_eq!(
            cached(&n, 10_000, 2288),
            vec![0; 2288],
            "zeros past the host's end"
        );
        // A copy-path write reaches resident pages only.
        n.write_through(4000, &[9; 200]);
        assert_eq!(cached(&n, 4096, 104), vec![9; 104]);
        assert_eq!(cached(&n, 4000, 96), vec![0; 96], "page 0 was not resident");
        // Truncation zeros the last page's tail and drops later pages.
        n.truncate_cache(5000);
        assert_eq!(
            cached(&n, 4096, 904),
            [vec![9; 104], data[4200..5000].to_vec()].concat()
        );
        assert_eq!(cached(&n, 5000, 3192), vec![0; 3192]);
        assert!(!n.cache.lock().as_ref().unwrap().resident.contains(&2));
        // A later fill of a dropped page reads the host again.
        n.fill(&fd, 8192, 4096).unwrap();
        assert_eq!(cached(&n, 8192, 1808), data[8192..]);
        assert_eq!(
            n.grow(100).unwrap(),
            64 * 1024,
            "grown to the first fill, in 64 KiB steps"
        );
    }

    /// A holder as a dead client's session leaves it: its descriptor in a
    /// page of its own, writing back through a descriptor of the host.
    struct Dead {
        page: Mapping,
        host: OwnedFd,
        tally: Tally,
    }

    impl TokenHolder for Dead {
        fn session_id(&self) -> u64 {
            1
        }
        fn desc(&self) -> Desc<'_> {
            Desc(&self.page, 0)
        }
        fn is_dead(&self) -> bool {
            true
        }
        fn is_evicted(&self) -> bool {
            false
        }
        fn evict(&self, _: &str) {}
        fn tally(&self) -> &Tally {
            &self.tally
        }
        fn set_offset(&self, _: u64) {}
        fn write_back_fd(&self) -> Option<Result<&OwnedFd, FsError>> {
            Some(Ok(&self.host))
        }
    }

    /// A client dies during a window write: its chunks marked, its range
    /// not yet stored. What it reported before reaches the host; the write
    /// cut short does not stay in the cache, where the next holder would
    /// read it and write it back around its own writes (the crash test
    /// found that, under load: a survivor's write-back put a dead client's
    /// bytes on the host after the survivor's own writes).
    #[test]
    fn a_dead_holders_unreported_write_leaves_the_cache() {
        let data = vec![1u8; 16_384];
        let fd = host(&data);
        let n = Node::new();
        n.cache_fd().unwrap();
        n.fill(&fd, 0, 16_384).unwrap();
        let page = rustix::fs::memfd_create("desc", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&page, token::DESC as u64).unwrap();
        let dead = Dead {
            page: Mapping::map_shared(&page, token::DESC, true).unwrap(),
            host: rustix::io::dup(&fd).unwrap(),
            tally: Tally::default(),
        };
        let soon = Instant::now() + Duration::from_secs(10);
        {
            let d = dead.desc();
            token::grant(&d, 0, 16_384, &[0; token::STAT_WORDS], soon).unwrap();
            // A write reported (marked, then its range stored at the end).
            let token::Begin::Ready(mut held, _) = token::client_begin(&d) else {
                panic!("granted")
            };
            token::client_mark(&d, 0, 100);
            n.cache.lock().as_ref().unwrap().map.write(0, &[2; 100]);
            held.dirty = (0, 100);
            token::client_end(&d, held);
            // Then one cut short by the death: marked, written, never ended.
            let token::Begin::Ready(..) = token::client_begin(&d) else {
                panic!("still granted")
            };
            token::client_mark(&d, 8192, 8292);
            n.cache.lock().as_ref().unwrap().map.write(8192, &[3; 100]);
        }
        let mut st = TokenState {
            holder: Some(Box::new(dead)),
        };
        n.recall(&mut st, soon);
        let mut on_host = vec![0u8; 16_384];
        rustix::io::pread(&fd, &mut on_host, 0).unwrap();
        assert_eq!(on_host[..100], [2; 100], "the reported write is on the host");
        assert_eq!(on_host[100..], data[100..], "nothing else is");
        n.fill(&fd, 0, 16_384).unwrap();
        assert_eq!(
            cached(&n, 0, 16_384),
            on_host,
            "the cache holds the host's bytes, not the write cut short"
        );
    }

    /// A writing client's copy of the cache is the service's descriptor
    /// (its keeper seeks it for the data it writes back): fills land at
    /// their offsets however the client moves that descriptor's position
    /// meanwhile.
    #[test]
    fn fills_land_where_they_belong_while_a_client_seeks_its_copy() {
        use std::sync::atomic::AtomicBool;
        let data: Vec<u8> = (0..(4u32 << 20)).map(|i| (i / 4096 % 251) as u8 + 1).collect();
        let fd = host(&data);
        let n = Node::new();
        let client = n.cache_fd().unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut at = 0u64;
                while !stop.load(SeqCst) {
                    at = (at + 12_345) % (4 << 20);
                    let _ = rustix::fs::seek(&client, rustix::fs::SeekFrom::Start(at));
                }
            });
            // Stopped however the fills end.
            struct Stop<'a>(&'a AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, SeqCst);
                }
            }
            let _stop = Stop(&stop);
            for page in 0..(4u64 << 20) / PAGE {
                n.fill(&fd, page * PAGE, PAGE).unwrap();
            }
        });
        let cached = cached(&n, 0, data.len());
        let wrong = (0..data.len() / 4096)
            .find(|&p| cached[p * 4096..(p + 1) * 4096] != data[p * 4096..(p + 1) * 4096]);
        assert_eq!(wrong, None, "a page holds other bytes than the host's");
    }

    #[test]
    fn resident_runs_are_clipped_and_merged() {
        let n = Node::new();
        n.cache_fd().unwrap();
        let fd = host(&[7; 100]);
        n.fill(&fd, 0, 8192).unwrap();
        n.fill(&fd, 5 * 4096, 4096).unwrap();
        let cache = n.cache.lock();
        let c = cache.as_ref().unwrap();
        assert_eq!(c.resident_runs(10, 30_000), vec![(10, 8192), (20_480, 24_576)]);
        assert_eq!(c.resident_runs(9000, 20_000), vec![]);
        assert_eq!(c.resident_runs(100, 100), vec![]);
    }

    #[test]
    fn the_cache_memfd_cannot_shrink_under_the_service() {
        let n = Node::new();
        let fd = n.cache_fd().unwrap();
        n.grow(1 << 20).unwrap();
        assert!(rustix::fs::ftruncate(&fd, 0).is_err(), "sealed against shrinking");
        assert!(
            rustix::fs::fcntl_add_seals(&fd, SealFlags::WRITE).is_err(),
            "no further seals: a client cannot freeze the service's writes"
        );
        let ro = read_only(&fd).unwrap();
        assert!(
            rustix::io::pwrite(&ro, b"x", 0).is_err(),
            "a reader's copy cannot write"
        );
    }
}
