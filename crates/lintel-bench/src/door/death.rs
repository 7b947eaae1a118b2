//! `callee_death_ms`: how long a caller waits on a callee that was killed mid-call.
//!
//! Each round starts a fresh child domain, offering it a door that signals this thread. A
//! second thread calls the child's [`Offer::Sleep`], whose handler calls that door back and
//! then sleeps for seconds. Once the call-back arrives, this thread takes the time, sends
//! SIGKILL, and waits for the caller to return; the sample is from just before `kill` to just
//! after the caller got `CallError::PeerDied` (process teardown, hang-up on the connection, the
//! watcher failing the call and waking the caller).

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use lintel::{CallError, Door, Reply, Request};

use super::peer::Peer;
use super::{Offer, SUITE};
use crate::harness::{CaseResult, Config, measure_single};

const CASE: &str = "callee_death_ms";
/// Rounds in full mode (--quick: [`QUICK_ROUNDS`]).
const ROUNDS: u64 = 20;
const QUICK_ROUNDS: u64 = 5;
/// How long to wait for the child's handler to start, and for the caller to be released.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The DESIGN target for failing the calls of a dead domain.
const TARGET_MS: f64 = 10.0;

/// Runs the rounds one after another; a round that hangs past [`TIMEOUT`] fails the case.
pub fn callee_death(cfg: &Config) -> anyhow::Result<CaseResult> {
    let rounds = if cfg.quick { QUICK_ROUNDS } else { ROUNDS };
    let (started_tx, started) = mpsc::channel::<()>();
    let started_door = Door::create(0, move |_: Request<'_>, _: &mut Reply| {
        let _ = started_tx.send(());
        Ok(())
    });
    let mut samples = Vec::new();
    for round in 1..=rounds {
        let ns = one_round(cfg, &started_door, &started).with_context(|| format!("{CASE} round {round}"))?;
        samples.push(ns);
    }
    let stats = measure_single(&samples);
    let (median_ms, p99_ms) = (stats.median_ns / 1e6, stats.p99_ns / 1e6);
    let mut note = format!(
        "values in ns, from kill(SIGKILL) of the callee to the caller's PeerDied; median \
         {median_ms:.3} ms, p99 {p99_ms:.3} ms over {rounds} rounds (target < {TARGET_MS} ms)"
    );
    if median_ms >= TARGET_MS {
        note = format!("WARNING: over target; {note}");
    }
    Ok(CaseResult::new(SUITE, CASE, &stats).with_note(note))
}

/// One child, one call into its sleeping handler, one kill: nanoseconds from kill to `PeerDied`.
fn one_round(cfg: &Config, started_door: &Door, started: &mpsc::Receiver<()>) -> anyhow::Result<f64> {
    while started.try_recv().is_ok() {}
    let mut peer = Peer::spawn(cfg, std::slice::from_ref(started_door))?;
    let sleeper = peer.door(Offer::Sleep).clone();
    let (done_tx, done) = mpsc::channel();
    // Not a scoped thread: if lintel never releases the caller, the round fails instead of hanging.
    std::thread::Builder::new()
        .name("callee-death-caller".into())
        .spawn(move || {
            let mut reply = Reply::new();
            let result = sleeper.call(&[], &[], &mut reply);
            let _ = done_tx.send((result, Instant::now()));
        })
        .context("starting the calling thread")?;

    match started.recv_timeout(TIMEOUT) {
        Ok(()) => {}
        Err(RecvTimeoutError::Timeout) => bail!("the child's handler did not start within {TIMEOUT:?}"),
        Err(RecvTimeoutError::Disconnected) => bail!("the start signal is gone"),
    }
    let killed_at = Instant::now();
    peer.kill()?;
    let (result, returned_at) = done
        .recv_timeout(TIMEOUT)
        .map_err(|_| anyhow!("the caller was not released within {TIMEOUT:?} of killing the callee"))?;
    match result {
        Err(CallError::PeerDied) => {}
        other => bail!("the call into the killed child returned {other:?}, not PeerDied"),
    }
    drop(peer);
    Ok(returned_at.duration_since(killed_at).as_nanos() as f64)
}
