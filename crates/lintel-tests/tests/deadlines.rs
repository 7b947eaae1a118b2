//! Deadlines and cancellation, on every path: a call that runs out of time
//! returns `TimedOut` at once, the server side is alerted (down the whole
//! chain), and the late reply never reaches a later call.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lintel::deadline::within;
use lintel::{CallError, Door, Reply, Request};
use lintel_tests::{eventually, m, Peer};

/// How long a condition that must come about may take: generous, so a busy
/// machine cannot fail a correct run (a check returns as soon as it holds).
const WAIT: Duration = Duration::from_secs(30);
/// Far longer than any deadline below: a call that waited this long was
/// not bounded by its deadline.
const LONG_MS: u64 = 20_000;

fn ms(n: u64) -> Vec<u8> {
    n.to_le_bytes().to_vec()
}

/// `ECHO_AFTER`'s arguments: sleep `sleep_ms`, then return `bytes`.
fn echo_after(sleep_ms: u64, bytes: &[u8]) -> Vec<u8> {
    let mut a = ms(sleep_ms);
    a.extend_from_slice(bytes);
    a
}

/// Run `f`, returning its result and how long it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed())
}

#[test]
fn a_server_that_never_answers_holds_its_caller_no_longer_than_the_deadline() {
    let p = Peer::start("plain");
    for (what, arg) in [
        ("fast", ms(LONG_MS)),
        ("vanilla", [ms(LONG_MS), vec![7; 100]].concat()),
    ] {
        let (r, took) = timed(|| within(Duration::from_millis(200), || p.call(m::SLEEP_PLAIN, &arg, &[])));
        assert_eq!(r.unwrap_err(), CallError::TimedOut, "{what}");
        assert!(
            took < Duration::from_secs(LONG_MS / 1000 / 2),
            "{what}: waited {took:?}"
        );
        // The thread's next call is served at once, on a slot of its own.
        assert_eq!(p.call(m::ECHO, b"next", &[]).unwrap().data, b"next", "{what}");
    }
}

#[test]
fn the_server_thread_is_alerted_when_the_deadline_passes() {
    let p = Peer::start("plain");
    let r = within(Duration::from_millis(200), || {
        p.call(m::SLEEP_ALERTABLE, &ms(LONG_MS), &[])
    });
    assert_eq!(r.unwrap_err(), CallError::TimedOut);
    assert!(
        eventually(WAIT, || p.u64(m::ALERTED_COUNT, b"") == 1),
        "server alerted"
    );
    assert_eq!(
        p.call(m::ECHO, b"next", &[]).unwrap().data,
        b"next",
        "the next call is served"
    );
}

#[test]
fn the_chain_carries_the_earliest_deadline_and_is_alerted_to_its_end() {
    // A (this test) -> B -> C.
    let c = Peer::start("plain");
    let b = Peer::start("plain");
    b.call(m::HOLD, b"", std::slice::from_ref(&c.ctl)).unwrap();
    let left = |r: Reply| u64::from_le_bytes(r.data[..8].try_into().unwrap());
    let none = b.call(m::CALL_HELD, &[m::REMAINING_MS], &[]).unwrap();
    assert_eq!(left(none), u64::MAX, "no deadline, none downstream");
    let r = within(Duration::from_secs(30), || {
        b.call(m::CALL_HELD, &[m::REMAINING_MS], &[])
    })
    .unwrap();
    let at_c = left(r);
    assert!(at_c > 0 && at_c <= 30_000, "C sees the time left: {at_c} ms");

    let mut arg = vec![m::SLEEP_ALERTABLE];
    arg.extend_from_slice(&ms(LONG_MS));
    let (r, took) = timed(|| within(Duration::from_millis(300), || b.call(m::CALL_HELD, &arg, &[])));
    assert!(r.is_err(), "the chain ran out of time");
    assert!(took < Duration::from_secs(LONG_MS / 1000 / 2), "waited {took:?}");
    assert!(
        eventually(WAIT, || c.u64(m::ALERTED_COUNT, b"") == 1),
        "C, two hops down, alerted"
    );
}

#[test]
fn late_replies_never_reach_a_later_call() {
    // Each round abandons a call whose reply comes later, then calls again
    // at once on the same thread: the answer must be the new call's.
    let p = Peer::start("plain");
    for i in 0..40u32 {
        let small = format!("late-{i}").into_bytes();
        let big = [small.clone(), vec![b'x'; 200]].concat();
        for (late, now) in [
            (small.clone(), format!("now-{i}").into_bytes()),
            (big.clone(), [b"now".as_slice(), &big].concat()),
        ] {
            let r = within(Duration::from_millis(2), || {
                p.call(m::ECHO_AFTER, &echo_after(30, &late), &[])
            });
            assert_eq!(r.unwrap_err(), CallError::TimedOut);
            assert_eq!(p.call(m::ECHO, &now, &[]).unwrap().data, now, "round {i}");
        }
    }
    std::thread::sleep(Duration::from_millis(100)); // every late reply has landed
    for i in 0..200u32 {
        let now = format!("after-{i}").into_bytes();
        assert_eq!(p.call(m::ECHO, &now, &[]).unwrap().data, now);
    }
}

#[test]
fn a_passed_deadline_fails_every_path_before_the_call() {
    let ran = Arc::new(AtomicU64::new(0));
    let r2 = ran.clone();
    let here = Door::create(0, move |_: Request<'_>, _: &mut Reply| {
        r2.fetch_add(1, SeqCst);
        Ok(())
    });
    let p = Peer::start("plain");
    within(Duration::ZERO, || {
        assert_eq!(
            here.call_bytes(b"").unwrap_err(),
            CallError::TimedOut,
            "co-located"
        );
        assert_eq!(
            p.call(m::ECHO, b"x", &[]).unwrap_err(),
            CallError::TimedOut,
            "fast"
        );
        let big = vec![1u8; 100];
        assert_eq!(
            p.call(m::ECHO, &big, &[]).unwrap_err(),
            CallError::TimedOut,
            "vanilla"
        );
        let with_door = p.call(m::ECHO, b"", std::slice::from_ref(&here));
        assert_eq!(with_door.unwrap_err(), CallError::TimedOut, "with a door");
    });
    assert_eq!(ran.load(SeqCst), 0);
    assert_eq!(
        lintel::introspect::holders(&here),
        Some(0),
        "no grant was left behind"
    );
    assert_eq!(p.call(m::ECHO, b"ok", &[]).unwrap().data, b"ok");
}

#[test]
fn a_door_handle_with_a_timeout_bounds_each_of_its_calls() {
    let p = Peer::start("plain");
    let bounded = p.ctl.with_timeout(Duration::from_millis(200));
    let (r, took) = timed(|| lintel_tests::call(&bounded, m::SLEEP_PLAIN, &ms(LONG_MS), &[]));
    assert_eq!(r.unwrap_err(), CallError::TimedOut);
    assert!(took < Duration::from_secs(LONG_MS / 1000 / 2));
    assert_eq!(
        lintel_tests::call(&bounded, m::ECHO, b"fits", &[]).unwrap().data,
        b"fits"
    );
    // The handle's timeout is its own: the plain handle waits.
    let r = lintel_tests::call(&p.ctl, m::ECHO_AFTER, &echo_after(300, b"slow"), &[]);
    assert_eq!(r.unwrap().data, b"slow");
}

#[test]
fn a_call_queued_past_its_deadline_never_runs() {
    // One server thread, busy for a while; a call with a short deadline
    // queues behind it, times out, and must not run when the thread frees.
    let p = Peer::start_with("plain", &[("LINTEL_MAX_THREADS", "1")], &[]);
    let started = Arc::new(AtomicU64::new(0));
    let s2 = started.clone();
    let signal = Door::create(0, move |_: Request<'_>, _: &mut Reply| {
        s2.fetch_add(1, SeqCst);
        Ok(())
    });
    p.call(m::HOLD, b"", &[signal]).unwrap();
    let ctl = p.ctl.clone();
    let first = std::thread::spawn(move || {
        lintel_tests::call(&ctl, m::SIGNAL_THEN_SLEEP, &ms(1_000), &[]).map(|r| r.data)
    });
    assert!(
        eventually(WAIT, || started.load(SeqCst) == 1),
        "the first call holds the thread"
    );
    let r = within(Duration::from_millis(100), || {
        p.call(m::SLEEP_ALERTABLE, &ms(1), &[])
    });
    assert_eq!(r.unwrap_err(), CallError::TimedOut);
    assert_eq!(
        first.join().unwrap().unwrap(),
        0u64.to_le_bytes(),
        "the first call ran in full"
    );
    assert_eq!(p.call(m::ECHO, b"free", &[]).unwrap().data, b"free");
    assert_eq!(p.u64(m::SLEPT_FULL, b""), 1, "only the first call slept");
    assert_eq!(
        p.u64(m::ALERTED_COUNT, b""),
        0,
        "the timed-out call never started"
    );
}

#[test]
fn cancel_returns_at_once_and_alerts_the_server() {
    let p = Peer::start("plain");
    let ctl = p.ctl.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        tx.send(lintel::shuttle::current()).unwrap();
        timed(|| lintel_tests::call(&ctl, m::SLEEP_ALERTABLE, &ms(LONG_MS), &[]).map(drop))
    });
    let caller = rx.recv().unwrap();
    assert!(
        eventually(WAIT, || p.u64(m::MAX_CONCURRENT, b"") >= 1),
        "the call runs"
    );
    caller.cancel();
    let (r, took) = t.join().unwrap();
    assert_eq!(r.unwrap_err(), CallError::Cancelled);
    assert!(took < Duration::from_secs(LONG_MS / 1000 / 2));
    assert!(
        eventually(WAIT, || p.u64(m::ALERTED_COUNT, b"") == 1),
        "server alerted"
    );
    assert_eq!(
        p.call(m::ECHO, b"next", &[]).unwrap().data,
        b"next",
        "the cancel is spent"
    );
}

#[test]
fn passing_a_third_partys_door_honours_the_calls_deadline() {
    // The third party is stopped, so it cannot make the ticket: the call
    // ends at its deadline, not after the transfer's own 5 s bound.
    let b = Peer::start("plain");
    let c = Peer::start("plain");
    let door_c = c.make_door(1);
    lintel_tests::stop_process(c.pid());
    let (r, took) = timed(|| {
        within(Duration::from_millis(200), || {
            b.call(m::HOLD, b"", std::slice::from_ref(&door_c))
        })
    });
    lintel_tests::continue_process(c.pid());
    assert_eq!(r.unwrap_err(), CallError::TimedOut);
    assert!(took < Duration::from_secs(4), "waited {took:?}");
    assert_eq!(b.call(m::ECHO, b"ok", &[]).unwrap().data, b"ok");
}

/// Where a test's server runs: in this domain (the co-located path), or in
/// a peer process (the fast and vanilla paths, as CI's passes choose).
#[derive(Clone, Copy, Debug)]
enum Placement {
    Here,
    Peer,
}

/// A control door served as `at` says (with its peer, if any, kept alive).
fn serve(at: Placement) -> (Door, Option<Peer>) {
    match at {
        Placement::Here => (lintel_tests::control::Control::new().door(), None),
        Placement::Peer => {
            let p = Peer::start("plain");
            (p.ctl.clone(), Some(p))
        }
    }
}

/// Each test below runs in both placements.
const BOTH: [Placement; 2] = [Placement::Here, Placement::Peer];

#[test]
fn a_chain_that_runs_out_of_time_gives_its_caller_timed_out_not_a_callees_error() {
    // A (this test) calls B under a deadline; B calls C, which sleeps far
    // past it. B's own call to C times out at the same deadline and B's
    // handler turns that into a fault of its own, returned at about the
    // deadline: A must get `TimedOut`, never B's fault, in every placement
    // of B and C.
    let mut wrong = Vec::new();
    for b_at in BOTH {
        for c_at in BOTH {
            let (c, _c_peer) = serve(c_at);
            let (b, _b_peer) = serve(b_at);
            lintel_tests::call(&b, m::HOLD, b"", std::slice::from_ref(&c)).unwrap();
            // C sleeps alertably (cross-process the deadline alerts it); a
            // co-located C runs on B's thread and cannot be cut short, so
            // it sleeps only a little past the deadline.
            let sleep = match c_at {
                Placement::Here => 150,
                Placement::Peer => LONG_MS,
            };
            let arg = [&[m::SLEEP_ALERTABLE][..], &ms(sleep)].concat();
            for round in 0..12 {
                let r = within(Duration::from_millis(60), || {
                    lintel_tests::call(&b, m::CALL_HELD, &arg, &[])
                });
                if r.as_ref().err() != Some(&CallError::TimedOut) {
                    wrong.push(format!("B {b_at:?}, C {c_at:?}, round {round}: {r:?}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "not TimedOut: {wrong:#?}");
}

#[test]
fn a_handler_that_returns_after_the_deadline_gives_timed_out_in_both_placements() {
    for at in BOTH {
        let (d, _peer) = serve(at);
        for (what, bytes) in [("small", b"late".to_vec()), ("vanilla", vec![7u8; 100])] {
            let r = within(Duration::from_millis(50), || {
                lintel_tests::call(&d, m::ECHO_AFTER, &echo_after(200, &bytes), &[])
            });
            assert_eq!(r.unwrap_err(), CallError::TimedOut, "{at:?} {what}");
            // A bounded handle, the same.
            let bounded = d.with_timeout(Duration::from_millis(50));
            let r = lintel_tests::call(&bounded, m::ECHO_AFTER, &echo_after(200, &bytes), &[]);
            assert_eq!(
                r.unwrap_err(),
                CallError::TimedOut,
                "{at:?} {what}, bounded handle"
            );
        }
        // One that returns in time is answered.
        let r = within(Duration::from_secs(60), || {
            lintel_tests::call(&d, m::ECHO_AFTER, &echo_after(1, b"in time"), &[])
        });
        assert_eq!(r.unwrap().data, b"in time", "{at:?}");
    }
}

#[test]
fn a_cancel_is_consumed_by_the_call_it_ends() {
    for at in BOTH {
        let (d, _peer) = serve(at);
        // No call in progress: the next one is cancelled, and its alert
        // goes with it.
        lintel::shuttle::current().cancel();
        assert!(lintel::shuttle::alerted(), "{at:?}: pending with the cancel");
        assert_eq!(
            lintel_tests::call(&d, m::ECHO, b"x", &[]).unwrap_err(),
            CallError::Cancelled,
            "{at:?}"
        );
        assert!(
            !lintel::shuttle::alerted(),
            "{at:?}: consumed by the cancelled call"
        );
        assert_eq!(
            lintel::shuttle::sleep_alertable(Duration::from_millis(1)),
            Ok(()),
            "{at:?}: the next alertable wait runs its course"
        );
        assert_eq!(lintel_tests::call(&d, m::ECHO, b"y", &[]).unwrap().data, b"y");
        // An alert of its own stays, cancel or not.
        let me = lintel::shuttle::current();
        me.alert();
        me.cancel();
        assert_eq!(
            lintel_tests::call(&d, m::ECHO, b"z", &[]).unwrap_err(),
            CallError::Cancelled,
            "{at:?}"
        );
        assert!(
            lintel::shuttle::alerted(),
            "{at:?}: the alert was not the cancel's"
        );
        lintel::shuttle::clear_alert();
    }
}

#[test]
fn a_cancel_during_a_call_leaves_no_alert_behind() {
    let p = Peer::start("plain");
    let ctl = p.ctl.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        tx.send(lintel::shuttle::current()).unwrap();
        let r = lintel_tests::call(&ctl, m::SLEEP_ALERTABLE, &ms(LONG_MS), &[]).map(drop);
        let after = lintel::shuttle::sleep_alertable(Duration::from_millis(1));
        (r, lintel::shuttle::alerted(), after)
    });
    let caller = rx.recv().unwrap();
    assert!(
        eventually(WAIT, || p.u64(m::MAX_CONCURRENT, b"") >= 1),
        "the call runs"
    );
    caller.cancel();
    let (r, alerted, after) = t.join().unwrap();
    assert_eq!(r.unwrap_err(), CallError::Cancelled);
    assert!(!alerted, "the cancel's alert went with the call it ended");
    assert_eq!(after, Ok(()), "the next alertable wait runs its course");
}
