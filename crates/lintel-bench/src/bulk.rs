//! Suite `bulk`: data of every size through a door call, against copying it once and against a
//! Unix socket, at 4 KiB, 64 KiB, 1 MiB, 16 MiB and 256 MiB.
//!
//! - `echo_<size>`: a raw door call whose handler takes the argument bytes and returns them
//!   (`reply.data.extend_from_slice(req.data)`), the server in a child domain. Above the slot's
//!   5 KiB data region the bytes travel through the slot's bulk segments: one copy in by the
//!   caller, one copy out by the server, the handler's own copy, and the same back.
//! - `echo_<size>_colocated`: the same door served in this domain.
//! - `baseline/memcpy_<size>`: one `copy_from_slice` in one process, source and destination
//!   2 KiB apart modulo 4 KiB (glibc's `memcpy` here slows ten-fold when they nearly alias).
//! - `baseline/uds_echo_<size>`: the same echo over a `SOCK_STREAM` socketpair to a child.
//!
//! - `handoff_<size>`: a shared loan of `size` bytes (`lintel::Loan`), its first and last byte
//!   written, passed one way; the server reads its first and last byte (copying them out, as
//!   a loan's bytes are untrusted) and drops it, which returns it to the caller's arena.
//! - `sealed_<size>`: a sealed snapshot (`lintel::SealedWriter`): made, its first and last byte
//!   written, sealed, passed one way; the server reads the same two bytes in place.
//! - each also `_colocated`.
//!
//! `LINTEL_BENCH_BULK_SIZES=1m,16m` limits the run to those sizes.
//!
//! Each `echo_<size>` carries `copy_limit_ratio`: its median over two `memcpy_<size>` plus one
//! null call to the same child (the "copy limit"), and `vs_uds`.

use std::io::{Read, Write};
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::net::UnixStream;

use anyhow::{Context as _, bail, ensure};
use lintel::{Buffer, CallError, Door, Fault, Loan, Reply, Request, SealedWriter};

use crate::harness::{
    CaseResult, ChildDomain, ChildProc, Config, Report, Stats, fd_arg, measure_batched, serve_all_forever,
    spawn_self, take_fd,
};

pub const SUITE: &str = "bulk";
/// The child role serving the bulk doors, registered in `main`.
pub const ROLE: &str = "bulk";
/// The child role echoing over a Unix socket.
pub const UDS_ROLE: &str = "bulk-uds";

/// The sizes of every case, with their names.
pub const SIZES: [(&str, usize); 5] = [
    ("4k", 4 << 10),
    ("64k", 64 << 10),
    ("1m", 1 << 20),
    ("16m", 16 << 20),
    ("256m", 256 << 20),
];

/// Bytes moved per case in full mode (a tenth with --quick); iterations follow from the size.
const BUDGET: usize = 2 << 30;

fn iters(cfg: &Config, size: usize) -> u64 {
    let full = (BUDGET / size).clamp(30, 20_000) as u64;
    cfg.iters(full).max(3)
}

/// The doors the child offers, in order: echo, null, ends (the first and last byte of the
/// buffer passed, as two result bytes).
fn doors() -> Vec<Door> {
    let echo = Door::create(0, |req: Request<'_>, reply: &mut Reply| {
        reply.data.extend_from_slice(req.data);
        Ok(())
    });
    let null = Door::create(1, |_: Request<'_>, _: &mut Reply| -> Result<(), Fault> { Ok(()) });
    let ends = Door::create(2, |req: Request<'_>, reply: &mut Reply| {
        let (first, last) = match req.buffers.first() {
            Some(Buffer::Loaned(l)) => (l.get(0), l.len().checked_sub(1).and_then(|i| l.get(i))),
            Some(Buffer::Loan(l)) => (l.as_slice().first().copied(), l.as_slice().last().copied()),
            Some(Buffer::Sealed(s)) => (s.as_slice().first().copied(), s.as_slice().last().copied()),
            Some(Buffer::Fd(_)) | None => (None, None),
        };
        reply.data.extend([first.ok_or(Fault(1))?, last.ok_or(Fault(1))?]);
        Ok(())
    });
    vec![echo, null, ends]
}

/// The child side: serve the echo, null and ends doors until killed.
pub fn child(_args: &[String]) -> anyhow::Result<()> {
    serve_all_forever(doors())
}

/// Runs every case.
pub fn run(cfg: &Config, report: &mut Report) -> anyhow::Result<()> {
    let child = ChildDomain::spawn(cfg, ROLE)?;
    let [echo, null, ends] = child.doors() else {
        bail!("the bulk child offered {} doors, expected 3", child.doors().len());
    };
    ensure!(!echo.is_local(), "the child's echo door is local");
    let local = doors();
    let mut reply = Reply::new();
    let null_stats = measure_batched(cfg.iters(50_000), 100, || {
        let _ = null.call(&[], &[], &mut reply);
    });
    let mut uds = UdsEcho::start(cfg)?;
    let only = std::env::var("LINTEL_BENCH_BULK_SIZES").ok();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| o.split(',').any(|s| s == name));
    for (name, size) in SIZES.into_iter().filter(|(name, _)| wanted(name)) {
        let data: Vec<u8> = (0..size).map(|i| (i * 131 + 7) as u8).collect();
        let n = iters(cfg, size);
        let memcpy = measure_memcpy(&data, n, 1);
        let uds_stats = uds.measure(&data, n)?;
        let cross = measure_echo(echo, &data, n, 1)?;
        let colocated = measure_echo(&local[0], &data, n, 1)?;
        let limit = 2.0 * memcpy.median_ns + null_stats.median_ns;
        report.push(
            CaseResult::new(SUITE, &format!("echo_{name}"), &cross)
                .compare_to("baseline", &format!("uds_echo_{name}"))
                .with_field("bytes", size as f64)
                .with_field("gb_per_s", gb_per_s(size, &cross))
                .with_field("copy_limit_ratio", cross.median_ns / limit)
                .with_field("vs_uds", uds_stats.median_ns / cross.median_ns)
                .with_note(format!(
                    "{size} bytes each way; copy limit (2 × memcpy_{name} + null call {:.0} ns) {:.0} ns, \
                     ratio {:.2} (target ≤ 1.5 at 1m); {:.1}× faster than uds_echo_{name} (target ≥ 20 at 1m)",
                    null_stats.median_ns,
                    limit,
                    cross.median_ns / limit,
                    uds_stats.median_ns / cross.median_ns
                )),
        );
        report.push(
            CaseResult::new(SUITE, &format!("echo_{name}_colocated"), &colocated)
                .compare_to(SUITE, &format!("echo_{name}"))
                .with_field("bytes", size as f64)
                .with_field("gb_per_s", gb_per_s(size, &colocated)),
        );
        let handoff = measure_handoff(ends, size, n)?;
        let handoff_local = measure_handoff(&local[2], size, n)?;
        let sealed = measure_sealed(ends, size, n)?;
        let sealed_local = measure_sealed(&local[2], size, n)?;
        report.push(
            CaseResult::new(SUITE, &format!("handoff_{name}"), &handoff)
                .compare_to(SUITE, &format!("echo_{name}"))
                .with_field("bytes", size as f64)
                .with_field("vs_null", handoff.median_ns / null_stats.median_ns)
                .with_note(format!(
                    "a loan of {size} bytes passed one way; {:.1}× the null call (target ≤ 30 at 1m; flat in size)",
                    handoff.median_ns / null_stats.median_ns
                )),
        );
        report.push(
            CaseResult::new(SUITE, &format!("handoff_{name}_colocated"), &handoff_local)
                .compare_to(SUITE, &format!("handoff_{name}")),
        );
        report.push(
            CaseResult::new(SUITE, &format!("sealed_{name}"), &sealed)
                .compare_to("baseline", &format!("memcpy_{name}"))
                .with_field("bytes", size as f64)
                .with_field("vs_memcpy", sealed.median_ns / memcpy.median_ns)
                .with_note(format!(
                    "a sealed snapshot of {size} bytes made, sealed and passed one way; {:.2}× one memcpy \
                     of the same size (below 1: sealing beats the copy it replaces)",
                    sealed.median_ns / memcpy.median_ns
                )),
        );
        report.push(
            CaseResult::new(SUITE, &format!("sealed_{name}_colocated"), &sealed_local)
                .compare_to(SUITE, &format!("sealed_{name}")),
        );
        report.push(
            CaseResult::new("baseline", &format!("memcpy_{name}"), &memcpy)
                .with_field("bytes", size as f64)
                .with_field("gb_per_s", gb_per_s(size, &memcpy))
                .with_note("one copy_from_slice in one process, buffers 2 KiB apart modulo 4 KiB"),
        );
        report.push(
            CaseResult::new("baseline", &format!("uds_echo_{name}"), &uds_stats)
                .with_field("bytes", size as f64)
                .with_field("gb_per_s", gb_per_s(size, &uds_stats))
                .with_note("the same echo over a SOCK_STREAM socketpair: length, bytes, and back"),
        );
    }
    uds.stop()?;
    Ok(())
}

/// Bytes per nanosecond is GB/s.
fn gb_per_s(size: usize, s: &Stats) -> f64 {
    size as f64 / s.median_ns
}

/// One copy of `data`, the best case for glibc: no 4 KiB aliasing; timed in batches of `batch`.
pub(crate) fn measure_memcpy(data: &[u8], iters: u64, batch: u64) -> Stats {
    let mut dst = vec![0u8; data.len() + 4096];
    let at = (2048 + 4096 - dst.as_ptr() as usize % 4096 + data.as_ptr() as usize % 4096) % 4096;
    measure_batched(iters, batch, || {
        dst[at..at + data.len()].copy_from_slice(std::hint::black_box(data));
        std::hint::black_box(&mut dst);
    })
}

/// Echo `data` through `door` `iters` times (timed in batches of `batch`), checking the length
/// and both ends every time.
pub(crate) fn measure_echo(door: &Door, data: &[u8], iters: u64, batch: u64) -> anyhow::Result<Stats> {
    let mut reply = Reply::new();
    let mut failure = None;
    let stats = measure_batched(iters, batch, || {
        if failure.is_some() {
            return;
        }
        match door.call(data, &[], &mut reply) {
            Ok(()) if same_ends(&reply.data, data) => {}
            Ok(()) => failure = Some("the echo came back changed".to_string()),
            Err(e) => failure = Some(e.to_string()),
        }
    });
    match failure {
        Some(f) => bail!("echo of {} bytes: {f}", data.len()),
        None => Ok(stats),
    }
}

/// Pass a fresh loan of `size` bytes (first and last byte written) through `door` `iters`
/// times; the server answers with those two bytes.
fn measure_handoff(door: &Door, size: usize, iters: u64) -> anyhow::Result<Stats> {
    measure_buffer(door, size, iters, |i| {
        let mut loan = Loan::new(size)?;
        let b = loan.as_mut_slice();
        b[0] = i;
        b[size - 1] = !i;
        Ok(Buffer::Loan(loan))
    })
}

/// The same with a sealed snapshot made, written and sealed for each call.
fn measure_sealed(door: &Door, size: usize, iters: u64) -> anyhow::Result<Stats> {
    measure_buffer(door, size, iters, |i| {
        let mut w = SealedWriter::new(size).map_err(|e| CallError::Local(e.to_string()))?;
        let b = w.as_mut_slice();
        b[0] = i;
        b[size - 1] = !i;
        Ok(Buffer::Sealed(
            w.seal().map_err(|e| CallError::Local(e.to_string()))?,
        ))
    })
}

fn measure_buffer(
    door: &Door,
    size: usize,
    iters: u64,
    mut make: impl FnMut(u8) -> Result<Buffer, CallError>,
) -> anyhow::Result<Stats> {
    let mut reply = Reply::new();
    let (mut i, mut failure) = (0u8, None);
    let stats = measure_batched(iters, 1, || {
        if failure.is_some() {
            return;
        }
        i = i.wrapping_add(1);
        let r = make(i).and_then(|b| door.call_with(&[], &[], vec![b], &mut reply));
        match r {
            Ok(()) if reply.data == [i, !i] => {}
            Ok(()) => failure = Some("the server read other bytes".to_string()),
            Err(e) => failure = Some(e.to_string()),
        }
    });
    match failure {
        Some(f) => bail!("buffer of {size} bytes: {f}"),
        None => Ok(stats),
    }
}

fn same_ends(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.first() == b.first() && a.last() == b.last()
}

/// A child that echoes length-prefixed messages over a socketpair.
struct UdsEcho {
    sock: UnixStream,
    child: ChildProc,
    back: Vec<u8>,
}

impl UdsEcho {
    fn start(cfg: &Config) -> anyhow::Result<UdsEcho> {
        let (mine, theirs) = UnixStream::pair().context("socketpair")?;
        let theirs = OwnedFd::from(theirs);
        let cmd = spawn_self(cfg, UDS_ROLE, &[fd_arg(theirs.as_fd())])?;
        let child = ChildProc::spawn(cmd, &[theirs.as_fd()])?;
        drop(theirs);
        Ok(UdsEcho {
            sock: mine,
            child,
            back: Vec::new(),
        })
    }

    fn measure(&mut self, data: &[u8], iters: u64) -> anyhow::Result<Stats> {
        let mut failure = None;
        let stats = measure_batched(iters, 1, || {
            if failure.is_none() {
                failure = self.round(data).err();
            }
        });
        match failure {
            Some(e) => Err(e),
            None => Ok(stats),
        }
    }

    fn round(&mut self, data: &[u8]) -> anyhow::Result<()> {
        self.sock.write_all(&(data.len() as u64).to_le_bytes())?;
        self.sock.write_all(data)?;
        self.back.resize(data.len(), 0);
        self.sock.read_exact(&mut self.back)?;
        ensure!(same_ends(&self.back, data), "the uds echo came back changed");
        Ok(())
    }

    fn stop(mut self) -> anyhow::Result<()> {
        self.sock.write_all(&u64::MAX.to_le_bytes())?;
        self.child.finish(std::time::Duration::from_secs(5))
    }
}

/// The socket echo child: `FD`. Reads a length and that many bytes, writes them back, until
/// the length `u64::MAX` (or end of file).
pub fn uds_child(args: &[String]) -> anyhow::Result<()> {
    let [fd] = args else {
        bail!("usage: {UDS_ROLE} FD");
    };
    let mut sock = UnixStream::from(take_fd(fd)?);
    let mut buf = Vec::new();
    loop {
        let mut len = [0u8; 8];
        if sock.read_exact(&mut len).is_err() {
            return Ok(());
        }
        let n = u64::from_le_bytes(len);
        if n == u64::MAX {
            return Ok(());
        }
        buf.resize(usize::try_from(n).context("length")?, 0);
        sock.read_exact(&mut buf)?;
        sock.write_all(&buf)?;
    }
}
