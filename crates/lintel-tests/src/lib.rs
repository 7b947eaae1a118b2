//! Shared pieces of the multi-process tests: the peer's method numbers and
//! helpers to start peers and talk to them.
#![forbid(unsafe_code)]
#![forbid(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::process::Command;
use std::time::{Duration, Instant};

use lintel::{CallError, Door, Reply};

pub mod control;
pub mod fs;
pub mod holdings;
pub mod layers;
pub mod net;

/// Methods of the peer's control door (first byte of the arguments).
pub mod m {
    pub const ECHO: u8 = 0;
    pub const MAKE_DOOR: u8 = 1;
    pub const CALL_PASSED: u8 = 2;
    pub const HOLD: u8 = 3;
    pub const DROP_HELD: u8 = 4;
    pub const SLEEP_ALERTABLE: u8 = 5;
    pub const UNREF_COUNT: u8 = 6;
    pub const REVOKE_MADE: u8 = 7;
    pub const GIVE_MADE: u8 = 8;
    pub const ALERTED_COUNT: u8 = 9;
    pub const SERVER_PID_OF_PASSED: u8 = 10;
    pub const CONNECTIONS: u8 = 11;
    pub const SLEEP_PLAIN: u8 = 12;
    pub const MAX_CONCURRENT: u8 = 13;
    pub const MAKE_MANY: u8 = 14;
    pub const SECRET_CALLS: u8 = 15;
    pub const CALL_HELD: u8 = 16;
    pub const POOL_SHORTAGES: u8 = 17;
    pub const RETURN_HELD: u8 = 18;
    pub const SHORTAGES_WATCHED: u8 = 19;
    /// Alertable sleeps that ran to their end, not cut short by an alert.
    pub const SLEPT_FULL: u8 = 20;
    /// First argument byte: a thread count n; the rest are the arguments of
    /// a call on the first held door, made by n threads at once.
    pub const CALL_HELD_PARALLEL: u8 = 21;
    /// The time left before the serving thread's deadline, in ms
    /// (`u64::MAX` if it has none).
    pub const REMAINING_MS: u8 = 22;
    /// Arguments: ms (u64), then bytes: sleeps (not alertable), then
    /// returns the bytes.
    pub const ECHO_AFTER: u8 = 23;
    /// Calls the first held door (to say it runs), then sleeps alertably
    /// for the ms (u64) given, as `SLEEP_ALERTABLE`.
    pub const SIGNAL_THEN_SLEEP: u8 = 24;
    /// How many doors `MAKE_DOOR` has made.
    pub const MADE_COUNT: u8 = 25;
    /// Returns `arg` (u64) bytes, byte `i` being `i as u8`.
    pub const BIG: u8 = 26;
    /// Returns the argument's length (u64).
    pub const LEN: u8 = 27;
    /// Describes the buffers passed (see `control::describe`).
    pub const BUFFERS_INFO: u8 = 28;
    /// Keeps the buffers passed, past the call.
    pub const KEEP_BUFFERS: u8 = 29;
    /// Describes the buffers kept.
    pub const KEPT_INFO: u8 = 30;
    /// Drops the buffers kept (loans go back to their lender).
    pub const DROP_KEPT: u8 = 31;
    /// Returns a sealed snapshot of `pattern(arg)` (u64 length).
    pub const RETURN_SEALED: u8 = 32;
    /// Returns a loan of the server's pool holding `pattern(arg)`.
    pub const RETURN_LOAN: u8 = 33;
    /// Calls the first held door with `arg` (u64 n) bytes of data (the
    /// bulk path), a loan and a sealed snapshot of `pattern(n)`; returns
    /// what that call returned.
    pub const CALL_HELD_WITH_BUFFERS: u8 = 34;
    /// The server pool's threads, then its idle threads, then the calls
    /// running `SLEEP_ALERTABLE` now (u64 each).
    pub const POOL_STATE: u8 = 35;
    /// The calling process as `lintel::caller` names it: its pid (u64; 0
    /// for none) and its connection (u64).
    pub const CALLER: u8 = 36;
    /// Waits (alertably, up to 60 s) until as many calls as the argument
    /// (u64 n) are inside `GATHER` at once; returns 1 if they were, 0 if
    /// the wait ended first.
    pub const GATHER: u8 = 37;
    /// As [`CALL_HELD_PARALLEL`], but the n calls are awaited by n tasks
    /// of one thread (a current-thread runtime).
    pub const CALL_HELD_AWAITED: u8 = 38;
    /// Bytes of the server's loan arena lent out and not yet returned
    /// (u64), as read when the handler runs.
    pub const LENT: u8 = 39;
    /// Call the first held door with the argument and read its result in
    /// place (`Door::call_in_place`); answers a byte saying whether the
    /// result was shared (1) or private (0), then the result's bytes as
    /// read, a piece at a time, in place.
    pub const CALL_HELD_IN_PLACE: u8 = 40;
    /// Answer at once (empty), leaving for after the reply
    /// (`lintel::after_reply`) a call of the first held door with the
    /// argument.
    pub const CALL_HELD_AFTER: u8 = 41;
    /// Counted active, then waits (not alertably: a dead caller's alert
    /// does not end it) until `RELEASE`, or 60 s; then counts itself in
    /// `HELD_ENDED` and returns.
    pub const HOLD_UNTIL_RELEASED: u8 = 42;
    /// Lets every `HOLD_UNTIL_RELEASED` call go on.
    pub const RELEASE: u8 = 43;
    /// `HOLD_UNTIL_RELEASED` calls that have ended (u64).
    pub const HELD_ENDED: u8 = 44;
    /// `lintel::settle_dead` here for the pid (u32) and ms (u64) given:
    /// 1 if settled, 0 if the time ran out.
    pub const SETTLE_DEAD: u8 = 45;
    /// Returns a loan of the server's pool of the length given (u64), each
    /// byte the argument's ninth.
    pub const RETURN_LOAN_FILLED: u8 = 46;
    /// Returns a door the peer does not keep, which echoes; its handler
    /// counts its own end (`HANDLERS_DROPPED`).
    pub const MAKE_UNKEPT: u8 = 47;
    /// How many handlers of `MAKE_UNKEPT` doors have been dropped.
    pub const HANDLERS_DROPPED: u8 = 48;
}

/// Path of the peer program: beside the test binary's `deps/` folder, where
/// cargo builds it for integration tests.
pub fn peer_path() -> std::path::PathBuf {
    bin_path("lintel-peer")
}

/// Path of a binary of this crate, built beside the test binaries.
pub fn bin_path(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    let dir = if dir.ends_with("deps") {
        dir.parent().expect("target dir")
    } else {
        dir
    };
    dir.join(name)
}

/// A running peer domain; killed when dropped.
pub struct Peer {
    pub child: std::process::Child,
    pub ctl: Door,
}

impl Peer {
    pub fn start(role: &str) -> Peer {
        Peer::start_with(role, &[], &[])
    }

    pub fn start_with(role: &str, env: &[(&str, &str)], offer: &[Door]) -> Peer {
        let mut cmd = Command::new(peer_path());
        cmd.arg(role);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let s = lintel::boot::spawn(&mut cmd, offer).expect("spawn peer");
        let ctl = s.doors.into_iter().next().expect("peer offers a control door");
        Peer { child: s.child, ctl }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Call method `m` with `arg` bytes and `doors`.
    pub fn call(&self, m: u8, arg: &[u8], doors: &[Door]) -> Result<Reply, CallError> {
        call(&self.ctl, m, arg, doors)
    }

    /// Call method `m` with a u64 argument; the one door it returns.
    pub fn door(&self, m: u8, arg: u64) -> Door {
        let mut r = self.call(m, &arg.to_le_bytes(), &[]).expect("peer call");
        assert_eq!(r.doors.len(), 1, "method {m} returns one door");
        r.doors.pop().expect("one door")
    }

    /// A door the peer makes with `datum` (it counts its unreferenced).
    pub fn make_door(&self, datum: u64) -> Door {
        self.door(m::MAKE_DOOR, datum)
    }

    pub fn u64(&self, m: u8, arg: &[u8]) -> u64 {
        let r = self.call(m, arg, &[]).expect("peer call");
        u64::from_le_bytes(r.data[..8].try_into().unwrap())
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Call method `m` passing `buffers` by reference.
pub fn call_with(door: &Door, m: u8, arg: &[u8], buffers: Vec<lintel::Buffer>) -> Result<Reply, CallError> {
    let mut reply = Reply::new();
    door.call_with(&[&[m][..], arg].concat(), &[], buffers, &mut reply)?;
    Ok(reply)
}

pub fn call(door: &Door, m: u8, arg: &[u8], doors: &[Door]) -> Result<Reply, CallError> {
    let mut data = vec![m];
    data.extend_from_slice(arg);
    let mut reply = Reply::new();
    door.call(&data, doors, &mut reply)?;
    Ok(reply)
}

/// `len` bytes that follow from `seed` (xorshift) and are never zero, so
/// that a zero nobody wrote shows wherever they were written.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x as u8) | 1
        })
        .collect()
}

/// Poll `f` until it holds or `limit` passes; returns whether it held.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Open descriptors and mappings of this process.
/// Open descriptors and shared-memory mappings (`memfd:` in
/// `/proc/self/maps`: call areas, bulk segments, loan arenas, snapshots) of
/// this process. Thread stacks and malloc arenas are left out: the server
/// pool may grow under load (up to its thread limit), which is not a leak.
pub fn fds_and_shared_maps() -> (usize, usize) {
    let fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map(|s| s.lines().filter(|l| l.contains("memfd:")).count())
        .unwrap_or(0);
    (fds, maps)
}

pub fn fds_and_maps() -> (usize, usize) {
    let fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map(|s| s.lines().count())
        .unwrap_or(0);
    (fds, maps)
}

/// Stop process `pid` (SIGSTOP) and wait until the kernel shows it stopped:
/// the signal is delivered asynchronously, and a thread already running may
/// otherwise still answer a request sent just after `kill`.
pub fn stop_process(pid: u32) {
    let p = rustix::process::Pid::from_raw(pid as i32).expect("a pid");
    rustix::process::kill_process(p, rustix::process::Signal::STOP).expect("SIGSTOP");
    let stopped = eventually(Duration::from_secs(10), || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the command name in parentheses.
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('T'))
    });
    assert!(stopped, "process {pid} did not stop");
}

/// Let a process stopped by [`stop_process`] run again.
pub fn continue_process(pid: u32) {
    let p = rustix::process::Pid::from_raw(pid as i32).expect("a pid");
    rustix::process::kill_process(p, rustix::process::Signal::CONT).expect("SIGCONT");
}

/// `len` bytes of a fixed, position-dependent pattern.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ (i >> 8) as u8)
        .collect()
}

/// A copy of a buffer's bytes, whatever its kind.
pub fn buffer_bytes(b: &lintel::Buffer) -> Vec<u8> {
    match b {
        lintel::Buffer::Sealed(s) => s.as_slice().to_vec(),
        lintel::Buffer::Loan(l) => l.as_slice().to_vec(),
        lintel::Buffer::Loaned(l) => l.to_vec(),
        lintel::Buffer::Fd(fd) => {
            let mut all = Vec::new();
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = rustix::io::pread(fd, &mut chunk, all.len() as u64) {
                all.extend_from_slice(&chunk[..n]);
            }
            all
        }
    }
}
