//! Resource accounting across crashes and at scale. These tests count the
//! descriptors and shared-memory mappings of the whole test process, so
//! they live in their own binary (no other tests' peers come and go
//! meanwhile) and take turns. (Thread stacks and malloc arenas are not
//! counted: the server pool may grow under load, up to its limit.)

use std::sync::Mutex;
use std::time::Duration;

use lintel::{Buffer, CallError, Door, Loan, Reply, Request, Sealed};
use lintel_tests::{eventually, fds_and_maps, fds_and_shared_maps, m, Peer};

/// How long a condition that must come about may take: generous, so a busy
/// machine cannot fail a correct run (a check returns as soon as it holds).
const WAIT: Duration = Duration::from_secs(30);

/// Held by each test for its whole run: the counts are process-wide.
static ALONE: Mutex<()> = Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Counts once nothing has changed for 50 ms (a dead peer's teardown runs
/// on the watcher thread, after the call that saw the death returned), or
/// the last counts after [`WAIT`].
fn settled_counts() -> (usize, usize) {
    let mut last = fds_and_shared_maps();
    eventually(WAIT, || {
        std::thread::sleep(Duration::from_millis(50));
        let prev = std::mem::replace(&mut last, fds_and_shared_maps());
        prev == last
    });
    last
}

/// Run `round` once to warm up, then `n` times more: descriptors and
/// shared mappings must come back to where they were after the first (or
/// below: another test's peer may still be tearing down when they are
/// counted). A failure lists the mappings that appeared.
fn rounds_leave_nothing(n: usize, round: impl Fn()) {
    round();
    let before = settled_counts();
    let maps_before = maps();
    for _ in 0..n {
        round();
    }
    let no_growth = || {
        let now = fds_and_shared_maps();
        now.0 <= before.0 && now.1 <= before.1
    };
    assert!(
        eventually(WAIT, no_growth),
        "fds/shared maps before {before:?}, after {:?}; mappings added:\n{}",
        fds_and_shared_maps(),
        added_maps(&maps_before)
    );
}

fn maps() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    text.lines().map(str::to_string).collect()
}

/// The lines of `/proc/self/maps` now that were not in `before`.
fn added_maps(before: &[String]) -> String {
    maps()
        .into_iter()
        .filter(|l| !before.contains(l))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn repeated_crashes_leak_no_fds_or_mappings() {
    let _alone = alone();
    let round = || {
        let mut p = Peer::start("plain");
        let d = p.make_door(1);
        d.call_bytes(&[7u8; 100]).unwrap();
        let mine = Door::create(3, |_: Request<'_>, _: &mut Reply| Ok(()));
        p.call(m::HOLD, b"", &[mine]).unwrap();
        p.call(m::CALL_HELD, b"", &[]).unwrap();
        p.kill();
        assert_eq!(d.call_bytes(b"").unwrap_err(), CallError::PeerDied);
    };
    rounds_leave_nothing(10, round);
    assert_eq!(lintel::introspect::tickets(), 0);
}

/// A peer killed while it holds our loans and snapshots, while a call
/// carrying them is in flight, and after bulk data went both ways: every
/// loan comes back to our pool, and our descriptors and mappings do not
/// grow over rounds (bulk segments, the peer's pool and its snapshots go
/// with the connection, or with the last buffer we held of it).
#[test]
fn peers_killed_with_buffers_in_flight_or_on_loan_leak_nothing() {
    let _alone = alone();
    let loan = |n: usize| {
        let mut l = Loan::new(n).unwrap();
        l.as_mut_slice().fill(5);
        Buffer::Loan(l)
    };
    let round = || {
        let mut p = Peer::start("plain");
        let big = vec![9u8; 3 << 20];
        assert_eq!(p.call(m::ECHO, &big, &[]).unwrap().data, big);
        let mut reply = Reply::new();
        let keep = vec![
            loan(1 << 20),
            loan(5000),
            Buffer::Sealed(Sealed::from_slice(&big).unwrap()),
        ];
        p.ctl
            .call_with(&[m::KEEP_BUFFERS], &[], keep, &mut reply)
            .unwrap();
        let theirs = lintel_tests::call(&p.ctl, m::RETURN_LOAN, &(2u64 << 20).to_le_bytes(), &[])
            .unwrap()
            .buffers;
        assert!(lintel::buffer::lent_bytes() >= (1 << 20) + 8192);
        // A call carrying a loan, in flight when the peer dies.
        let ctl = p.ctl.clone();
        let in_flight = std::thread::spawn(move || {
            let arg = [&[m::SLEEP_ALERTABLE][..], &5000u64.to_le_bytes()].concat();
            ctl.call_with(&arg, &[], vec![loan(1 << 20)], &mut Reply::new())
        });
        std::thread::sleep(Duration::from_millis(50));
        p.kill();
        assert_eq!(in_flight.join().unwrap().unwrap_err(), CallError::PeerDied);
        // A loan of the dead peer's pool stays readable while we hold it.
        assert_eq!(theirs.len(), 1);
        assert_eq!(
            lintel_tests::buffer_bytes(&theirs[0]),
            lintel_tests::pattern(2 << 20)
        );
        drop(theirs);
        assert!(
            eventually(WAIT, || lintel::buffer::lent_bytes() == 0),
            "loans still out after their holder died: {} bytes",
            lintel::buffer::lent_bytes()
        );
    };
    rounds_leave_nothing(8, round);
}

/// The other way round: a peer that called us with bulk data, a loan and a
/// sealed snapshot, which we keep, is killed. Its loan stays readable
/// while we hold it; once we drop what we kept, nothing of it is left
/// here (its call area, bulk segment, pool and snapshot mappings go).
#[test]
fn a_caller_killed_after_lending_to_us_leaves_nothing_once_we_drop_its_buffers() {
    let _alone = alone();
    let kept = std::sync::Arc::new(Mutex::new(Vec::<Buffer>::new()));
    let keeper = {
        let kept = kept.clone();
        Door::create(0, move |req: Request<'_>, reply: &mut Reply| {
            reply
                .data
                .extend_from_slice(&(req.data.len() as u64).to_le_bytes());
            kept.lock().unwrap().extend(req.buffers);
            Ok(())
        })
    };
    let round = || {
        let mut p = Peer::start("plain");
        p.call(m::HOLD, b"", std::slice::from_ref(&keeper)).unwrap();
        let n = 200_000u64;
        let r = p.call(m::CALL_HELD_WITH_BUFFERS, &n.to_le_bytes(), &[]).unwrap();
        assert_eq!(r.data, n.to_le_bytes(), "the bulk data reached us");
        p.kill();
        let bufs = std::mem::take(&mut *kept.lock().unwrap());
        assert_eq!(bufs.len(), 2);
        for b in &bufs {
            assert_eq!(lintel_tests::buffer_bytes(b), lintel_tests::pattern(n as usize));
        }
        drop(bufs);
    };
    rounds_leave_nothing(8, round);
}

/// A loan the handler lets go of comes back with the reply: the pool has
/// it again the moment the call returns, so a caller handing off loan
/// after loan never waits for returns (and never finds its pool full).
#[test]
fn a_loan_the_handler_drops_comes_back_with_the_reply() {
    let _alone = alone();
    let p = Peer::start("plain");
    for i in 0..300 {
        let mut l = Loan::new(16 << 20).unwrap();
        l.as_mut_slice()[0] = i as u8;
        let r = lintel_tests::call_with(&p.ctl, m::BUFFERS_INFO, b"", vec![Buffer::Loan(l)]).unwrap();
        assert_eq!(r.data.len(), 24, "one buffer described");
        assert_eq!(lintel::buffer::lent_bytes(), 0, "call {i}: the loan is still out");
    }
}

/// The other way round: loans of the server's that the caller drops come
/// back, whether a later call carries their return (a request with more
/// than 16 bytes of data takes the path that does, in the common case) or
/// the watcher sends it (a one-byte request takes the fast path, which
/// carries none). Every call that carries returns is answered.
#[test]
fn loans_the_caller_drops_come_back_with_its_calls_or_without() {
    let _alone = alone();
    let p = Peer::start("plain");
    let lent =
        |arg: &[u8]| u64::from_le_bytes(p.call(m::LENT, arg, &[]).unwrap().data[..8].try_into().unwrap());
    let carried = [0u8; 63];
    for i in 0..200 {
        let mut theirs = Vec::new();
        for _ in 0..1 + i % 20 {
            let r = lintel_tests::call(&p.ctl, m::RETURN_LOAN, &(64u64 << 10).to_le_bytes(), &[]).unwrap();
            theirs.extend(r.buffers);
        }
        let n = theirs.len() as u64;
        assert_eq!(
            lent(&carried),
            n * (64 << 10),
            "round {i}: the loans are out while held"
        );
        drop(theirs);
        assert!(
            eventually(WAIT, || lent(&carried) == 0),
            "round {i}: {n} loans dropped before calls that carry returns never came back"
        );
    }
    let theirs = lintel_tests::call(&p.ctl, m::RETURN_LOAN, &4096u64.to_le_bytes(), &[])
        .unwrap()
        .buffers;
    drop(theirs);
    assert!(
        eventually(WAIT, || lent(&[]) == 0),
        "a loan dropped with no call after it never came back"
    );
}

#[test]
fn a_million_doors_in_one_domain_without_a_million_fds() {
    let _alone = alone();
    let p = Peer::start("plain");
    let (fds_before, _) = fds_and_maps();
    let n = 1_000_000u64;
    let batch = lintel::abi::MAX_DOORS as u64;
    let mut held = Vec::with_capacity(n as usize);
    while (held.len() as u64) < n {
        let k = batch.min(n - held.len() as u64);
        let mut r = p.call(m::MAKE_MANY, &k.to_le_bytes(), &[]).unwrap();
        held.append(&mut r.doors);
    }
    assert_eq!(held.len() as u64, n);
    let (fds_after, _) = fds_and_maps();
    assert!(
        fds_after <= fds_before + 2,
        "doors cost no descriptors: {fds_before} -> {fds_after}"
    );
    for i in [0usize, 12_345, 999_999] {
        let r = held[i].call_bytes(b"").unwrap();
        assert_eq!(r, ((i as u64) % batch).to_le_bytes());
    }
}
