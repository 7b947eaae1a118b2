//! Suite `fs`: the file service against Linux's own system calls on the same file in the same
//! run (Dean & Armand, Tables 5-4, 5-5 and 5-9). The service runs in a child domain; the file
//! (256 MiB, 32 MiB with `--quick`) lives in the temporary directory and is read once first, so
//! it is in the host's page cache. Each case for three ways in:
//!
//! - `native`: `std::fs::File` (a `read`/`write`/`lseek` system call per operation);
//! - `copy`: a `lintel_fs::File` on the copy path (a door call per operation, the bytes in the
//!   call);
//! - `mapped`: a `lintel_fs::File` on the mapped path (64 KiB windows, the token in the shared
//!   page; a call only to move the window).
//!
//! Cases:
//! - `seq_read_4k_*`, `seq_write_4k_*`: sequential 4 KiB reads (writes) through the whole file,
//!   wrapping at its end, after one pass that warms every cache (`mb_per_s` beside the time);
//!   `seq_read_4k_mapped_first`: the mapped reads of that first pass, windows filled from the
//!   host and mapped as they come.
//! - `read1_*`, `write1_*`: an `lseek` to a scattered offset in the file's first 64 KiB, then
//!   one byte read (written), as Table 5-5 measured; `lseek_*`: the `lseek` alone.
//! - `window_move_mapped`: Table 5-9's mapping operation: a 4 KiB read, then an `lseek` of
//!   61440 bytes, so each read needs a new window (a call that maps its 64 KiB: pages already
//!   in the cache, not yet mapped by this file); `window_move_native`: the same reads natively.
//! - `fault_64k_mapped`: the first touch of a 64 KiB range of a view (`File::view`) of a file
//!   the cache has never seen, range after range: the service's pager reads the range from the
//!   host and maps it (one userfaultfd round trip), and maps the next ones ahead while it has
//!   no fault to serve (`Service::with_map_ahead`), so a touch may find its range mapped or
//!   being filled; `fault_64k_native`: the first touch of a 64 KiB range of an `mmap` of a
//!   host file in the page cache (the kernel maps it, fault-around included).

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, ensure};
use lintel_fs::{Fs, IoPath, OpenOptions};

use crate::harness::{
    CaseResult, ChildDomain, Config, Report, Stats, measure_batched, measure_single, ticks, ticks_to_ns,
};

pub const SUITE: &str = "fs";
/// The child role serving the export, registered in `main`.
pub const ROLE: &str = "fs";

const PAGE: usize = 4096;

/// The child: export the directory it is given.
pub fn child(args: &[String]) -> anyhow::Result<()> {
    let root = args.first().context("fs child: the directory to export")?;
    let door = lintel_fs::Service::new(root, false)
        .with_context(|| format!("exporting {root}"))?
        .into_door();
    crate::harness::serve_forever(door)
}

/// A temporary directory, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn make_file(path: &Path, size: usize) -> anyhow::Result<()> {
    let mut f = std::fs::File::create(path)?;
    let chunk: Vec<u8> = (0..1 << 20).map(|i: usize| (i * 131 + 7) as u8).collect();
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len());
        f.write_all(&chunk[..n])?;
        left -= n;
    }
    // Read it back once: the host's page cache holds it.
    let mut sink = vec![0u8; 1 << 20];
    let mut r = std::fs::File::open(path)?;
    while r.read(&mut sink)? > 0 {}
    Ok(())
}

/// One of the three ways to a file, for the cases that do the same thing on each.
trait Way {
    fn read4k(&mut self, buf: &mut [u8]) -> std::io::Result<usize>;
    fn write4k(&mut self, buf: &[u8]) -> std::io::Result<usize>;
    fn seek_to(&mut self, at: u64) -> std::io::Result<u64>;
}

impl Way for std::fs::File {
    fn read4k(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.read(buf)
    }
    fn write4k(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write(buf)
    }
    fn seek_to(&mut self, at: u64) -> std::io::Result<u64> {
        self.seek(SeekFrom::Start(at))
    }
}

impl Way for lintel_fs::File {
    fn read4k(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        Ok(self.read_shared(buf)?)
    }
    fn write4k(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(self.write_shared(buf)?)
    }
    fn seek_to(&mut self, at: u64) -> std::io::Result<u64> {
        Ok(self.seek_shared(SeekFrom::Start(at))?)
    }
}

/// Sequential 4 KiB reads (or writes), wrapping at the end of the file.
fn sequential(way: &mut dyn Way, size: u64, ops: u64, write: bool) -> anyhow::Result<Stats> {
    let mut buf = vec![7u8; PAGE];
    let mut at = 0u64;
    let mut err = None;
    let mut step = |way: &mut dyn Way| {
        if at >= size {
            at = 0;
            if let Err(e) = way.seek_to(0) {
                err = Some(e);
            }
        }
        let r = if write {
            way.write4k(&buf)
        } else {
            way.read4k(&mut buf)
        };
        match r {
            Ok(n) if n == PAGE => at += PAGE as u64,
            Ok(n) => err = Some(std::io::Error::other(format!("short: {n} bytes at {at}"))),
            Err(e) => err = Some(e),
        }
    };
    way.seek_to(0)?;
    // One pass to warm every cache on the way.
    for _ in 0..size / PAGE as u64 {
        step(way);
    }
    let stats = measure_batched(ops, 64, || step(way));
    if let Some(e) = err {
        return Err(e).context("a sequential 4 KiB operation failed");
    }
    Ok(stats)
}

/// Scattered offsets within `span` bytes (an LCG).
fn scattered(i: u64, span: u64) -> u64 {
    (i.wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407)
        >> 11)
        % span
}

/// Where the one-byte cases seek: within the file's first 64 KiB, as Table 5-5 measured the
/// system-call path, not the cache (one window on the mapped path).
const ONE_BYTE_SPAN: u64 = 64 * 1024;

/// `lseek` then one byte read (or written), or the `lseek` alone.
fn one_byte(way: &mut dyn Way, ops: u64, what: u8) -> anyhow::Result<Stats> {
    let mut b = [0u8; 1];
    let mut i = 0u64;
    let mut failed = false;
    let stats = measure_batched(ops, 100, || {
        i += 1;
        let at = scattered(i, ONE_BYTE_SPAN);
        failed |= way.seek_to(at).is_err();
        failed |= match what {
            0 => way.read4k(&mut b).map_or(true, |n| n != 1),
            1 => way.write4k(&b).map_or(true, |n| n != 1),
            _ => false,
        };
    });
    ensure!(!failed, "a one-byte operation failed");
    Ok(stats)
}

fn mb_per_s(bytes: usize, s: &Stats) -> f64 {
    bytes as f64 / s.median_ns * 1e3
}

pub fn run(cfg: &Config, report: &mut Report) -> anyhow::Result<()> {
    let size: usize = if cfg.quick { 32 << 20 } else { 256 << 20 };
    let dir = Scratch(std::env::temp_dir().join(format!("lintel-bench-fs-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0)?;
    let path = dir.0.join("data");
    make_file(&path, size)?;
    let child = ChildDomain::spawn_with(cfg, ROLE, &[dir.0.display().to_string()])?;
    let fs = Fs::from_door(child.door());
    let open = |io: IoPath| -> anyhow::Result<lintel_fs::File> {
        Ok(fs.open_with("data", OpenOptions::new().read(true).write(true).io_path(io))?)
    };
    let mut native = std::fs::OpenOptions::new().read(true).write(true).open(&path)?;
    let mut copy = open(IoPath::Copy)?;
    let mut mapped = open(IoPath::Auto)?;
    ensure!(
        mapped.is_mapped(),
        "the mapped file did not map (no userfaultfd here?)"
    );
    let size64 = size as u64;
    let seq_ops = cfg.iters(size64 / PAGE as u64).max(64);

    // The first mapped pass, cold: windows filled from the host as they come.
    let first = open(IoPath::Auto)?;
    let mut buf = vec![0u8; PAGE];
    let first_ops = (size / PAGE).min(16 * 1024);
    let t0 = ticks();
    for _ in 0..first_ops {
        ensure!(first.read_shared(&mut buf)? == PAGE, "short first-pass read");
    }
    let first_ns = ticks_to_ns(ticks().wrapping_sub(t0)) / first_ops as f64;
    drop(first);

    for (write, name) in [(false, "seq_read_4k"), (true, "seq_write_4k")] {
        let n = sequential(&mut native, size64, seq_ops, write)?;
        let c = sequential(&mut copy, size64, seq_ops, write)?;
        let m = sequential(&mut mapped, size64, seq_ops, write)?;
        let native_case = format!("{name}_native");
        report.push(CaseResult::new(SUITE, &native_case, &n).with_field("mb_per_s", mb_per_s(PAGE, &n)));
        report.push(
            CaseResult::new(SUITE, &format!("{name}_copy"), &c)
                .compare_to(SUITE, &native_case)
                .with_field("mb_per_s", mb_per_s(PAGE, &c))
                .with_note(format!(
                    "{:.2}× native's time per 4 KiB{}",
                    c.median_ns / n.median_ns,
                    if write { "" } else { " (target ≤ 2)" }
                )),
        );
        report.push(
            CaseResult::new(SUITE, &format!("{name}_mapped"), &m)
                .compare_to(SUITE, &native_case)
                .with_field("mb_per_s", mb_per_s(PAGE, &m))
                .with_note(format!(
                    "{:.2}× native's throughput{}",
                    n.median_ns / m.median_ns,
                    if write { "" } else { " (target ≥ 1.0)" }
                )),
        );
    }
    let first_stats = measure_single(&[first_ns]);
    report.push(
        CaseResult::new(SUITE, "seq_read_4k_mapped_first", &first_stats)
            .compare_to(SUITE, "seq_read_4k_native")
            .with_field("mb_per_s", mb_per_s(PAGE, &first_stats))
            .with_note(format!(
                "mean over the first {first_ops} reads of a new open: each 64 KiB window filled from the host and mapped"
            )),
    );

    let one_ops = cfg.iters(200_000);
    for (what, name) in [(0u8, "read1"), (1, "write1"), (2, "lseek")] {
        let n = one_byte(&mut native, one_ops, what)?;
        let c = one_byte(&mut copy, one_ops / 4, what)?;
        let m = one_byte(&mut mapped, one_ops, what)?;
        let native_case = format!("{name}_native");
        report.push(CaseResult::new(SUITE, &native_case, &n));
        report.push(CaseResult::new(SUITE, &format!("{name}_copy"), &c).compare_to(SUITE, &native_case));
        report.push(
            CaseResult::new(SUITE, &format!("{name}_mapped"), &m)
                .compare_to(SUITE, &native_case)
                .with_field("speedup", n.median_ns / m.median_ns)
                .with_note(format!(
                    "{:.1}× faster than native{}",
                    n.median_ns / m.median_ns,
                    if what == 0 { " (target ≥ 5)" } else { "" }
                )),
        );
    }

    // Window moves: a 4 KiB read, then 61440 bytes on, in a new open (its windows not mapped).
    let moves = (size / (64 << 10)).min(cfg.iters(4096) as usize).max(16);
    let w = open(IoPath::Auto)?;
    let mut samples = Vec::with_capacity(moves);
    let mut native_samples = Vec::with_capacity(moves);
    for i in 0..moves {
        let at = (i * (64 << 10)) as u64;
        let t0 = ticks();
        w.seek_shared(SeekFrom::Start(at))?;
        ensure!(w.read_shared(&mut buf)? == PAGE, "short window read");
        samples.push(ticks_to_ns(ticks().wrapping_sub(t0)));
        let t0 = ticks();
        native.seek(SeekFrom::Start(at))?;
        native.read_exact(&mut buf)?;
        native_samples.push(ticks_to_ns(ticks().wrapping_sub(t0)));
    }
    drop(w);
    report.push(CaseResult::new(
        SUITE,
        "window_move_native",
        &measure_single(&native_samples),
    ));
    report.push(
        CaseResult::new(SUITE, "window_move_mapped", &measure_single(&samples))
            .compare_to(SUITE, "window_move_native")
            .with_note("lseek + 4 KiB read, each in a new 64 KiB window (one call that maps it)"),
    );

    // Pager faults: a file the cache has never seen, touched once per 64 KiB.
    let fault_size = (size / 4).max(4 << 20);
    let fpath = dir.0.join("faults");
    make_file(&fpath, fault_size)?;
    let ranges = fault_size / (64 << 10);
    let f = fs.open("faults")?;
    let view = f.view()?;
    let mut b = [0u8; 1];
    view.read_at(0, &mut b)?; // the token and the cache's extent: calls, not faults
    let mut fault_samples = Vec::with_capacity(ranges);
    for r in 1..ranges {
        let t0 = ticks();
        view.read_at((r * (64 << 10)) as u64 + 100, &mut b)?;
        fault_samples.push(ticks_to_ns(ticks().wrapping_sub(t0)));
    }
    let host = std::fs::File::open(&fpath)?;
    let mut native_faults = Vec::with_capacity(ranges);
    {
        // A read-only shared mapping of the host file: the native fault baseline.
        let map = lintel_sys::Mapping::map_shared(&host, fault_size, false)?;
        let mut byte = [0u8];
        for r in 1..ranges {
            let t0 = ticks();
            map.read(r * (64 << 10) + 100, &mut byte);
            std::hint::black_box(byte);
            native_faults.push(ticks_to_ns(ticks().wrapping_sub(t0)));
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    report.push(
        CaseResult::new(SUITE, "fault_64k_native", &measure_single(&native_faults))
            .with_field("mean_ns", mean(&native_faults))
            .with_note(format!(
                "mean {:.0} ns: the kernel maps a page-cache folio at a time, so most first touches do not fault",
                mean(&native_faults)
            )),
    );
    report.push(
        CaseResult::new(SUITE, "fault_64k_mapped", &measure_single(&fault_samples))
            .compare_to(SUITE, "fault_64k_native")
            .with_field("mean_ns", mean(&fault_samples))
            .with_note(
                "first touch of a 64 KiB range of a view, in order: the service's pager reads it from the host and maps it, and maps ranges ahead between faults",
            ),
    );
    Ok(())
}
