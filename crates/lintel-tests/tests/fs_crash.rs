//! Crash consistency of the file service, as Linux gives it for a process
//! crash: a finished `write` (or `set_len`) outlives the death of its
//! writer and of the service; one cut short by a death may have landed in
//! part; nothing else changes.
//!
//! Each round runs a random sequence of opens, writes (shared offset,
//! positional, appending), `set_len`, syncs and closes from two client
//! processes on three files, every step also made through the kernel on a
//! reference directory, and at a random step kills a client, or the
//! service, while that step's call is under way. Then:
//! - every file on the host is the reference as it was before the step,
//!   except that the step itself may have landed in whole or in part:
//!   each byte is the one before or the one after it, and the length lies
//!   between the two (never a zero or a length nobody wrote or set);
//! - what is left keeps working: after a client's death the other client
//!   goes on and is compared as before; after the service's, a new
//!   service of the same directory serves every file as the host has it.
//!
//! A killed client is reaped, then the service is asked to finish what
//! it left running (`Fs::settle_dead`) before anything is looked at.
//!
//! Each seed runs with the service in another process and in this one
//! (where only a client dies). The seed is printed; `LINTEL_FS_CRASH_SEED`
//! (decimal) replays one, `LINTEL_FS_CRASH_ROUNDS` sets the rounds
//! (default 24).

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use lintel_fs::FsError;
use lintel_tests::fs::{FsClientPeer, FsPeer, FsService};
use lintel_tests::noise;
use rustix::fs::{Mode, OFlags};

const FILES: [&str; 3] = ["a", "b", "c"];

/// xorshift: the rounds' only source of chance.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn size(&mut self) -> u64 {
        match self.below(4) {
            0 => self.below(100),
            1 => self.below(9000),
            2 => (self.below(4) * 65536 + self.below(5)).saturating_sub(2),
            _ => self.below(200_000),
        }
    }
}

#[derive(Debug, Clone)]
enum Step {
    Open {
        client: usize,
        file: usize,
        flags: u32,
        io: u8,
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
    SetLen {
        h: usize,
        len: u64,
    },
    Sync {
        h: usize,
    },
    Close {
        h: usize,
    },
}

fn step(r: &mut Rng) -> Step {
    let h = r.below(8) as usize;
    match r.below(10) {
        0 | 1 => Step::Open {
            client: r.below(2) as usize,
            file: r.below(3) as usize,
            flags: 2
                | 0o100
                | if r.below(4) == 0 { 0o2000 } else { 0 }
                | if r.below(8) == 0 { 0o1000 } else { 0 },
            io: [0, 1, 2, 2][r.below(4) as usize],
        },
        2 | 3 => Step::Write {
            h,
            len: r.size() as usize,
            seed: r.next(),
        },
        4..=6 => Step::WriteAt {
            h,
            at: r.size(),
            len: r.size() as usize,
            seed: r.next(),
        },
        7 => Step::SetLen { h, len: r.size() },
        8 => Step::Sync { h },
        _ => Step::Close { h },
    }
}

/// An open file: which client holds it, its number there, and the
/// reference descriptor.
struct Open {
    client: usize,
    file: usize,
    number: u32,
    native: OwnedFd,
}

struct Round<'a> {
    peers: Vec<Option<FsClientPeer>>,
    native: &'a Path,
    open: Vec<Open>,
    log: &'a mut Vec<Step>,
}

impl Round<'_> {
    fn pick(&self, h: usize) -> Option<usize> {
        (!self.open.is_empty()).then(|| h % self.open.len())
    }

    fn peer(&self, client: usize) -> &FsClientPeer {
        self.peers[client].as_ref().expect("a live client")
    }

    /// The served half of `s`, as a call a thread can make (`None`: the
    /// step names no open file).
    fn call(&self, s: &Step) -> Option<Box<dyn FnOnce() -> Result<(), FsError> + Send>> {
        let cl = |i: usize| (self.peer(self.open[i].client).peer.clone(), self.open[i].number);
        Some(match s.clone() {
            Step::Open {
                client,
                file,
                flags,
                io,
            } => {
                let p = self.peer(client).peer.clone();
                Box::new(move || {
                    p.open_mode(FILES[file].as_bytes().to_vec(), flags, 0o644, io)
                        .map(drop)
                })
            }
            Step::Write { h, len, seed } => {
                let (p, n) = cl(self.pick(h)?);
                Box::new(move || write_all(&p, n, None, &noise(seed, len)))
            }
            Step::WriteAt { h, at, len, seed } => {
                let (p, n) = cl(self.pick(h)?);
                Box::new(move || write_all(&p, n, Some(at), &noise(seed, len)))
            }
            Step::SetLen { h, len } => {
                let (p, n) = cl(self.pick(h)?);
                Box::new(move || p.truncate(n, len))
            }
            Step::Sync { h } => {
                let (p, n) = cl(self.pick(h)?);
                Box::new(move || p.sync(n))
            }
            Step::Close { h } => {
                let (p, n) = cl(self.pick(h)?);
                Box::new(move || p.close(n))
            }
        })
    }

    /// The native half of `s`, and the round's bookkeeping (`served`: the
    /// number a served open got).
    fn apply(&mut self, s: &Step, served: Option<u32>) {
        match *s {
            Step::Open {
                client, file, flags, ..
            } => {
                let fd = rustix::fs::open(
                    self.native.join(FILES[file]),
                    OFlags::from_bits_retain(flags) | OFlags::CLOEXEC,
                    Mode::from_bits_truncate(0o644),
                )
                .expect("the reference opens");
                if let Some(number) = served {
                    self.open.push(Open {
                        client,
                        file,
                        number,
                        native: fd,
                    });
                }
            }
            Step::Write { h, len, seed } => {
                if let Some(i) = self.pick(h) {
                    native_write(&self.open[i].native, None, &noise(seed, len));
                }
            }
            Step::WriteAt { h, at, len, seed } => {
                if let Some(i) = self.pick(h) {
                    native_write(&self.open[i].native, Some(at), &noise(seed, len));
                }
            }
            Step::SetLen { h, len } => {
                if let Some(i) = self.pick(h) {
                    rustix::fs::ftruncate(&self.open[i].native, len).unwrap();
                }
            }
            Step::Sync { .. } => {}
            Step::Close { h } => {
                if let Some(i) = self.pick(h) {
                    self.open.remove(i);
                }
            }
        }
    }

    /// Run `s` to its end on both sides; its outcome must match.
    fn run(&mut self, s: &Step) -> Result<(), String> {
        self.log.push(s.clone());
        if std::env::var_os("LINTEL_FS_CRASH_SEED").is_some() {
            let on = match *s {
                Step::Write { h, .. }
                | Step::WriteAt { h, .. }
                | Step::SetLen { h, .. }
                | Step::Sync { h }
                | Step::Close { h } => self
                    .pick(h)
                    .map(|i| (self.open[i].client, FILES[self.open[i].file])),
                Step::Open { .. } => None,
            };
            eprintln!("step {s:?} on {on:?}");
        }
        let Some(call) = self.call(s) else {
            return Ok(());
        };
        let served = match s {
            Step::Open {
                client,
                file,
                flags,
                io,
            } => Some(
                self.peer(*client)
                    .peer
                    .open_mode(FILES[*file].as_bytes().to_vec(), *flags, 0o644, *io)
                    .map_err(|e| format!("open failed served: {e}"))?,
            ),
            _ => {
                call().map_err(|e| format!("{s:?} failed served: {e}"))?;
                None
            }
        };
        self.apply(s, served);
        Ok(())
    }
}

fn write_all(
    p: &lintel_tests::fs::FsPeerClient,
    n: u32,
    at: Option<u64>,
    data: &[u8],
) -> Result<(), FsError> {
    let mut done = 0;
    while done < data.len() {
        let chunk = &data[done..data.len().min(done + (1 << 20))];
        let k = match at {
            Some(at) => p.write_at(n, at + done as u64, chunk)?,
            None => p.write(n, chunk)?,
        };
        if k == 0 {
            return Err(FsError::Invalid("a write made no progress".into()));
        }
        done += k as usize;
    }
    Ok(())
}

fn native_write(fd: &OwnedFd, at: Option<u64>, data: &[u8]) {
    let mut done = 0;
    while done < data.len() {
        done += match at {
            Some(at) => rustix::io::pwrite(fd, &data[done..], at + done as u64),
            None => rustix::io::write(fd, &data[done..]),
        }
        .unwrap();
    }
}

fn contents(dir: &Path) -> BTreeMap<&'static str, Vec<u8>> {
    FILES
        .iter()
        .filter_map(|f| std::fs::read(dir.join(f)).ok().map(|b| (*f, b)))
        .collect()
}

/// Whether `host` could be what a step cut short left between `before`
/// and `after`: each byte one of theirs, the length between theirs.
/// For a replayed seed: how many of the bytes where the served tree differs
/// from the native one are as the killed step left them, and as before it.
fn explain_difference(
    served: &Path,
    native: &Path,
    before: &BTreeMap<&str, Vec<u8>>,
    after: &BTreeMap<&str, Vec<u8>>,
) {
    let (host, want) = (contents(served), contents(native));
    for f in FILES {
        let (Some(h), Some(n)) = (host.get(f), want.get(f)) else {
            continue;
        };
        let diff: Vec<usize> = (0..h.len().min(n.len())).filter(|&p| h[p] != n[p]).collect();
        if diff.is_empty() {
            continue;
        }
        let as_in = |m: &BTreeMap<&str, Vec<u8>>| {
            let v = m.get(f);
            diff.iter()
                .filter(|&&p| v.and_then(|v| v.get(p)) == Some(&h[p]))
                .count()
        };
        eprintln!(
            "file {f}: {} bytes differ; of them, as the killed step left them {}, as before it {}",
            diff.len(),
            as_in(after),
            as_in(before)
        );
    }
}

fn between(host: &[u8], before: &[u8], after: &[u8]) -> Result<(), String> {
    let (lo, hi) = (before.len().min(after.len()), before.len().max(after.len()));
    if !(lo..=hi).contains(&host.len()) {
        return Err(format!(
            "{} bytes, not between {} and {}",
            host.len(),
            before.len(),
            after.len()
        ));
    }
    for (p, &b) in host.iter().enumerate() {
        if before.get(p) != Some(&b) && after.get(p) != Some(&b) {
            return Err(format!(
                "byte {p} is {b:#x}: neither before ({:?}) nor after ({:?}) the step",
                before.get(p),
                after.get(p)
            ));
        }
    }
    Ok(())
}

/// The host against the reference: exactly the reference before the step
/// cut short, but for what that step may have done.
fn check(
    served: &Path,
    before: &BTreeMap<&str, Vec<u8>>,
    after: &BTreeMap<&str, Vec<u8>>,
) -> Result<(), String> {
    let host = contents(served);
    for f in FILES {
        let empty = Vec::new();
        match (host.get(f), before.get(f), after.get(f)) {
            (None, None, None) => {}
            (Some(h), b, a) => {
                between(h, b.unwrap_or(&empty), a.unwrap_or(&empty)).map_err(|e| format!("file {f}: {e}"))?
            }
            // The open cut short did not make it.
            (None, None, Some(_)) => {}
            (None, Some(_), _) => return Err(format!("file {f} is gone")),
        }
    }
    Ok(())
}

/// The files of the two directories, compared.
fn same_trees(served: &Path, native: &Path) -> Result<(), String> {
    let (host, want) = (contents(served), contents(native));
    for f in FILES {
        match (host.get(f), want.get(f)) {
            (Some(h), Some(w)) if h != w => {
                let at = h.iter().zip(w).position(|(a, b)| a != b);
                let last = h.iter().zip(w).rposition(|(a, b)| a != b);
                return Err(format!(
                    "file {f}: {} bytes served, {} native, differing from {at:?} to {last:?}",
                    h.len(),
                    w.len()
                ));
            }
            (h, w) if h.is_some() != w.is_some() => return Err(format!("file {f} is on one side only")),
            _ => {}
        }
    }
    Ok(())
}

#[derive(Debug)]
enum Kill {
    Client(usize),
    Service,
}

/// One round: steps, a death during one of them, the checks; on failure,
/// what it did.
/// `here`: the service runs in this process (then only a client dies).
fn round(seed: u64, here: bool) -> Result<(), String> {
    let mut log = Vec::new();
    play(seed, here, &mut log).map_err(|e| format!("{e}\nsteps (the last cut short by the death): {log:#?}"))
}

fn play(seed: u64, here: bool, log: &mut Vec<Step>) -> Result<(), String> {
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let served = tempfile::tempdir().unwrap();
    let native = tempfile::tempdir().unwrap();
    let (mut svc, fs) = if here {
        let door = lintel_fs::Service::new(served.path(), false).unwrap().into_door();
        (None, lintel_fs::Fs::from_door(door))
    } else {
        let svc = FsService::start(served.path(), false);
        let fs = svc.fs.clone();
        (Some(svc), fs)
    };
    let peers = (0..2).map(|_| Some(FsClientPeer::start(fs.door()))).collect();
    let mut w = Round {
        peers,
        native: native.path(),
        open: Vec::new(),
        log,
    };
    let steps = 4 + r.below(40);
    for _ in 0..steps {
        let s = step(&mut r);
        w.run(&s)?;
    }
    // The step cut short, made on a thread while the death comes.
    let kill = if !here && r.below(3) == 0 {
        Kill::Service
    } else {
        Kill::Client(r.below(2) as usize)
    };
    let s = loop {
        let s = step(&mut r);
        if w.call(&s).is_some() {
            break s;
        }
    };
    w.log.push(s.clone());
    if std::env::var_os("LINTEL_FS_CRASH_SEED").is_some() {
        eprintln!("kill {kill:?} during {s:?}");
    }
    let before = contents(native.path());
    let call = w.call(&s).expect("a call");
    let under_way = std::thread::spawn(call);
    std::thread::sleep(Duration::from_micros(r.below(3000)));
    match kill {
        Kill::Client(c) => {
            if let Some(mut p) = w.peers[c].take() {
                let pid = p.pid();
                p.kill();
                // Reaped; the call it left running in the service ends
                // before anything is looked at, as a killed process's
                // system call is over once Linux has reaped it.
                let settled = fs.settle_dead(pid).map_err(|e| format!("settle_dead: {e}"))?;
                if !settled {
                    return Err("the killed client's call still runs after the service's timeout".into());
                }
            }
        }
        Kill::Service => svc.as_mut().expect("a service process").kill(),
    }
    let finished = under_way.join().unwrap().is_ok();
    // The reference after the step (an open also makes a file).
    w.apply(&s, None);
    let after = contents(native.path());
    let before = if finished { after.clone() } else { before };
    match kill {
        Kill::Client(c) => {
            // Its files closed now (their token back, what it reported
            // written on the host); a stat of each takes the token back.
            w.open.retain(|o| o.client != c);
            for f in FILES {
                let _ = fs.stat(f);
            }
            check(served.path(), &before, &after)?;
            // The survivor goes on, compared as before, from what the host
            // now holds.
            let host = contents(served.path());
            for f in FILES {
                match host.get(f) {
                    Some(bytes) => std::fs::write(native.path().join(f), bytes).unwrap(),
                    None => drop(std::fs::remove_file(native.path().join(f))),
                }
            }
            for _ in 0..10 {
                let s = step(&mut r);
                let s = match s {
                    Step::Open { file, flags, io, .. } => Step::Open {
                        client: 1 - c,
                        file,
                        flags,
                        io,
                    },
                    s => s,
                };
                w.run(&s)?;
            }
            for o in std::mem::take(&mut w.open) {
                w.peer(o.client)
                    .peer
                    .close(o.number)
                    .map_err(|e| format!("close: {e}"))?;
            }
            same_trees(served.path(), native.path()).map_err(|e| {
                if std::env::var_os("LINTEL_FS_CRASH_SEED").is_some() {
                    explain_difference(served.path(), native.path(), &before, &after);
                }
                format!("after the survivor's steps: {e}")
            })?;
        }
        Kill::Service => {
            // Closing a file waits for its write-back (by the watcher, or
            // by the close itself).
            for o in std::mem::take(&mut w.open) {
                let _ = w.peer(o.client).peer.close(o.number);
            }
            check(served.path(), &before, &after)?;
            // A new service serves the tree as the host has it.
            let again = FsService::start(served.path(), false);
            for (f, bytes) in contents(served.path()) {
                let got = again
                    .fs
                    .read(f)
                    .map_err(|e| format!("the new service reads {f}: {e}"))?;
                if got != bytes {
                    return Err(format!("the new service reads {f} otherwise than the host"));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn a_death_during_any_step_leaves_only_what_was_written() {
    let rounds: u64 = std::env::var("LINTEL_FS_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let seeds: Vec<u64> = match std::env::var("LINTEL_FS_CRASH_SEED") {
        Ok(s) => vec![s.parse().expect("a decimal seed")],
        Err(_) => {
            let mut fresh = [0u8; 8];
            rustix::rand::getrandom(&mut fresh, rustix::rand::GetRandomFlags::empty()).unwrap();
            let base = u64::from_le_bytes(fresh);
            (0..rounds)
                .map(|i| {
                    if i < rounds / 2 {
                        i + 1
                    } else {
                        base.wrapping_add(i)
                    }
                })
                .collect()
        }
    };
    for seed in seeds {
        for here in [false, true] {
            if let Err(e) = round(seed, here) {
                let placement = if here {
                    "served by this process"
                } else {
                    "served by another"
                };
                panic!("seed {seed}, {placement} (LINTEL_FS_CRASH_SEED={seed} replays it): {e}");
            }
        }
    }
}
