//! Deadlines and cancellation, on every path: a call that runs out of time
//! returns `TimedOut` at once, the server side is alerted (down the whole
//! chain), and the late reply never reaches a later call.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lintel::deadline::within;
use lintel::{CallError, Door, Reply, Request};
use lintel_tests::{eventually, m, Peer};

const WAIT: Duration = Duration::from_secs(5);
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
