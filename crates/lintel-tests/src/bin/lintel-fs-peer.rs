//! A domain the file-service tests start: `serve ROOT [read-only]` exports
//! ROOT and offers its door; `client` takes the export door it is offered
//! and serves `lintel_tests::fs::FsPeer`, doing file operations on the
//! test's behalf; `misbehave` plays a hostile client with the raw
//! protocol.
#![deny(clippy::undocumented_unsafe_blocks)]

use std::sync::Arc;

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

use lintel::Door;
use lintel_fs::proto::{Export, ExportClient, OpenFile, OpenFileClient, Session, SessionClient};
use lintel_fs::{token, File, Fs, FsError, IoPath, Stat};
use lintel_tests::fs::{FsPeer, FsPeerServer};
use parking_lot::Mutex;

fn main() {
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let args: Vec<String> = std::env::args().collect();
    let _keep = match args.get(1).map(String::as_str) {
        Some("serve") => {
            let root = args.get(2).expect("serve ROOT");
            let read_only = args.get(3).map(String::as_str) == Some("read-only");
            let timeout = args
                .get(4)
                .and_then(|t| t.parse().ok())
                .map_or(lintel_fs::LOCK_TIMEOUT, std::time::Duration::from_millis);
            let door = lintel_fs::Service::new(root, read_only)
                .expect("export the root")
                .with_lock_timeout(timeout)
                .with_map_ahead(
                    std::env::var("LINTEL_FS_PEER_MAP_AHEAD")
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(lintel_fs::MAP_AHEAD),
                )
                .into_door();
            lintel::boot::join(std::slice::from_ref(&door)).expect("join the test");
            Some(door)
        }
        Some("client") => {
            let mut door = None;
            // The export is kept before the control door is offered: the
            // test may call as soon as it has the door.
            lintel::boot::join_with(|given| {
                let export = given.first().cloned().map(Fs::from_door);
                let d = FsPeerServer::door(Client {
                    export,
                    files: Mutex::new(Vec::new()),
                    hostile: Mutex::new(None),
                    written: Arc::default(),
                });
                door = Some(d.clone());
                vec![d]
            })
            .expect("join the test");
            door
        }
        other => panic!("unknown role {other:?}"),
    };
    loop {
        std::thread::park();
    }
}

struct Client {
    export: Option<Fs>,
    files: Mutex<Vec<Option<Arc<File>>>>,
    hostile: Mutex<Option<Hostile>>,
    written: Arc<std::sync::atomic::AtomicU64>,
}

/// A session driven by hand, breaking the protocol.
struct Hostile {
    session: SessionClient,
    slot: u32,
    file: OpenFileClient,
    _page: Page,
    _fds: Vec<OwnedFd>,
}

/// A writable shared mapping of a session's page.
struct Page(*mut u8);

// SAFETY: the page is plain shared memory, written only with atomics here.
unsafe impl Send for Page {}

impl Page {
    fn map(fd: &OwnedFd) -> Page {
        // SAFETY: a fresh shared mapping at an address the kernel picks.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                token::PAGE_LEN,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                fd,
                0,
            )
        }
        .expect("map the session page");
        Page(p.cast())
    }

    fn word(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= token::PAGE_LEN);
        // SAFETY: in bounds and aligned (checked); the mapping is never
        // unmapped while `self` lives; atomics may alias shared memory.
        unsafe { &*(self.0.add(off) as *const AtomicU32) }
    }
}

impl Client {
    fn file(&self, n: u32) -> Result<Arc<File>, FsError> {
        self.files
            .lock()
            .get(n as usize)
            .cloned()
            .flatten()
            .ok_or(FsError::Closed)
    }

    fn keep(&self, f: File) -> u32 {
        let mut files = self.files.lock();
        files.push(Some(Arc::new(f)));
        (files.len() - 1) as u32
    }
}

impl FsPeer for Client {
    fn open(&self, path: Vec<u8>, flags: u32, io: u8) -> Result<u32, FsError> {
        self.open_mode(path, flags, 0o666, io)
    }

    fn open_mode(&self, path: Vec<u8>, flags: u32, mode: u32, io: u8) -> Result<u32, FsError> {
        use std::os::unix::ffi::OsStrExt;
        let fs = self.export.as_ref().ok_or(FsError::Closed)?;
        let path = std::ffi::OsStr::from_bytes(&path);
        let mut options = lintel_fs::OpenOptions::new();
        match io {
            1 => options.io_path(IoPath::Copy),
            2 => options.io_path(IoPath::Mapped),
            3 => options.io_path(IoPath::Copy).splice_min(1),
            4 => options.io_path(IoPath::Copy).splice_min(usize::MAX),
            // As `lintel-run` opens a program's files: longer reads and
            // writes than this leave the window for the host file, the
            // pipes or calls.
            5 => options.io_path(IoPath::Auto).mapped_max(8 << 10),
            _ => options.io_path(IoPath::Auto),
        };
        let f = fs.open_with(
            path,
            options
                .custom_flags(flags & !3)
                .read(flags & 3 != 1)
                .write(flags & 3 != 0)
                .mode(mode),
        )?;
        Ok(self.keep(f))
    }

    fn close(&self, file: u32) -> Result<(), FsError> {
        let f = self
            .files
            .lock()
            .get_mut(file as usize)
            .and_then(Option::take)
            .ok_or(FsError::Closed)?;
        match Arc::try_unwrap(f) {
            Ok(f) => f.close(),
            // A background writer still holds it: it closes when that ends.
            Err(_) => Ok(()),
        }
    }

    fn written(&self) -> Result<u64, FsError> {
        Ok(self.written.load(std::sync::atomic::Ordering::SeqCst))
    }

    fn is_mapped(&self, file: u32) -> Result<bool, FsError> {
        Ok(self.file(file)?.is_mapped())
    }

    fn misbehave(&self, path: Vec<u8>, how: u8) -> Result<(), FsError> {
        use rustix::event::{eventfd, EventfdFlags};
        let fs = self.export.as_ref().ok_or(FsError::Closed)?;
        let export = ExportClient::from_door(fs.door().clone());
        let file = export.open(&path, 2, 0)?;
        let evicted: OwnedFd = eventfd(0, EventfdFlags::CLOEXEC).map_err(FsError::from)?;
        // Descriptors of the wrong kind are refused: a regular file (always
        // readable) would keep a pager thread spinning.
        let not_uffd: OwnedFd = rustix::fs::open(
            "/proc/self/stat",
            rustix::fs::OFlags::RDONLY,
            rustix::fs::Mode::empty(),
        )
        .map_err(FsError::from)?;
        match export.session(not_uffd.try_clone()?, evicted.try_clone()?) {
            Err(FsError::Invalid(_)) => {}
            other => {
                return Err(FsError::Invalid(format!(
                    "a session on a regular file: {:?}",
                    other.map(drop)
                )))
            }
        }
        // A real userfaultfd, registered on nothing: the misbehaviour is
        // in the shared page.
        // SAFETY: the userfaultfd system call takes flags and returns a new
        // descriptor or -1; nothing of ours is touched.
        let raw = unsafe { libc::syscall(libc::SYS_userfaultfd, (libc::O_CLOEXEC | 1) as libc::c_long) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: a descriptor the kernel just gave us, owned by nobody else.
        let fake_uffd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw as i32) };
        // The API handshake (UFFDIO_API: api 0xaa, no features), without
        // which the service's pager could not read it.
        let mut api = [0xaau64, 0, 0];
        // SAFETY: UFFDIO_API reads and writes one `struct uffdio_api` (three
        // u64 words), which `api` is.
        let r = unsafe {
            libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(&fake_uffd),
                0xc018_aa3f,
                api.as_mut_ptr(),
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        let (session, page_fd) = export.session(fake_uffd.try_clone()?, evicted.try_clone()?)?;
        let (slot, cache, _, _, _, _) = session.attach(file.door().clone())?;
        session.acquire(slot)?;
        let page = Page::map(&page_fd);
        let at = slot as usize * token::DESC;
        match how {
            0 => page.word(at + token::LOCK).store(1, SeqCst),
            1 => page.word(at + token::STATE).store(token::ACTIVE, SeqCst),
            _ => {
                let mut x = 0x9e37_79b9_u32;
                for off in (0..token::PAGE_LEN).step_by(4) {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    page.word(off).store(x, SeqCst);
                }
                // Whatever the noise left in the lock, free it: the
                // garbage, not a held lock, is what is tested here.
                page.word(at + token::LOCK).store(0, SeqCst);
                page.word(at + token::STATE).store(token::PASSIVE, SeqCst);
            }
        }
        *self.hostile.lock() = Some(Hostile {
            session,
            slot,
            file,
            _page: page,
            _fds: vec![fake_uffd, evicted, cache],
        });
        Ok(())
    }

    fn misbehaved_probe(&self) -> Result<(i32, i32), FsError> {
        let h = self.hostile.lock();
        let h = h.as_ref().ok_or(FsError::Closed)?;
        let errno = |r: Result<(), FsError>| r.err().map_or(0, |e| e.errno());
        let mut out = Vec::new();
        Ok((
            errno(h.session.acquire(h.slot)),
            errno(h.file.read_at(0, 1, &mut out)),
        ))
    }

    fn adopt(&self, file: Door) -> Result<u32, FsError> {
        Ok(self.keep(File::from_door(file)))
    }

    fn read(&self, file: u32, len: u32, out: &mut Vec<u8>) -> Result<(), FsError> {
        out.resize(len as usize, 0);
        let n = self.file(file)?.read_shared(out)?;
        out.truncate(n);
        Ok(())
    }

    fn write(&self, file: u32, data: &[u8]) -> Result<u64, FsError> {
        Ok(self.file(file)?.write_shared(data)? as u64)
    }

    fn read_at(&self, file: u32, at: u64, len: u32, out: &mut Vec<u8>) -> Result<(), FsError> {
        out.resize(len as usize, 0);
        let n = self.file(file)?.read_at(out, at)?;
        out.truncate(n);
        Ok(())
    }

    fn write_at(&self, file: u32, at: u64, data: &[u8]) -> Result<u64, FsError> {
        Ok(self.file(file)?.write_at(data, at)? as u64)
    }

    fn seek(&self, file: u32, whence: u8, delta: i64) -> Result<u64, FsError> {
        use lintel_fs::Whence;
        let f = self.file(file)?;
        match whence {
            0 => f.seek_shared(std::io::SeekFrom::Start(delta as u64)),
            1 => f.seek_whence(Whence::Current, delta),
            2 => f.seek_whence(Whence::End, delta),
            3 => f.seek_whence(Whence::Data, delta),
            _ => f.seek_whence(Whence::Hole, delta),
        }
    }

    fn stat(&self, file: u32) -> Result<Stat, FsError> {
        self.file(file)?.metadata()
    }

    fn truncate(&self, file: u32, len: u64) -> Result<(), FsError> {
        self.file(file)?.set_len(len)
    }

    fn allocate(&self, file: u32, mode: u32, offset: u64, len: u64) -> Result<(), FsError> {
        self.file(file)?.allocate(mode, offset, len)
    }

    fn set_append(&self, file: u32, on: bool) -> Result<bool, FsError> {
        let f = self.file(file)?;
        f.set_append(on)?;
        f.appends()
    }

    fn sync(&self, file: u32) -> Result<(), FsError> {
        self.file(file)?.sync_all()
    }

    fn write_in_background(&self, file: u32, data: Vec<u8>, times: u32) -> Result<(), FsError> {
        let f = self.file(file)?;
        let written = self.written.clone();
        std::thread::spawn(move || {
            for _ in 0..times {
                match f.write_shared(&data) {
                    Ok(n) if n == data.len() => {
                        written.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    _ => return,
                }
            }
        });
        Ok(())
    }
}
