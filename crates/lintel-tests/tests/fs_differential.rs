//! The file service against the kernel: random sequences of file and
//! namespace operations, made by several clients (this process and two
//! client processes) on an export, in both placements and over every
//! path, and the same sequence made on a reference directory of the host
//! through the kernel's own calls. After every step the results, the
//! bytes read, the errnos, the offset and the size of the file used must
//! match; now and then, and at the end, whole files and then the whole
//! tree (names, kinds, modes, links, contents) are compared, the served
//! tree as it is on the host once every file is closed.
//!
//! A failing sequence is shrunk by proptest to a minimal one and printed
//! as Rust (`[Open { .. }, WriteAt { .. }, ..]`), ready to paste into
//! `regressions` below. Seeds: a fixed set, then one fresh seed per run,
//! printed. `LINTEL_FS_DIFF_CASES` sets the cases per seed and placement
//! (default 150), `LINTEL_FS_DIFF_SEED` (hex) runs one seed alone: the
//! long run is `LINTEL_FS_DIFF_CASES=20000 cargo test --release -p
//! lintel-tests --test fs_differential`.
//!
//! What the service answers differently from Linux on purpose is kept out
//! of the generator, with the reason: paths that lead outside the export
//! (`EXDEV`, its confinement, tested in `fs.rs`), and so symlinks with
//! absolute targets. Where the file system is free to choose, the test
//! checks what Linux promises instead: `SEEK_DATA` and `SEEK_HOLE` find
//! holes as the host file system allocated them, which a window's
//! write-back may have filled with zeros (`World::holes_elsewhere`).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use lintel_fs::{Fs, FsError, IoPath, OpenOptions};
use lintel_tests::fs::{FsClientPeer, FsPeer, FsService};
use lintel_tests::noise;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

// ---- the operations ----

/// Names the sequences use, chosen to collide: files, a directory and a
/// file in it.
const NAMES: [&str; 6] = ["a", "b", "d", "d/c", "d/e", "l"];

/// Targets for symlinks: a file, a directory, a path through a
/// directory, one that climbs back up (from `d/`), and nothing.
const TARGETS: [&str; 5] = ["a", "d", "d/c", "../b", "none"];

/// How a file is opened: the access mode and the other flags Linux
/// accepts on a regular file.
const ACCESS: [u32; 3] = [0, 1, 2]; // O_RDONLY, O_WRONLY, O_RDWR
const O_CREAT: u32 = 0o100;
const O_EXCL: u32 = 0o200;
const O_TRUNC: u32 = 0o1000;
const O_APPEND: u32 = 0o2000;
const O_DIRECTORY: u32 = 0o200000;
const O_NOFOLLOW: u32 = 0o400000;
const O_SYNC: u32 = 0o4010000;
const O_DSYNC: u32 = 0o10000;
const O_NONBLOCK: u32 = 0o4000;
const O_NOCTTY: u32 = 0o400;
const O_NOATIME: u32 = 0o1000000;
const O_LARGEFILE: u32 = 0o100000;

/// fallocate's modes: allocate (may extend), `FALLOC_FL_KEEP_SIZE`,
/// `PUNCH_HOLE|KEEP_SIZE`, `ZERO_RANGE` with and without `KEEP_SIZE`,
/// `COLLAPSE_RANGE` and `INSERT_RANGE` (which move the bytes after the
/// range; the host file system wants them block-aligned, and answers
/// `EINVAL` otherwise, as natively), and two Linux refuses (a punch that
/// would change the size; an unknown bit).
const FALLOC_MODES: [u32; 9] = [0, 1, 3, 0x10, 0x11, 0x08, 0x20, 2, 0x400];

/// The paths an open file's data may take (the peers' numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Io {
    Auto = 0,
    Copy = 4,
    Spliced = 3,
    Mapped = 2,
    /// Auto, as `lintel-run` opens a program's files: the window for
    /// reads and writes up to 8 KiB, the host file (read ahead) or the
    /// pipes for longer reads.
    Program = 5,
}

#[derive(Debug, Clone)]
#[allow(dead_code)] // fields are read through Debug when a case fails
enum Op {
    /// Client `client` opens `NAMES[name]` with `flags` (`mode` if it
    /// creates it) on path `io`.
    Open {
        client: usize,
        name: usize,
        flags: u32,
        mode: u32,
        io: Io,
    },
    /// The open file `h` (counted among those open, modulo) is closed.
    Close {
        h: usize,
    },
    Read {
        h: usize,
        len: usize,
    },
    ReadAt {
        h: usize,
        at: u64,
        len: usize,
    },
    Write {
        h: usize,
        len: usize,
        seed: u64,
    },
    WriteAt {
        h: usize,
        at: u64,
        len: usize,
        seed: u64,
    },
    /// `whence`: 0 start, 1 current, 2 end, 3 `SEEK_DATA`, 4 `SEEK_HOLE`.
    Seek {
        h: usize,
        whence: u8,
        delta: i64,
    },
    SetLen {
        h: usize,
        len: u64,
    },
    /// `fallocate(2)` with `mode` ([`FALLOC_MODES`]).
    Allocate {
        h: usize,
        mode: u32,
        at: u64,
        len: usize,
    },
    /// `fcntl(F_SETFL)` with `O_APPEND` set or cleared.
    SetAppend {
        h: usize,
        on: bool,
    },
    /// `readv` and `writev` with buffers of these lengths (this
    /// process's files only).
    ReadV {
        h: usize,
        lens: Vec<usize>,
    },
    WriteV {
        h: usize,
        lens: Vec<usize>,
        seed: u64,
    },
    Sync {
        h: usize,
    },
    /// Read through a view of `h`'s pages (this process's mapped files).
    View {
        h: usize,
        at: u64,
        len: usize,
    },
    /// Compare the whole file (or the error) through a fresh open.
    Check {
        name: usize,
    },
    Mkdir {
        name: usize,
        mode: u32,
    },
    Rmdir {
        name: usize,
    },
    Unlink {
        name: usize,
    },
    Rename {
        from: usize,
        to: usize,
    },
    Link {
        from: usize,
        to: usize,
    },
    Symlink {
        target: usize,
        name: usize,
    },
    ReadLink {
        name: usize,
    },
    List {
        name: usize,
    },
    Stat {
        name: usize,
        follow: bool,
    },
    Chmod {
        name: usize,
        mode: u32,
    },
}

/// Offsets and lengths that find edges: small ones, ones next to a page
/// or a 64 KiB window edge, and large ones.
fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..5000,
        3 => (0u64..24, -3i64..4).prop_map(|(k, d)| (k * 65536).saturating_add_signed(d)),
        2 => (0u64..300, -2i64..3).prop_map(|(k, d)| (k * 4096).saturating_add_signed(d)),
        1 => 0u64..1_500_000,
    ]
}

fn length() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 0usize..300,
        3 => 0usize..9000,
        2 => (1usize..5, -2i64..3).prop_map(|(k, d)| (k * 65536).saturating_add_signed(d as isize)),
        // What a program reads through a 16 or 32 KiB buffer.
        2 => 8192usize..65536,
        1 => 0usize..300_000,
    ]
}

/// Open flags: every combination can come, the ones that open a file
/// (creating it) most often.
fn flags() -> impl Strategy<Value = u32> {
    let bit = |flag: u32, percent: f64| {
        prop::bool::weighted(percent / 100.0).prop_map(move |on| if on { flag } else { 0 })
    };
    (
        prop::sample::select(ACCESS.to_vec()),
        bit(O_CREAT, 75.0),
        bit(O_EXCL, 8.0),
        bit(O_TRUNC, 12.0),
        bit(O_APPEND, 20.0),
        prop::sample::select(vec![
            0,
            0,
            0,
            0,
            0,
            0,
            O_SYNC,
            O_DSYNC,
            O_NOFOLLOW,
            O_DIRECTORY,
            O_NONBLOCK,
            O_NOCTTY,
            O_NOATIME,
            O_LARGEFILE,
        ]),
    )
        .prop_map(|(a, c, x, t, p, more)| a | c | x | t | p | more)
}

fn mode() -> impl Strategy<Value = u32> {
    prop::sample::select(vec![0o644, 0o600, 0o755, 0o444, 0o700, 0o666, 0o777])
}

fn op() -> impl Strategy<Value = Op> {
    let name = 0..NAMES.len();
    let h = 0usize..8;
    let io = prop::sample::select(vec![Io::Auto, Io::Copy, Io::Spliced, Io::Mapped, Io::Program]);
    prop_oneof![
        8 => (0usize..3, name.clone(), flags(), mode(), io)
            .prop_map(|(client, name, flags, mode, io)| Op::Open { client, name, flags, mode, io }),
        2 => h.clone().prop_map(|h| Op::Close { h }),
        8 => (h.clone(), length()).prop_map(|(h, len)| Op::Read { h, len }),
        8 => (h.clone(), offset(), length()).prop_map(|(h, at, len)| Op::ReadAt { h, at, len }),
        10 => (h.clone(), length(), any::<u64>()).prop_map(|(h, len, seed)| Op::Write { h, len, seed }),
        12 => (h.clone(), offset(), length(), any::<u64>())
            .prop_map(|(h, at, len, seed)| Op::WriteAt { h, at, len, seed }),
        6 => (h.clone(), 0u8..5, prop_oneof![-5000i64..5000, offset().prop_map(|o| o as i64)])
            .prop_map(|(h, whence, delta)| Op::Seek { h, whence, delta }),
        3 => (h.clone(), offset()).prop_map(|(h, len)| Op::SetLen { h, len }),
        6 => (h.clone(), prop::sample::select(FALLOC_MODES.to_vec()), offset(), length())
            .prop_map(|(h, mode, at, len)| Op::Allocate { h, mode, at, len }),
        2 => (h.clone(), any::<bool>()).prop_map(|(h, on)| Op::SetAppend { h, on }),
        3 => (h.clone(), prop::collection::vec(length(), 0..4)).prop_map(|(h, lens)| Op::ReadV { h, lens }),
        3 => (h.clone(), prop::collection::vec(length(), 0..4), any::<u64>())
            .prop_map(|(h, lens, seed)| Op::WriteV { h, lens, seed }),
        1 => h.clone().prop_map(|h| Op::Sync { h }),
        4 => (h, offset(), length()).prop_map(|(h, at, len)| Op::View { h, at, len }),
        2 => name.clone().prop_map(|name| Op::Check { name }),
        1 => (name.clone(), mode()).prop_map(|(name, mode)| Op::Mkdir { name, mode }),
        1 => name.clone().prop_map(|name| Op::Rmdir { name }),
        1 => name.clone().prop_map(|name| Op::Unlink { name }),
        1 => (name.clone(), name.clone()).prop_map(|(from, to)| Op::Rename { from, to }),
        1 => (name.clone(), name.clone()).prop_map(|(from, to)| Op::Link { from, to }),
        1 => (0..TARGETS.len(), name.clone()).prop_map(|(target, name)| Op::Symlink { target, name }),
        1 => name.clone().prop_map(|name| Op::ReadLink { name }),
        1 => name.clone().prop_map(|name| Op::List { name }),
        1 => (name.clone(), any::<bool>()).prop_map(|(name, follow)| Op::Stat { name, follow }),
        1 => (name, mode()).prop_map(|(name, mode)| Op::Chmod { name, mode }),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..64)
}

// ---- the two sides ----

/// What an operation gave: a value or an errno.
type Outcome<T> = Result<T, i32>;

fn served<T>(r: Result<T, FsError>) -> Outcome<T> {
    r.map_err(|e| e.errno())
}

fn native<T>(r: Result<T, Errno>) -> Outcome<T> {
    r.map_err(|e| e.raw_os_error())
}

fn io_native<T>(r: std::io::Result<T>) -> Outcome<T> {
    r.map_err(|e| e.raw_os_error().unwrap_or(-1))
}

/// What the runs did, to show the generator reaches what it should.
#[derive(Default)]
struct Tally {
    sequences: AtomicU64,
    steps: AtomicU64,
    opened: AtomicU64,
    mapped: AtomicU64,
    on_open_files: AtomicU64,
    bytes_written: AtomicU64,
    errors: AtomicU64,
    allocations: AtomicU64,
    /// `SEEK_DATA`/`SEEK_HOLE` answers that differed but kept Linux's
    /// promises ([`World::holes_elsewhere`]).
    holes_elsewhere: AtomicU64,
}

static TALLY: Tally = Tally {
    sequences: AtomicU64::new(0),
    steps: AtomicU64::new(0),
    opened: AtomicU64::new(0),
    mapped: AtomicU64::new(0),
    on_open_files: AtomicU64::new(0),
    bytes_written: AtomicU64::new(0),
    errors: AtomicU64::new(0),
    allocations: AtomicU64::new(0),
    holes_elsewhere: AtomicU64::new(0),
};

/// One open file on the served side.
enum Served {
    /// Opened by this process.
    Here(lintel_fs::File),
    /// Opened by a client process: its number there.
    There(usize, u32),
}

struct Handle {
    served: Served,
    native: OwnedFd,
}

/// The clients of one export.
struct Clients {
    fs: Fs,
    peers: Vec<FsClientPeer>,
}

/// One sequence's world: the served and the native directories and the
/// files open in each.
struct World<'a> {
    clients: &'a Clients,
    /// The sequence's directory, relative to the export.
    rel: String,
    served_dir: PathBuf,
    native_dir: PathBuf,
    open: Vec<Handle>,
}

/// Fail the case unless the served and the native outcome are equal.
macro_rules! same {
    ($served:expr, $native:expr, $($what:tt)*) => {{
        let (s, n) = ($served, $native);
        if format!("{:.1?}", n).starts_with("Err") {
            TALLY.errors.fetch_add(1, SeqCst);
        }
        if s != n {
            return Err(TestCaseError::fail(format!(
                "{}: served {}, native {}",
                format!($($what)*),
                brief(&s),
                brief(&n)
            )));
        }
        s
    }};
}

/// Where two reads' bytes differ: their lengths and the first few ranges
/// of differing bytes.
fn parted(s: &Outcome<Vec<u8>>, n: &Outcome<Vec<u8>>) -> String {
    let (Ok(s), Ok(n)) = (s, n) else {
        return "one failed".into();
    };
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for i in (0..s.len().min(n.len())).filter(|&i| s[i] != n[i]) {
        match ranges.last_mut() {
            Some((_, end)) if *end == i => *end = i + 1,
            _ => ranges.push((i, i + 1)),
        }
    }
    let shown: Vec<String> = ranges.iter().take(8).map(|(a, b)| format!("{a}..{b}")).collect();
    let first = ranges.first().map_or(String::new(), |&(a, b)| {
        let b = b.min(a + 16);
        format!(" (the first: served {:?}, native {:?})", &s[a..b], &n[a..b])
    });
    format!(
        "served {} bytes, native {}; {} ranges differ: {}{}{first}",
        s.len(),
        n.len(),
        ranges.len(),
        shown.join(", "),
        if ranges.len() > 8 { ", …" } else { "" }
    )
}

/// Debug output cut to a readable length.
fn brief(v: &impl std::fmt::Debug) -> String {
    let s = format!("{v:?}");
    if s.len() > 240 {
        format!("{}… ({} characters)", &s[..s.floor_char_boundary(240)], s.len())
    } else {
        s
    }
}

impl World<'_> {
    fn path(&self, name: &str) -> String {
        format!("{}/{}", self.rel, name)
    }

    fn native(&self, name: &str) -> PathBuf {
        self.native_dir.join(name)
    }

    fn pick(&self, h: usize) -> Option<usize> {
        (!self.open.is_empty()).then(|| h % self.open.len())
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Open {
                client,
                name,
                flags,
                mode,
                io,
            } => self.open(client, NAMES[name], flags, mode, io)?,
            Op::Close { h } => {
                if let Some(i) = self.pick(h) {
                    let h = self.open.remove(i);
                    let s = match h.served {
                        Served::Here(f) => served(f.close()),
                        Served::There(c, n) => served(self.clients.peers[c - 1].peer.close(n)),
                    };
                    let _ = same!(s, Ok(()), "close");
                }
            }
            Op::Read { h, len } => {
                if let Some(i) = self.pick(h) {
                    let from = rustix::fs::seek(&self.open[i].native, rustix::fs::SeekFrom::Current(0));
                    let s = self.read(i, None, len);
                    let mut buf = vec![0u8; len];
                    let n = native(rustix::io::read(&self.open[i].native, &mut buf));
                    let n = n.map(|n| buf[..n].to_vec());
                    if s != n {
                        return Err(self.read_mismatch(i, from.unwrap_or(0), len, &s, &n));
                    }
                    self.after(i)?;
                }
            }
            Op::ReadAt { h, at, len } => {
                if let Some(i) = self.pick(h) {
                    let s = self.read(i, Some(at), len);
                    let mut buf = vec![0u8; len];
                    let n = native(rustix::io::pread(&self.open[i].native, &mut buf, at));
                    let n = n.map(|n| buf[..n].to_vec());
                    if s != n {
                        return Err(self.read_mismatch(i, at, len, &s, &n));
                    }
                    self.after(i)?;
                }
            }
            Op::Write { h, len, seed } => {
                if let Some(i) = self.pick(h) {
                    let data = noise(seed, len);
                    let s = self.write(i, None, &data);
                    let n = native(write_all(&self.open[i].native, None, &data));
                    TALLY
                        .bytes_written
                        .fetch_add(*n.as_ref().unwrap_or(&0) as u64, SeqCst);
                    let _ = same!(s, n, "write of {len}");
                    self.after(i)?;
                }
            }
            Op::WriteAt { h, at, len, seed } => {
                if let Some(i) = self.pick(h) {
                    let data = noise(seed, len);
                    let s = self.write(i, Some(at), &data);
                    let n = native(write_all(&self.open[i].native, Some(at), &data));
                    TALLY
                        .bytes_written
                        .fetch_add(*n.as_ref().unwrap_or(&0) as u64, SeqCst);
                    let _ = same!(s, n, "write of {len} at {at}");
                    self.after(i)?;
                }
            }
            Op::Seek { h, whence, delta } => {
                if let Some(i) = self.pick(h) {
                    let before = native(rustix::fs::seek(
                        &self.open[i].native,
                        rustix::fs::SeekFrom::Current(0),
                    ));
                    let s = self.seek(i, whence, delta);
                    let from = match whence {
                        0 => rustix::fs::SeekFrom::Start(delta as u64),
                        1 => rustix::fs::SeekFrom::Current(delta),
                        2 => rustix::fs::SeekFrom::End(delta),
                        3 => rustix::fs::SeekFrom::Data(delta as u64),
                        _ => rustix::fs::SeekFrom::Hole(delta as u64),
                    };
                    // A negative start is EINVAL on Linux; as u64 it is a
                    // huge one, which the service refuses alike.
                    let n = if whence == 0 && delta < 0 {
                        Err(Errno::INVAL.raw_os_error())
                    } else {
                        native(rustix::fs::seek(&self.open[i].native, from))
                    };
                    if whence >= 3 && s != n {
                        self.holes_elsewhere(i, whence, delta, s, n, before)?;
                    } else {
                        let _ = same!(s, n, "seek {whence} {delta}");
                    }
                    self.after(i)?;
                }
            }
            Op::SetLen { h, len } => {
                if let Some(i) = self.pick(h) {
                    let s = match &self.open[i].served {
                        Served::Here(f) => served(f.set_len(len)),
                        Served::There(c, n) => served(self.clients.peers[c - 1].peer.truncate(*n, len)),
                    };
                    let n = native(rustix::fs::ftruncate(&self.open[i].native, len));
                    let _ = same!(s, n, "set_len {len}");
                    self.after(i)?;
                }
            }
            Op::Allocate { h, mode, at, len } => {
                if let Some(i) = self.pick(h) {
                    let len = len as u64;
                    let s = match &self.open[i].served {
                        Served::Here(f) => served(f.allocate(mode, at, len)),
                        Served::There(c, n) => {
                            served(self.clients.peers[c - 1].peer.allocate(*n, mode, at, len))
                        }
                    };
                    let n = native(rustix::fs::fallocate(
                        &self.open[i].native,
                        rustix::fs::FallocateFlags::from_bits_retain(mode),
                        at,
                        len,
                    ));
                    TALLY.allocations.fetch_add(n.is_ok() as u64, SeqCst);
                    let _ = same!(s, n, "fallocate {mode:#x} of {len} at {at}");
                    self.after(i)?;
                }
            }
            Op::SetAppend { h, on } => {
                if let Some(i) = self.pick(h) {
                    let s = match &self.open[i].served {
                        Served::Here(f) => served(f.set_append(on).and_then(|()| f.appends())),
                        Served::There(c, n) => served(self.clients.peers[c - 1].peer.set_append(*n, on)),
                    };
                    let fd = &self.open[i].native;
                    let n = native(rustix::fs::fcntl_getfl(fd).and_then(|fl| {
                        let fl = if on {
                            fl | OFlags::APPEND
                        } else {
                            fl - OFlags::APPEND
                        };
                        rustix::fs::fcntl_setfl(fd, fl)?;
                        Ok(rustix::fs::fcntl_getfl(fd)?.contains(OFlags::APPEND))
                    }));
                    let _ = same!(s, n, "F_SETFL O_APPEND {on}");
                }
            }
            Op::ReadV { h, ref lens } => {
                let Some(i) = self.pick(h) else { return Ok(()) };
                let Served::Here(f) = &self.open[i].served else {
                    return Ok(());
                };
                let mut a: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0u8; n]).collect();
                let mut slices: Vec<_> = a.iter_mut().map(|b| std::io::IoSliceMut::new(b)).collect();
                let s = served(f.read_vectored_shared(&mut slices));
                let mut b: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0u8; n]).collect();
                let mut slices: Vec<_> = b.iter_mut().map(|b| std::io::IoSliceMut::new(b)).collect();
                let n = native(rustix::io::readv(&self.open[i].native, &mut slices));
                let _ = same!(s, n, "readv of {lens:?}");
                let _ = same!(&a, &b, "the bytes readv gave");
                self.after(i)?;
            }
            Op::WriteV { h, ref lens, seed } => {
                let Some(i) = self.pick(h) else { return Ok(()) };
                let Served::Here(f) = &self.open[i].served else {
                    return Ok(());
                };
                let bufs: Vec<Vec<u8>> = lens
                    .iter()
                    .enumerate()
                    .map(|(k, &n)| noise(seed.wrapping_add(k as u64), n))
                    .collect();
                let slices: Vec<_> = bufs.iter().map(|b| std::io::IoSlice::new(b)).collect();
                let s = served(f.write_vectored_shared(&slices));
                let n = native(rustix::io::writev(&self.open[i].native, &slices));
                let _ = same!(s, n, "writev of {lens:?}");
                self.after(i)?;
            }
            Op::Sync { h } => {
                if let Some(i) = self.pick(h) {
                    let s = match &self.open[i].served {
                        Served::Here(f) => served(f.sync_all()),
                        Served::There(c, n) => served(self.clients.peers[c - 1].peer.sync(*n)),
                    };
                    let n = native(rustix::fs::fsync(&self.open[i].native));
                    let _ = same!(s, n, "sync");
                }
            }
            Op::View { h, at, len } => {
                let Some(i) = self.pick(h) else { return Ok(()) };
                let Served::Here(f) = &self.open[i].served else {
                    return Ok(());
                };
                if let Ok(view) = f.view() {
                    let mut buf = vec![0u8; len];
                    if let Ok(n) = view.read_at(at, &mut buf) {
                        let mut want = vec![0u8; len];
                        let k = native(rustix::io::pread(&self.open[i].native, &mut want, at));
                        // A view reads what a shared mapping shows: the
                        // bytes below the size; a write-only native
                        // descriptor cannot tell, so compare only when it can.
                        if let Ok(k) = k {
                            let _ = same!(&buf[..n], &want[..k], "view of {len} at {at}");
                        }
                    }
                }
            }
            Op::Check { name } => self.check(NAMES[name])?,
            Op::Mkdir { name, mode } => {
                let s = served(self.clients.fs.create_dir(self.path(NAMES[name]), mode));
                let n = native(rustix::fs::mkdir(
                    self.native(NAMES[name]),
                    Mode::from_bits_truncate(mode),
                ));
                let _ = same!(s, n, "mkdir {}", NAMES[name]);
            }
            Op::Rmdir { name } => {
                let s = served(self.clients.fs.remove_dir(self.path(NAMES[name])));
                let n = io_native(std::fs::remove_dir(self.native(NAMES[name])));
                let _ = same!(s, n, "rmdir {}", NAMES[name]);
            }
            Op::Unlink { name } => {
                let s = served(self.clients.fs.remove_file(self.path(NAMES[name])));
                let n = native(rustix::fs::unlink(self.native(NAMES[name])));
                let _ = same!(s, n, "unlink {}", NAMES[name]);
            }
            Op::Rename { from, to } => {
                let (a, b) = (NAMES[from], NAMES[to]);
                let s = served(self.clients.fs.rename(self.path(a), self.path(b)));
                let n = native(rustix::fs::rename(self.native(a), self.native(b)));
                let _ = same!(s, n, "rename {a} {b}");
            }
            Op::Link { from, to } => {
                let (a, b) = (NAMES[from], NAMES[to]);
                let s = served(self.clients.fs.hard_link(self.path(a), self.path(b)));
                let n = native(rustix::fs::link(self.native(a), self.native(b)));
                let _ = same!(s, n, "link {a} {b}");
            }
            Op::Symlink { target, name } => {
                let (t, l) = (TARGETS[target], NAMES[name]);
                let s = served(self.clients.fs.symlink(t, self.path(l)));
                let n = native(rustix::fs::symlink(t, self.native(l)));
                let _ = same!(s, n, "symlink {t} {l}");
            }
            Op::ReadLink { name } => {
                let s = served(self.clients.fs.read_link(self.path(NAMES[name])));
                let n = native(
                    rustix::fs::readlink(self.native(NAMES[name]), Vec::new()).map(|c| c.into_bytes()),
                );
                let _ = same!(s, n, "readlink {}", NAMES[name]);
            }
            Op::List { name } => {
                let s = served(self.clients.fs.read_dir(self.path(NAMES[name]))).map(|mut v| {
                    v.sort_by(|a, b| a.name.cmp(&b.name));
                    v.into_iter()
                        .map(|e| (e.name, kind_name(e.kind)))
                        .collect::<Vec<_>>()
                });
                let n = native_list(&self.native(NAMES[name]));
                let _ = same!(s, n, "list {}", NAMES[name]);
            }
            Op::Stat { name, follow } => {
                let p = self.path(NAMES[name]);
                let s = served(if follow {
                    self.clients.fs.stat(p)
                } else {
                    self.clients.fs.symlink_stat(p)
                })
                .map(|st| {
                    (
                        st.mode,
                        st.nlink,
                        if st.mode & 0o170000 == 0o100000 {
                            st.size
                        } else {
                            0
                        },
                    )
                });
                let np = self.native(NAMES[name]);
                let n = native(if follow {
                    rustix::fs::stat(&np)
                } else {
                    rustix::fs::lstat(&np)
                })
                .map(|st| {
                    let size = if st.st_mode & 0o170000 == 0o100000 {
                        st.st_size as u64
                    } else {
                        0
                    };
                    (st.st_mode, st.st_nlink, size)
                });
                let _ = same!(s, n, "stat {} (follow {})", NAMES[name], follow);
            }
            Op::Chmod { name, mode } => {
                let attr = lintel_fs::Attr {
                    mode: Some(mode),
                    ..lintel_fs::Attr::none()
                };
                let s = served(self.clients.fs.set_attr(self.path(NAMES[name]), true, attr));
                let n = native(rustix::fs::chmod(
                    self.native(NAMES[name]),
                    Mode::from_bits_truncate(mode),
                ));
                let _ = same!(s, n, "chmod {} {:o}", NAMES[name], mode);
            }
        }
        Ok(())
    }

    fn open(
        &mut self,
        client: usize,
        name: &str,
        flags: u32,
        mode: u32,
        io: Io,
    ) -> Result<(), TestCaseError> {
        let n = native(rustix::fs::open(
            self.native(name),
            OFlags::from_bits_retain(flags) | OFlags::CLOEXEC,
            Mode::from_bits_truncate(mode),
        ));
        let s: Outcome<Served> = if client == 0 {
            let mut o = OpenOptions::new();
            o.read(flags & 3 != 1)
                .write(flags & 3 != 0)
                .custom_flags(flags & !3)
                .mode(mode);
            match io {
                Io::Auto => o.io_path(IoPath::Auto),
                Io::Copy => o.io_path(IoPath::Copy).splice_min(usize::MAX),
                Io::Spliced => o.io_path(IoPath::Copy).splice_min(1),
                Io::Mapped => o.io_path(IoPath::Mapped),
                Io::Program => o.io_path(IoPath::Auto).mapped_max(8 << 10),
            };
            served(self.clients.fs.open_with(self.path(name), &o)).map(Served::Here)
        } else {
            let peer = &self.clients.peers[client - 1].peer;
            served(peer.open_mode(self.path(name).into_bytes(), flags, mode, io as u8))
                .map(|n| Served::There(client, n))
        };
        match (s, n) {
            (Ok(served), Ok(native)) => {
                TALLY.opened.fetch_add(1, SeqCst);
                if matches!(&served, Served::Here(f) if f.is_mapped()) {
                    TALLY.mapped.fetch_add(1, SeqCst);
                }
                self.open.push(Handle { served, native })
            }
            (Err(s), Err(n)) => prop_assert_eq!(s, n, "open {} {:o}", name, flags),
            (s, n) => {
                let s = s.map(|_| ());
                let n = n.map(|_| ());
                prop_assert_eq!(s, n, "open {} {:o} (client {}, {:?})", name, flags, client, io);
            }
        }
        Ok(())
    }

    /// Why a read of `len` at `at` through open file `i` failed the case:
    /// where the bytes part, and what the served file's host file holds
    /// there (the service's cache, or what it wrote back, tells them apart).
    fn read_mismatch(
        &self,
        i: usize,
        at: u64,
        len: usize,
        s: &Outcome<Vec<u8>>,
        n: &Outcome<Vec<u8>>,
    ) -> TestCaseError {
        let host = self.host_bytes(i, at, s, n);
        TestCaseError::fail(format!(
            "read of {len} at {at}: {}; the host file there: {host}; served {}, native {}",
            parted(s, n),
            brief(s),
            brief(n)
        ))
    }

    /// The bytes of open file `i`'s host file (the served tree's) at the
    /// first range where `s` and `n`, read at `at`, part.
    fn host_bytes(&self, i: usize, at: u64, s: &Outcome<Vec<u8>>, n: &Outcome<Vec<u8>>) -> String {
        let (Ok(s), Ok(n)) = (s, n) else {
            return "-".into();
        };
        let Some(first) = (0..s.len().min(n.len())).find(|&k| s[k] != n[k]) else {
            return "-".into();
        };
        use std::os::fd::AsRawFd;
        let link = format!("/proc/self/fd/{}", self.open[i].native.as_raw_fd());
        let Ok(native_path) = std::fs::read_link(link) else {
            return "(no path)".into();
        };
        let Ok(rest) = native_path.strip_prefix(&self.native_dir) else {
            return format!("(not under the case: {})", native_path.display());
        };
        let host = self.served_dir.join(rest);
        let mut buf = [0u8; 16];
        match std::fs::File::open(&host) {
            Ok(f) => {
                use std::os::unix::fs::FileExt;
                let got = f.read_at(&mut buf, at + first as u64).unwrap_or(0);
                format!(
                    "{:?} of {} bytes",
                    &buf[..got],
                    f.metadata().map_or(0, |m| m.len())
                )
            }
            Err(e) => format!("({e})"),
        }
    }

    fn read(&self, i: usize, at: Option<u64>, len: usize) -> Outcome<Vec<u8>> {
        match &self.open[i].served {
            Served::Here(f) => {
                let mut buf = vec![0u8; len];
                let n = served(match at {
                    Some(at) => f.read_at(&mut buf, at),
                    None => f.read_shared(&mut buf),
                })?;
                buf.truncate(n);
                Ok(buf)
            }
            Served::There(c, n) => {
                let peer = &self.clients.peers[c - 1].peer;
                // The peer reads once; a read of more than a call carries
                // comes back short, so read on to what the kernel gives.
                let mut all = Vec::new();
                loop {
                    let mut out = Vec::new();
                    let want = (len - all.len()).min(1 << 20) as u32;
                    served(match at {
                        Some(at) => peer.read_at(*n, at + all.len() as u64, want, &mut out),
                        None => peer.read(*n, want, &mut out),
                    })?;
                    let got = out.len();
                    all.extend_from_slice(&out);
                    if got == 0 || all.len() >= len {
                        return Ok(all);
                    }
                }
            }
        }
    }

    fn write(&self, i: usize, at: Option<u64>, data: &[u8]) -> Outcome<usize> {
        let mut done = 0;
        while done < data.len() || data.is_empty() {
            let n = match &self.open[i].served {
                Served::Here(f) => served(match at {
                    Some(at) => f.write_at(&data[done..], at + done as u64),
                    None => f.write_shared(&data[done..]),
                }),
                Served::There(c, n) => {
                    let peer = &self.clients.peers[c - 1].peer;
                    let chunk = &data[done..data.len().min(done + (1 << 20))];
                    served(match at {
                        Some(at) => peer.write_at(*n, at + done as u64, chunk),
                        None => peer.write(*n, chunk),
                    })
                    .map(|n| n as usize)
                }
            };
            match n {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(done)
    }

    fn seek(&self, i: usize, whence: u8, delta: i64) -> Outcome<u64> {
        match &self.open[i].served {
            Served::Here(f) => {
                use lintel_fs::Whence;
                served(match whence {
                    0 => f.seek_shared(std::io::SeekFrom::Start(delta as u64)),
                    1 => f.seek_whence(Whence::Current, delta),
                    2 => f.seek_whence(Whence::End, delta),
                    3 => f.seek_whence(Whence::Data, delta),
                    _ => f.seek_whence(Whence::Hole, delta),
                })
            }
            Served::There(c, n) => served(self.clients.peers[c - 1].peer.seek(*n, whence, delta)),
        }
    }

    /// `SEEK_DATA` (`whence` 3) or `SEEK_HOLE` from `at` found a
    /// different offset served (`s`) than native (`n`). Where a file keeps
    /// holes is its file system's business: the service writes a window's
    /// pages back as whole runs, so blocks the native file leaves
    /// unallocated may hold written zeros served (one byte written at 0
    /// and one at 65536 through a window: the write-back writes 0..65537,
    /// and `SEEK_HOLE` from 0 finds 65537 served, 4096 native). What Linux promises
    /// must hold all the same: an offset in `[at, size]`, only zeros
    /// skipped to reach data, and a hole that reads as zeros; where one
    /// side finds no data, the other may find it only in zeros (ext4
    /// counts preallocated blocks as data once their pages are in its
    /// page cache, and the service's reads ahead put them there). The
    /// native offset then follows the served one.
    fn holes_elsewhere(
        &self,
        i: usize,
        whence: u8,
        at: i64,
        s: Outcome<u64>,
        n: Outcome<u64>,
        before: Outcome<u64>,
    ) -> Result<(), TestCaseError> {
        // No data from `at` to the end served, some native: Linux allows
        // it where the native bytes there are all zeros (preallocated or
        // hole: whether a file system counts them as data depends on its
        // page cache). The native offset goes back where it was.
        if let (3, Err(e), Ok(_), Ok(was)) = (whence, s, n, before) {
            if e == Errno::NXIO.raw_os_error() {
                let fd = &self.open[i].native;
                let size = self.native_size(i)?;
                let from = (at.max(0) as u64).min(size);
                let buf = self.native_bytes(i, from, size)?;
                prop_assert!(
                    buf.iter().all(|&b| b == 0),
                    "seek 3 from {at}: no data served, but [{from}, {size}) holds data"
                );
                TALLY.holes_elsewhere.fetch_add(1, SeqCst);
                let moved = native(rustix::fs::seek(fd, rustix::fs::SeekFrom::Start(was)));
                let _ = same!(moved, Ok(was), "moving the native offset back");
                return Ok(());
            }
        }
        // Data served where there is none native: Linux allows it where
        // the bytes are zeros, and ext4 itself counts preallocated blocks
        // as data once their pages are in its page cache (which the
        // service's reads ahead and window fills put there, and a native
        // `pread` of them would too).
        let native_none = whence == 3 && n == Err(Errno::NXIO.raw_os_error());
        let to = match (s, n) {
            (Ok(to), Ok(_)) => to,
            (Ok(to), Err(_)) if native_none => to,
            _ => {
                let _ = same!(s, n, "seek {whence} {at}");
                return Ok(());
            }
        };
        let fd = &self.open[i].native;
        let size = self.native_size(i)?;
        let at = at as u64;
        prop_assert!(
            at <= to && to <= size && !(native_none && to == size),
            "seek {whence} from {at} to {to}: not in [{at}, {size}]"
        );
        // Only zeros skipped (all the rest, where there is no data native),
        // or a hole of zeros.
        let (lo, hi) = match whence {
            3 if native_none => (at, size),
            3 => (at, to),
            _ => (to, (to + 1).min(size)),
        };
        let buf = self.native_bytes(i, lo, hi)?;
        prop_assert!(
            buf.iter().all(|&b| b == 0),
            "seek {whence} from {at} to {to}: [{lo}, {hi}) holds data"
        );
        TALLY.holes_elsewhere.fetch_add(1, SeqCst);
        let moved = native(rustix::fs::seek(fd, rustix::fs::SeekFrom::Start(to)));
        let _ = same!(moved, Ok(to), "moving the native offset along");
        Ok(())
    }

    /// The size of open file `i`'s native file.
    fn native_size(&self, i: usize) -> Result<u64, TestCaseError> {
        let st = rustix::fs::fstat(&self.open[i].native)
            .map_err(|e| TestCaseError::fail(format!("fstat: {e}")))?;
        Ok(st.st_size as u64)
    }

    /// Bytes `[lo, hi)` of open file `i`'s native file, through a reading
    /// description of it (the one open may be write-only).
    fn native_bytes(&self, i: usize, lo: u64, hi: u64) -> Result<Vec<u8>, TestCaseError> {
        use std::os::fd::AsRawFd;
        let reader = rustix::fs::open(
            format!("/proc/self/fd/{}", self.open[i].native.as_raw_fd()).as_str(),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| TestCaseError::fail(format!("reopening to read: {e}")))?;
        let mut buf = vec![0u8; hi.saturating_sub(lo) as usize];
        let k = native(rustix::io::pread(&reader, &mut buf, lo));
        let _ = same!(k, Ok(buf.len()), "reading [{lo}, {hi})");
        Ok(buf)
    }

    /// After an operation on open file `i`: its offset and its size match.
    fn after(&self, i: usize) -> Result<(), TestCaseError> {
        TALLY.on_open_files.fetch_add(1, SeqCst);
        let s = self.seek(i, 1, 0);
        let n = native(rustix::fs::seek(
            &self.open[i].native,
            rustix::fs::SeekFrom::Current(0),
        ));
        let _ = same!(s, n, "the offset after it");
        let s = match &self.open[i].served {
            Served::Here(f) => served(f.metadata()),
            Served::There(c, n) => served(self.clients.peers[c - 1].peer.stat(*n)),
        }
        .map(|st| (st.size, st.mode));
        let n = native(rustix::fs::fstat(&self.open[i].native)).map(|st| (st.st_size as u64, st.st_mode));
        let _ = same!(s, n, "the size and mode after it");
        Ok(())
    }

    /// The whole file `name` through the service and on the host.
    fn check(&self, name: &str) -> Result<(), TestCaseError> {
        let s = served(self.clients.fs.read(self.path(name)));
        let n = io_native(std::fs::read(self.native(name)));
        if let (Ok(s), Ok(n)) = (&s, &n) {
            prop_assert!(
                s == n,
                "{} differs: {} bytes served, {} native, first difference at {:?}",
                name,
                s.len(),
                n.len(),
                s.iter().zip(n.iter()).position(|(a, b)| a != b)
            );
        } else {
            prop_assert_eq!(s.map(|_| ()), n.map(|_| ()), "reading {} whole", name);
        }
        Ok(())
    }

    /// Close everything, then compare the two trees on the host.
    fn finish(&mut self) -> Result<(), TestCaseError> {
        for h in self.open.drain(..) {
            let s = match h.served {
                Served::Here(f) => served(f.close()),
                Served::There(c, n) => served(self.clients.peers[c - 1].peer.close(n)),
            };
            prop_assert_eq!(s, Ok(()), "close at the end");
        }
        let s = tree(&self.served_dir);
        let n = tree(&self.native_dir);
        prop_assert_eq!(s, n, "the trees on the host once every file is closed");
        Ok(())
    }
}

impl Drop for World<'_> {
    fn drop(&mut self) {
        for h in self.open.drain(..) {
            match h.served {
                Served::Here(f) => drop(f),
                Served::There(c, n) => {
                    let _ = self.clients.peers[c - 1].peer.close(n);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.served_dir);
        let _ = std::fs::remove_dir_all(&self.native_dir);
    }
}

fn write_all(fd: &OwnedFd, at: Option<u64>, data: &[u8]) -> Result<usize, Errno> {
    let mut done = 0;
    loop {
        let r = match at {
            Some(at) => rustix::io::pwrite(fd, &data[done..], at + done as u64),
            None => rustix::io::write(fd, &data[done..]),
        };
        match r {
            Ok(n) => done += n,
            Err(e) if done == 0 => return Err(e),
            Err(_) => return Ok(done),
        }
        if done >= data.len() {
            return Ok(done);
        }
    }
}

fn kind_name(k: lintel_fs::Kind) -> &'static str {
    match k {
        lintel_fs::Kind::File => "file",
        lintel_fs::Kind::Dir => "dir",
        lintel_fs::Kind::Symlink => "symlink",
        lintel_fs::Kind::Other => "other",
    }
}

fn native_list(dir: &Path) -> Outcome<Vec<(Vec<u8>, &'static str)>> {
    use std::os::unix::ffi::OsStrExt;
    let mut v: Vec<_> = io_native(std::fs::read_dir(dir))?
        .map(|e| {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            let k = if t.is_symlink() {
                "symlink"
            } else if t.is_dir() {
                "dir"
            } else if t.is_file() {
                "file"
            } else {
                "other"
            };
            (e.file_name().as_bytes().to_vec(), k)
        })
        .collect();
    v.sort();
    Ok(v)
}

/// Everything a tree holds: each path with its kind, mode, link count and
/// contents (a symlink's target).
fn tree(root: &Path) -> Vec<(String, u32, u64, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let mut names: Vec<_> = std::fs::read_dir(root.join(&rel))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for name in names {
            let p = rel.join(&name);
            let m = std::fs::symlink_metadata(root.join(&p)).unwrap();
            let body = if m.is_symlink() {
                std::fs::read_link(root.join(&p))
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else if m.is_file() {
                std::fs::read(root.join(&p)).unwrap()
            } else {
                todo.push(p.clone());
                Vec::new()
            };
            out.push((p.display().to_string(), m.mode(), m.nlink(), body));
        }
    }
    out
}

// ---- running them ----

/// Run `cases` sequences from `seed` against one export.
fn run(clients: &Clients, served_root: &Path, native_root: &Path, seed: [u8; 32], cases: u32) {
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 4000,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
    let result = runner.run(&ops(), |ops| case(clients, served_root, native_root, &ops));
    if let Err(e) = result {
        panic!("seed {}: {e}", hex(&seed));
    }
}

/// Run one sequence in a fresh directory of each tree.
fn case(clients: &Clients, served_root: &Path, native_root: &Path, ops: &[Op]) -> Result<(), TestCaseError> {
    static CASE: AtomicU64 = AtomicU64::new(0);
    let n = CASE.fetch_add(1, SeqCst);
    let rel = format!("case{n}");
    let served_dir = served_root.join(&rel);
    let native_dir = native_root.join(&rel);
    std::fs::create_dir(&served_dir).unwrap();
    std::fs::create_dir(&native_dir).unwrap();
    let mut w = World {
        clients,
        rel,
        served_dir,
        native_dir,
        open: Vec::new(),
    };
    TALLY.sequences.fetch_add(1, SeqCst);
    for (i, op) in ops.iter().enumerate() {
        TALLY.steps.fetch_add(1, SeqCst);
        w.step(op)
            .map_err(|e| TestCaseError::fail(format!("step {i} ({op:?}): {e}")))?;
    }
    w.finish()
}

fn hex(seed: &[u8; 32]) -> String {
    seed.iter().map(|b| format!("{b:02x}")).collect()
}

fn seeds() -> Vec<[u8; 32]> {
    if let Ok(s) = std::env::var("LINTEL_FS_DIFF_SEED") {
        let mut seed = [0u8; 32];
        for (i, b) in seed.iter_mut().enumerate() {
            *b = u8::from_str_radix(s.get(2 * i..2 * i + 2).unwrap_or("00"), 16).expect("a hex seed");
        }
        return vec![seed];
    }
    let mut fresh = [0u8; 32];
    rustix::rand::getrandom(&mut fresh, rustix::rand::GetRandomFlags::empty()).unwrap();
    let fixed = |k: u8| {
        let mut s = [0u8; 32];
        s[0] = k;
        s
    };
    vec![fixed(1), fixed(2), fresh]
}

fn cases() -> u32 {
    std::env::var("LINTEL_FS_DIFF_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150)
}

fn against_linux(fs: Fs, served_root: &Path) {
    let native_root = tempfile::tempdir().unwrap();
    let peers = (0..2).map(|_| FsClientPeer::start(fs.door())).collect();
    let clients = Clients { fs, peers };
    for seed in seeds() {
        eprintln!("fs_differential: seed {}", hex(&seed));
        run(&clients, served_root, native_root.path(), seed, cases());
    }
    let t = |c: &AtomicU64| c.load(SeqCst);
    eprintln!(
        "fs_differential: {} sequences, {} steps; {} files opened ({} mapped here), {} operations on them, \
         {} bytes written, {} errors matched, {} fallocates that did something, \
         {} SEEK_DATA/SEEK_HOLE answers elsewhere (within Linux's promises)",
        t(&TALLY.sequences),
        t(&TALLY.steps),
        t(&TALLY.opened),
        t(&TALLY.mapped),
        t(&TALLY.on_open_files),
        t(&TALLY.bytes_written),
        t(&TALLY.errors),
        t(&TALLY.allocations),
        t(&TALLY.holes_elsewhere),
    );
}

#[test]
fn served_by_this_process_the_export_answers_as_linux() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::from_door(lintel_fs::Service::new(dir.path(), false).unwrap().into_door());
    against_linux(fs, dir.path());
}

#[test]
fn served_by_another_process_the_export_answers_as_linux() {
    let dir = tempfile::tempdir().unwrap();
    let svc = FsService::start(dir.path(), false);
    against_linux(svc.fs.clone(), dir.path());
}

/// Minimal sequences the generator found, kept: each runs in both
/// placements.
mod regressions {
    use super::Io::*;
    use super::Op::*;
    use super::*;

    fn replay(ops: &[Op]) {
        let dir = tempfile::tempdir().unwrap();
        let fs = Fs::from_door(lintel_fs::Service::new(dir.path(), false).unwrap().into_door());
        let native_root = tempfile::tempdir().unwrap();
        let peers = (0..2).map(|_| FsClientPeer::start(fs.door())).collect();
        let clients = Clients { fs, peers };
        replay_on(&clients, dir.path(), native_root.path(), ops);
        let dir = tempfile::tempdir().unwrap();
        let svc = FsService::start(dir.path(), false);
        let peers = (0..2).map(|_| FsClientPeer::start(svc.fs.door())).collect();
        let clients = Clients {
            fs: svc.fs.clone(),
            peers,
        };
        replay_on(&clients, dir.path(), native_root.path(), ops);
    }

    fn replay_on(clients: &Clients, served_root: &Path, native_root: &Path, ops: &[Op]) {
        if let Err(e) = case(clients, served_root, native_root, ops) {
            panic!("{e}");
        }
    }

    /// A directory's offset at its end is near the largest offset; a
    /// `readv` from there whose buffers together pass it is `EINVAL`
    /// (Linux checks the whole length before it finds a directory), where
    /// a read of the first buffer alone is `EISDIR`.
    #[test]
    fn a_readv_of_a_directory_past_the_largest_offset_is_einval() {
        replay(&[
            Mkdir { name: 1, mode: 0o644 },
            Open {
                client: 0,
                name: 1,
                flags: 0,
                mode: 0o644,
                io: Auto,
            },
            Seek {
                h: 0,
                whence: 2,
                delta: -179,
            },
            ReadV {
                h: 0,
                lens: vec![1, 179],
            },
            ReadV {
                h: 0,
                lens: vec![1, 178],
            },
        ]);
    }

    /// Preallocated zeros past a read the served side read ahead over:
    /// ext4 counts them as data once they are in its page cache, so
    /// `SEEK_DATA` finds them served and `ENXIO` native. Linux allows
    /// either (they read as zeros); the test takes both.
    #[test]
    fn data_sought_in_zeros_read_ahead_is_allowed() {
        replay(&[
            Open {
                client: 0,
                name: 0,
                flags: 2 | O_CREAT,
                mode: 0o644,
                io: Spliced,
            },
            Allocate {
                h: 0,
                mode: 16,
                at: 524_288,
                len: 4096,
            },
            Write {
                h: 0,
                len: 1,
                seed: 0,
            },
            Read { h: 0, len: 131_072 },
            Seek {
                h: 0,
                whence: 3,
                delta: 4096,
            },
            Read { h: 0, len: 8192 },
        ]);
    }

    /// A program's reads of 8 to 64 KiB take their bytes from what the
    /// handle read ahead of the host file: each read here must still see
    /// every write made before it, by another client (whose write takes
    /// the token back), by the handle itself through its window, and by
    /// the handle through a call (a write longer than its window takes).
    #[test]
    fn reads_taken_from_what_was_read_ahead_see_every_write_before_them() {
        let program = |client| Open {
            client,
            name: 0,
            flags: 2 | O_CREAT,
            mode: 0o644,
            io: Program,
        };
        let read = || Read { h: 0, len: 16_384 };
        for writer in [1, 2] {
            replay(&[
                program(0),
                Open {
                    client: writer,
                    name: 0,
                    flags: 2,
                    mode: 0,
                    io: Auto,
                },
                WriteAt {
                    h: 1,
                    at: 0,
                    len: 600_000,
                    seed: 1,
                },
                // Past the calls before the window, then read ahead.
                Read { h: 0, len: 65_536 },
                read(),
                read(),
                // Another client writes what the next read reads.
                WriteAt {
                    h: 1,
                    at: 98_304,
                    len: 4096,
                    seed: 2,
                },
                read(),
                read(),
                // The handle writes through its window, ahead of its reads,
                // and syncs (keeping its token, now clean).
                WriteAt {
                    h: 0,
                    at: 135_000,
                    len: 100,
                    seed: 3,
                },
                Sync { h: 0 },
                read(),
                read(),
                // And through a call.
                WriteAt {
                    h: 0,
                    at: 170_000,
                    len: 20_000,
                    seed: 4,
                },
                read(),
                read(),
                read(),
            ]);
        }
    }

    /// A read longer than a program's window reads (8 KiB) of a new
    /// empty file opened to read, write and append, as `lintel-run` opens
    /// a program's files: nothing, where it was `EBADF`. Found by the
    /// first seed once the generator opened files so.
    #[test]
    fn a_long_read_of_a_new_appending_file_as_a_program_opens_it_is_empty() {
        replay(&[
            Open {
                client: 0,
                name: 0,
                flags: 2 | O_CREAT | O_APPEND,
                mode: 0o644,
                io: Program,
            },
            Read { h: 0, len: 8193 },
        ]);
    }

    /// A read of nothing through a handle's own descriptor of the host
    /// file (taken at its first write at an offset), open for writing
    /// only, is Linux's `EBADF`: it returned nothing, reading no host
    /// file. Found by a random seed.
    #[test]
    fn a_read_of_nothing_through_a_write_only_handle_is_ebadf() {
        replay(&[
            Open {
                client: 0,
                name: 0,
                flags: 1 | O_CREAT,
                mode: 0o644,
                io: Auto,
            },
            WriteAt {
                h: 0,
                at: 0,
                len: 0,
                seed: 0,
            },
            ReadAt { h: 0, at: 0, len: 0 },
        ]);
    }

    /// A directory sought to its end (ext4: the largest offset) and then
    /// removed still says where it is: the service set the host's offset
    /// again before each seek, which a removed directory refuses past a
    /// regular file's limit (`EINVAL`). Found by a random seed.
    #[test]
    fn a_removed_directory_at_its_end_says_where_it_is() {
        replay(&[
            Mkdir { name: 5, mode: 420 },
            Open {
                client: 0,
                name: 5,
                flags: 0,
                mode: 420,
                io: Auto,
            },
            Seek {
                h: 0,
                whence: 2,
                delta: 0,
            },
            Rmdir { name: 5 },
            Read { h: 0, len: 0 },
        ]);
    }

    /// An `O_CREAT|O_TRUNC` open of a missing name is made with `O_EXCL`
    /// (known new: nothing to truncate); through a dangling symlink that
    /// is `EEXIST`, and the open as asked then makes the link's target,
    /// as Linux does. `O_CREAT|O_EXCL` itself refuses the link.
    #[test]
    fn a_new_file_made_through_a_dangling_symlink_is_its_target() {
        for io in [Auto, Copy] {
            replay(&[
                Symlink { target: 4, name: 5 },
                Open {
                    client: 0,
                    name: 5,
                    flags: 2 | O_CREAT | O_EXCL,
                    mode: 0o644,
                    io,
                },
                Open {
                    client: 0,
                    name: 5,
                    flags: 2 | O_CREAT | O_TRUNC,
                    mode: 0o640,
                    io,
                },
                WriteAt {
                    h: 0,
                    at: 3,
                    len: 10,
                    seed: 7,
                },
                Stat {
                    name: 5,
                    follow: true,
                },
                Stat {
                    name: 5,
                    follow: false,
                },
                Open {
                    client: 0,
                    name: 0,
                    flags: 1 | O_CREAT | O_TRUNC,
                    mode: 0o600,
                    io,
                },
                Write {
                    h: 1,
                    len: 5,
                    seed: 3,
                },
                Stat {
                    name: 0,
                    follow: true,
                },
            ]);
        }
    }

    /// `O_RDONLY|O_APPEND`: an empty write is `EBADF` (the file once
    /// opened for writing too, as `append` implies in `OpenOptions`).
    #[test]
    fn a_read_only_append_open_refuses_even_an_empty_write() {
        replay(&[
            Open {
                client: 0,
                name: 5,
                flags: 64,
                mode: 0o644,
                io: Auto,
            },
            Open {
                client: 0,
                name: 5,
                flags: 1024,
                mode: 0o644,
                io: Auto,
            },
            Write {
                h: 1,
                len: 0,
                seed: 0,
            },
        ]);
    }

    /// A hole punched and a range zeroed in pages a window has read
    /// read as zeros through the window afterwards (the service zeroes
    /// its cache's resident pages there), and a range collapsed or
    /// inserted moves what the window shows (the service drops its cache).
    #[test]
    fn a_punched_hole_reads_as_zeros_through_a_window() {
        for (mode, at, len) in [
            (3, 100, 9000),
            (0x10, 100, 9000),
            (0x11, 100, 9000),
            (0x08, 4096, 8192),
            (0x20, 4096, 8192),
        ] {
            replay(&[
                Open {
                    client: 0,
                    name: 0,
                    flags: 0o102,
                    mode: 0o644,
                    io: Mapped,
                },
                WriteAt {
                    h: 0,
                    at: 0,
                    len: 20_000,
                    seed: 7,
                },
                ReadAt {
                    h: 0,
                    at: 0,
                    len: 20_000,
                },
                Allocate { h: 0, mode, at, len },
                ReadAt {
                    h: 0,
                    at: 0,
                    len: 20_000,
                },
            ]);
        }
    }

    /// A zeroed range is unwritten on the host, which `SEEK_DATA` reports
    /// as a hole; filling a window read it into the host's page cache,
    /// and from then on the kernel reported data there.
    #[test]
    fn filling_a_window_leaves_the_hosts_holes_holes() {
        replay(&[
            Open {
                client: 0,
                name: 0,
                flags: 0o102,
                mode: 0o644,
                io: Mapped,
            },
            Allocate {
                h: 0,
                mode: 0x10,
                at: 0,
                len: 196_608,
            },
            WriteAt {
                h: 0,
                at: 0,
                len: 1,
                seed: 0,
            },
            Seek {
                h: 0,
                whence: 3,
                delta: 65_536,
            },
        ]);
    }

    /// `O_RDONLY|O_TRUNC` truncates, as on Linux (it was refused).
    #[test]
    fn a_read_only_open_truncates() {
        replay(&[
            Open {
                client: 1,
                name: 0,
                flags: 0o101,
                mode: 0o644,
                io: Mapped,
            },
            Write {
                h: 0,
                len: 100,
                seed: 1,
            },
            Open {
                client: 0,
                name: 0,
                flags: 0o1000,
                mode: 0o644,
                io: Auto,
            },
            Check { name: 0 },
            Read { h: 1, len: 10 },
        ]);
    }

    /// A directory's end is where its file system puts it.
    #[test]
    fn a_directory_seeks_as_the_kernel_says() {
        replay(&[
            Mkdir { name: 0, mode: 0o644 },
            Open {
                client: 0,
                name: 0,
                flags: 0,
                mode: 0o644,
                io: Auto,
            },
            Seek {
                h: 0,
                whence: 2,
                delta: 0,
            },
        ]);
    }

    /// A missing source is reported before a target directory that
    /// loops.
    #[test]
    fn link_reports_the_source_first() {
        replay(&[Symlink { target: 1, name: 2 }, Link { from: 0, to: 3 }]);
    }

    /// An empty append leaves the offset where it was.
    #[test]
    fn an_empty_append_moves_nothing() {
        replay(&[
            Open {
                client: 0,
                name: 0,
                flags: 0o2101,
                mode: 0o644,
                io: Copy,
            },
            WriteAt {
                h: 0,
                at: 0,
                len: 1,
                seed: 0,
            },
            WriteV {
                h: 0,
                lens: vec![],
                seed: 0,
            },
            Write {
                h: 0,
                len: 0,
                seed: 0,
            },
            Open {
                client: 0,
                name: 0,
                flags: 0o2102,
                mode: 0o644,
                io: Mapped,
            },
            WriteAt {
                h: 1,
                at: 0,
                len: 1,
                seed: 0,
            },
            WriteV {
                h: 1,
                lens: vec![],
                seed: 0,
            },
            Write {
                h: 1,
                len: 0,
                seed: 0,
            },
        ]);
    }

    /// `readv` of nothing on a directory is 0 (`read` is `EISDIR`).
    #[test]
    fn an_empty_readv_of_a_directory_reads_nothing() {
        replay(&[
            Mkdir { name: 5, mode: 0o644 },
            Open {
                client: 0,
                name: 5,
                flags: 0,
                mode: 0o644,
                io: Auto,
            },
            ReadV { h: 0, lens: vec![] },
            ReadV {
                h: 0,
                lens: vec![0, 0],
            },
            Read { h: 0, len: 0 },
        ]);
    }

    /// An empty write past the end through a window does not extend the
    /// file.
    #[test]
    fn an_empty_write_past_the_end_extends_nothing() {
        replay(&[
            Open {
                client: 0,
                name: 0,
                flags: 0o102,
                mode: 0o644,
                io: Mapped,
            },
            SetLen { h: 0, len: 2068 },
            Read { h: 0, len: 2068 },
            Seek {
                h: 0,
                whence: 0,
                delta: 2069,
            },
            WriteV {
                h: 0,
                lens: vec![],
                seed: 0,
            },
            WriteAt {
                h: 0,
                at: 5000,
                len: 0,
                seed: 0,
            },
        ]);
    }

    /// `O_TRUNC` on a directory is `EISDIR`, even read-only.
    #[test]
    fn truncating_a_directory_is_eisdir() {
        replay(&[
            Mkdir { name: 5, mode: 0o644 },
            Open {
                client: 0,
                name: 5,
                flags: 0o1000,
                mode: 0o644,
                io: Auto,
            },
        ]);
    }
}
