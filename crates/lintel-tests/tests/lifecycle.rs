//! Reference counting, revocation, failure and threads, with real processes
//! that exit and are killed.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lintel::{CallError, Door, Reply, Request};
use lintel_tests::{eventually, m, Peer};

/// How long a condition that must come about may take: generous, so a busy
/// machine cannot fail a correct run (a check returns as soon as it holds).
const WAIT: Duration = Duration::from_secs(30);

fn counting_door(count: Arc<AtomicU64>) -> Door {
    Door::create_with_unref(
        9,
        |_: Request<'_>, _: &mut Reply| Ok(()),
        move |_| {
            count.fetch_add(1, SeqCst);
        },
    )
}

#[test]
fn unreferenced_once_per_transition_and_again_after_reuse() {
    let p = Peer::start("plain");
    let d = p.make_door(1);
    d.call_bytes(b"").unwrap();
    assert_eq!(p.u64(m::UNREF_COUNT, b""), 0, "still held");
    drop(d);
    assert!(eventually(WAIT, || p.u64(m::UNREF_COUNT, b"") == 1));
    // Handed out again, released again: one more.
    let d = p.door(m::GIVE_MADE, 0);
    d.call_bytes(b"").unwrap();
    drop(d);
    assert!(eventually(WAIT, || p.u64(m::UNREF_COUNT, b"") == 2));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(p.u64(m::UNREF_COUNT, b""), 2, "exactly one per transition");
}

/// A door whose holders have all let go goes then, with the object behind
/// it (a file and its locks), even while the thread that served its last
/// call waits, bound to the caller's slot, for a next call that may never
/// come.
#[test]
fn a_released_door_goes_while_its_last_server_waits_for_more() {
    use std::sync::mpsc::channel;
    let p = Arc::new(Peer::start("plain"));
    // An observer thread with a server thread of its own in the peer (its
    // slot's): its questions queue no work that would make the server
    // thread bound to our slot let go.
    let (ready_tx, ready_rx) = channel();
    let (go_tx, go_rx) = channel::<()>();
    let q = p.clone();
    let observer = std::thread::spawn(move || {
        assert_eq!(q.u64(m::HANDLERS_DROPPED, b""), 0);
        ready_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        eventually(WAIT, || q.u64(m::HANDLERS_DROPPED, b"") == 1)
    });
    ready_rx.recv().unwrap();
    let d = p.door(m::MAKE_UNKEPT, 0);
    assert_eq!(d.call_bytes(b"x").unwrap(), b"x");
    drop(d);
    // This thread calls no more.
    go_tx.send(()).unwrap();
    assert!(observer.join().unwrap(), "the door's handler was never dropped");
}

#[test]
fn holder_killed_counts_as_released() {
    let unrefs = Arc::new(AtomicU64::new(0));
    let door = counting_door(unrefs.clone());
    let mut a = Peer::start("plain");
    let b = Peer::start("plain");
    a.call(m::HOLD, b"", std::slice::from_ref(&door)).unwrap();
    b.call(m::HOLD, b"", std::slice::from_ref(&door)).unwrap();
    a.kill();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(unrefs.load(SeqCst), 0, "B still holds it");
    b.call(m::DROP_HELD, b"", &[]).unwrap();
    assert!(eventually(WAIT, || unrefs.load(SeqCst) == 1));
}

#[test]
fn third_party_holder_release_reaches_the_server() {
    let unrefs = Arc::new(AtomicU64::new(0));
    let door = counting_door(unrefs.clone());
    let b = Peer::start("plain");
    let c = Peer::start("plain");
    // B hands our door on to C (a third party for B): C holds it directly.
    b.call(m::HOLD, b"", std::slice::from_ref(&door)).unwrap();
    let b_copy = b.call(m::RETURN_HELD, b"", &[]).unwrap().doors;
    assert!(b_copy[0].same(&door));
    let c_door = c.make_door(0);
    drop(c_door);
    c.call(m::HOLD, b"", std::slice::from_ref(&door)).unwrap();
    b.call(m::DROP_HELD, b"", &[]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(unrefs.load(SeqCst), 0, "C still holds it");
    assert_eq!(c.call(m::CALL_HELD, b"", &[]).unwrap().data, b"");
    c.call(m::DROP_HELD, b"", &[]).unwrap();
    assert!(eventually(WAIT, || unrefs.load(SeqCst) == 1));
}

#[test]
fn revoke_fails_every_later_call_and_unreferenced_follows() {
    let p = Peer::start("plain");
    let q = Peer::start("plain");
    let d = p.make_door(5);
    q.call(m::HOLD, b"", std::slice::from_ref(&d)).unwrap();
    d.call_bytes(b"").unwrap();
    p.call(m::REVOKE_MADE, &0u64.to_le_bytes(), &[]).unwrap();
    assert_eq!(d.call_bytes(b"").unwrap_err(), CallError::Revoked);
    assert_eq!(
        q.call(m::CALL_HELD, b"", &[]).unwrap_err(),
        CallError::Fault(102),
        "revoked in Q too"
    );
    assert!(eventually(WAIT, || p.u64(m::UNREF_COUNT, b"") == 1));
}

#[test]
fn revoke_on_a_local_door_is_seen_by_colocated_callers() {
    let d = Door::create(1, |_: Request<'_>, _: &mut Reply| Ok(()));
    d.call_bytes(b"").unwrap();
    d.revoke().unwrap();
    assert_eq!(d.call_bytes(b"").unwrap_err(), CallError::Revoked);
}

#[test]
fn callee_killed_mid_call_fails_every_caller_promptly() {
    let mut p = Peer::start("plain");
    let ctl = p.ctl.clone();
    let callers: Vec<_> = (0..3)
        .map(|_| {
            let ctl = ctl.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                let r = lintel_tests::call(&ctl, m::SLEEP_PLAIN, &20_000u64.to_le_bytes(), &[]);
                (r.map(|_| ()), t.elapsed())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    p.kill();
    for c in callers {
        let (r, took) = c.join().unwrap();
        assert_eq!(r.unwrap_err(), CallError::PeerDied);
        assert!(
            took < Duration::from_secs(10),
            "returned on death, not after the sleep"
        );
    }
    assert_eq!(ctl.call_bytes(b"\0").unwrap_err(), CallError::PeerDied);
}

#[test]
fn caller_killed_mid_call_alerts_the_server_thread() {
    let server = Peer::start("plain");
    let mut client = Peer::start("plain");
    client
        .call(m::HOLD, b"", std::slice::from_ref(&server.ctl))
        .unwrap();
    // The client calls the server's alertable sleep through its held door.
    let ctl = client.ctl.clone();
    let mut arg = vec![m::SLEEP_ALERTABLE];
    arg.extend_from_slice(&30_000u64.to_le_bytes());
    let t = std::thread::spawn(move || lintel_tests::call(&ctl, m::CALL_HELD, &arg, &[]).map(|_| ()));
    assert!(eventually(WAIT, || server.u64(m::MAX_CONCURRENT, b"") >= 1));
    client.kill();
    assert_eq!(t.join().unwrap().unwrap_err(), CallError::PeerDied);
    assert!(
        eventually(WAIT, || server.u64(m::ALERTED_COUNT, b"") == 1),
        "server thread alerted"
    );
    assert_eq!(server.call(m::ECHO, b"alive", &[]).unwrap().data, b"alive");
}

/// A call still running when its caller is killed goes on to its end, and
/// `settle_dead` waits for that end: what the dead caller's calls change is
/// whole once it returns, as a killed process's system calls are once it is
/// reaped. The handler here ignores the death's alert and waits for a
/// release, so the order is the test's, not the scheduler's.
#[test]
fn settle_dead_waits_for_the_calls_a_killed_caller_left_running() {
    let server = Peer::start("plain");
    let mut client = Peer::start("plain");
    client
        .call(m::HOLD, b"", std::slice::from_ref(&server.ctl))
        .unwrap();
    let ctl = client.ctl.clone();
    let t = std::thread::spawn(move || {
        lintel_tests::call(&ctl, m::CALL_HELD, &[m::HOLD_UNTIL_RELEASED], &[]).map(|_| ())
    });
    assert!(eventually(WAIT, || server.u64(m::MAX_CONCURRENT, b"") >= 1));
    let pid = client.pid();
    client.kill();
    assert_eq!(t.join().unwrap().unwrap_err(), CallError::PeerDied);
    let settle = |pid: u32, ms: u64| {
        let mut arg = pid.to_le_bytes().to_vec();
        arg.extend_from_slice(&ms.to_le_bytes());
        server.u64(m::SETTLE_DEAD, &arg)
    };
    // Reaped, and its call still runs: not settled.
    assert_eq!(settle(pid, 0), 0, "settled while the dead caller's call runs");
    assert_eq!(server.u64(m::HELD_ENDED, b""), 0);
    let release = {
        let ctl = server.ctl.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            lintel_tests::call(&ctl, m::RELEASE, b"", &[]).unwrap();
        })
    };
    assert_eq!(settle(pid, 60_000), 1, "the dead caller's call ended");
    assert_eq!(server.u64(m::HELD_ENDED, b""), 1, "settled before the call ended");
    release.join().unwrap();
    // A live process, or one that never called: nothing to wait for.
    assert_eq!(settle(std::process::id(), 0), 1);
}

#[test]
fn death_in_the_middle_of_a_chain() {
    // A (this test) -> B -> C; B dies while C sleeps.
    let c = Peer::start("plain");
    let mut b = Peer::start("plain");
    b.call(m::HOLD, b"", std::slice::from_ref(&c.ctl)).unwrap();
    let ctl = b.ctl.clone();
    let mut arg = vec![m::SLEEP_ALERTABLE];
    arg.extend_from_slice(&30_000u64.to_le_bytes());
    let t = std::thread::spawn(move || {
        let start = Instant::now();
        (
            lintel_tests::call(&ctl, m::CALL_HELD, &arg, &[]).map(|_| ()),
            start.elapsed(),
        )
    });
    assert!(eventually(WAIT, || c.u64(m::MAX_CONCURRENT, b"") >= 1));
    b.kill();
    let (r, took) = t.join().unwrap();
    assert_eq!(r.unwrap_err(), CallError::PeerDied);
    assert!(took < Duration::from_secs(10));
    assert!(
        eventually(WAIT, || c.u64(m::ALERTED_COUNT, b"") == 1),
        "C alerted"
    );
}

#[test]
fn alert_propagates_to_the_server_thread() {
    let c = Peer::start("plain");
    let b = Peer::start("plain");
    b.call(m::HOLD, b"", std::slice::from_ref(&c.ctl)).unwrap();
    let ctl = b.ctl.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        tx.send(lintel::shuttle::current()).unwrap();
        let mut arg = vec![m::SLEEP_ALERTABLE];
        arg.extend_from_slice(&30_000u64.to_le_bytes());
        // A -> B -> C: the alert must travel two hops.
        lintel_tests::call(&ctl, m::CALL_HELD, &arg, &[]).unwrap().data
    });
    let shuttle = rx.recv().unwrap();
    assert!(eventually(WAIT, || c.u64(m::MAX_CONCURRENT, b"") >= 1));
    shuttle.alert();
    let data = t.join().unwrap();
    assert_eq!(data, 1u64.to_le_bytes(), "C's sleep ended by the alert");
}

#[test]
fn alert_on_a_call_still_waiting_for_a_server_thread_is_kept() {
    // One server thread: the first call holds it (2 s) while the second
    // waits for it, and the second's caller is alerted meanwhile. The
    // second's handler must see the alert when it starts, though no server
    // thread ran the call when the alert came. (Nothing else may call the
    // peer meanwhile: it would queue behind the first call too.)
    let p = Peer::start_with("plain", &[("LINTEL_MAX_THREADS", "1")], &[]);
    let sleep = |ms: u64| {
        let ctl = p.ctl.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            tx.send(lintel::shuttle::current()).unwrap();
            lintel_tests::call(&ctl, m::SLEEP_ALERTABLE, &ms.to_le_bytes(), &[]).map(|r| r.data)
        });
        (rx.recv().unwrap(), t)
    };
    let (_, first) = sleep(2_000);
    std::thread::sleep(Duration::from_millis(300)); // the first runs
    let (second_shuttle, second) = sleep(30_000);
    std::thread::sleep(Duration::from_millis(300)); // the second waits
    let start = Instant::now();
    second_shuttle.alert();
    assert_eq!(
        first.join().unwrap().unwrap(),
        0u64.to_le_bytes(),
        "first call not alerted"
    );
    assert_eq!(
        second.join().unwrap().unwrap(),
        1u64.to_le_bytes(),
        "the queued call's handler saw the alert"
    );
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "the alert cut the second sleep short"
    );
    assert_eq!(
        p.u64(m::MAX_CONCURRENT, b""),
        1,
        "the second call waited for the thread"
    );
}

#[test]
fn exhausted_pool_makes_calls_wait_not_fail() {
    let p = Peer::start_with("plain", &[("LINTEL_MAX_THREADS", "2")], &[]);
    let ctl = p.ctl.clone();
    let ts: Vec<_> = (0..5)
        .map(|_| {
            let ctl = ctl.clone();
            std::thread::spawn(move || {
                lintel_tests::call(&ctl, m::SLEEP_ALERTABLE, &100u64.to_le_bytes(), &[]).map(|r| r.data)
            })
        })
        .collect();
    for t in ts {
        assert_eq!(t.join().unwrap().unwrap(), 0u64.to_le_bytes());
    }
    assert!(p.u64(m::MAX_CONCURRENT, b"") <= 2, "limit respected");
    assert!(p.u64(m::POOL_SHORTAGES, b"") >= 1, "shortage reported");
    assert!(
        p.u64(m::SHORTAGES_WATCHED, b"") >= 1,
        "the application's shortage watcher was called, with the pool at its limit"
    );
}

#[test]
fn calls_from_many_threads_in_many_processes_run_in_parallel() {
    let server = Peer::start("plain");
    let clients: Vec<Peer> = (0..3).map(|_| Peer::start("plain")).collect();
    for c in &clients {
        c.call(m::HOLD, b"", std::slice::from_ref(&server.ctl)).unwrap();
    }
    let mut ts = Vec::new();
    for c in &clients {
        for _ in 0..2 {
            let ctl = c.ctl.clone();
            ts.push(std::thread::spawn(move || {
                let mut arg = vec![m::SLEEP_ALERTABLE];
                arg.extend_from_slice(&50u64.to_le_bytes());
                for _ in 0..4 {
                    lintel_tests::call(&ctl, m::CALL_HELD, &arg, &[]).unwrap();
                }
                for i in 0..200u32 {
                    let mut e = vec![m::ECHO];
                    e.extend_from_slice(&i.to_le_bytes());
                    let r = lintel_tests::call(&ctl, m::CALL_HELD, &e, &[]).unwrap();
                    assert_eq!(r.data, i.to_le_bytes());
                }
            }));
        }
    }
    for t in ts {
        t.join().unwrap();
    }
    assert!(server.u64(m::MAX_CONCURRENT, b"") >= 2, "calls ran in parallel");
}

#[test]
fn a_dead_servers_door_passes_on_as_a_dead_door() {
    let b = Peer::start("plain");
    let mut c = Peer::start("plain");
    let door_c = c.make_door(1);
    c.kill();
    assert!(eventually(WAIT, || door_c.call_bytes(b"").unwrap_err()
        == CallError::PeerDied));
    // Passing it on is not an error of the call that carries it: B receives
    // a door that fails as it fails here, and says which process served it.
    b.call(m::HOLD, b"", std::slice::from_ref(&door_c)).unwrap();
    assert_eq!(b.call(m::CALL_HELD, b"", &[]).unwrap_err(), CallError::Fault(101));
    let r = b
        .call(m::SERVER_PID_OF_PASSED, b"", std::slice::from_ref(&door_c))
        .unwrap();
    assert_eq!(
        u64::from_le_bytes(r.data[..8].try_into().unwrap()) as u32,
        c.pid()
    );
    assert_eq!(b.call(m::ECHO, b"alive", &[]).unwrap().data, b"alive");
}

#[test]
fn doors_passed_to_a_dead_peer_are_not_left_held() {
    // Calls on a dead peer's door fail; the doors they carried must not stay
    // counted as held by it: once a live holder lets go, the door is
    // unreferenced.
    let unrefs = Arc::new(AtomicU64::new(0));
    let door = counting_door(unrefs.clone());
    let mut dead = Peer::start("plain");
    let dead_ctl = dead.ctl.clone();
    let pid = dead.pid();
    dead.kill();
    assert!(eventually(WAIT, || dead_ctl.call_bytes(b"\0").unwrap_err()
        == CallError::PeerDied));
    assert!(eventually(WAIT, || !lintel::introspect::connected_to(pid)));
    for _ in 0..3 {
        let r = lintel_tests::call(&dead_ctl, m::HOLD, b"", std::slice::from_ref(&door));
        assert_eq!(r.unwrap_err(), CallError::PeerDied);
    }
    assert!(
        not_held(&door, &unrefs),
        "the door is still counted as held by the dead peer"
    );
}

/// Nobody is counted as holding `door` (soon); a live holder that takes it
/// and lets it go leaves it so again, and it has been unreferenced.
fn not_held(door: &Door, unrefs: &AtomicU64) -> bool {
    let none = || eventually(WAIT, || lintel::introspect::holders(door) == Some(0));
    if !none() {
        return false;
    }
    let b = Peer::start("plain");
    b.call(m::HOLD, b"", std::slice::from_ref(door)).unwrap();
    assert_eq!(lintel::introspect::holders(door), Some(1));
    b.call(m::DROP_HELD, b"", &[]).unwrap();
    none() && eventually(WAIT, || unrefs.load(SeqCst) >= 1)
}

#[test]
fn a_call_whose_later_door_fails_takes_back_the_earlier_grants() {
    // The second door is a third party's that cannot make a ticket (it is
    // stopped, so the transfer times out): the call fails, and the grant
    // already made for the first door must not stay with the callee.
    let unrefs = Arc::new(AtomicU64::new(0));
    let door = counting_door(unrefs.clone());
    let b = Peer::start("plain");
    let c = Peer::start("plain");
    let door_c = c.make_door(1);
    lintel_tests::stop_process(c.pid());
    let r = b.call(m::HOLD, b"", &[door.clone(), door_c]);
    lintel_tests::continue_process(c.pid());
    assert!(r.is_err(), "the third party could not pass its door");
    assert_eq!(b.call(m::ECHO, b"x", &[]).unwrap().data, b"x");
    assert!(
        not_held(&door, &unrefs),
        "the failed call's grant still counts the callee as a holder"
    );
}

#[test]
fn a_grant_is_never_made_on_a_connection_torn_down_during_the_call() {
    // The first door's transfer waits for a stopped third party; meanwhile
    // the callee dies and its connection is torn down. The second door is
    // encoded after that: it must not be granted to the dead callee.
    let unrefs = Arc::new(AtomicU64::new(0));
    let door = counting_door(unrefs.clone());
    let mut b = Peer::start("plain");
    let c = Peer::start("plain");
    let door_c = c.make_door(1);
    let b_ctl = b.ctl.clone();
    let b_pid = b.pid();
    lintel_tests::stop_process(c.pid());
    let d = door.clone();
    let t = std::thread::spawn(move || lintel_tests::call(&b_ctl, m::HOLD, b"", &[door_c, d]).map(drop));
    std::thread::sleep(Duration::from_millis(300)); // the call waits for C's ticket
    b.kill();
    assert!(eventually(WAIT, || !lintel::introspect::connected_to(b_pid)));
    lintel_tests::continue_process(c.pid());
    assert!(t.join().unwrap().is_err());
    assert!(
        not_held(&door, &unrefs),
        "the dead callee's connection still counts as a holder"
    );
}

#[test]
fn a_refused_call_leaves_its_doors_to_the_caller() {
    // The server refuses the call (its door is revoked) before it takes the
    // door passed with it: the caller takes its grant back.
    let unrefs = Arc::new(AtomicU64::new(0));
    let door = counting_door(unrefs.clone());
    let p = Peer::start("plain");
    let target = p.make_door(1);
    p.call(m::REVOKE_MADE, &0u64.to_le_bytes(), &[]).unwrap();
    let mut reply = Reply::new();
    let r = target.call(b"", std::slice::from_ref(&door), &mut reply);
    assert_eq!(r.unwrap_err(), CallError::Revoked);
    assert!(not_held(&door, &unrefs));
}

#[test]
fn queued_calls_of_a_dead_caller_do_not_run_on_unalerted() {
    // The server has one thread; the caller makes two long alertable calls
    // at once (one runs, one waits for the thread) and is killed. The
    // running call is alerted; the waiting one must not then run its full
    // length as if its caller were alive.
    let server = Peer::start_with("plain", &[("LINTEL_MAX_THREADS", "1")], &[]);
    let mut caller = Peer::start("plain");
    caller
        .call(m::HOLD, b"", std::slice::from_ref(&server.ctl))
        .unwrap();
    let ctl = caller.ctl.clone();
    let mut arg = vec![2, m::SLEEP_ALERTABLE];
    arg.extend_from_slice(&3_000u64.to_le_bytes());
    let t = std::thread::spawn(move || lintel_tests::call(&ctl, m::CALL_HELD_PARALLEL, &arg, &[]).map(drop));
    // Polling the server would queue behind the calls: give them time to
    // start instead (a slow start leaves nothing queued, and nothing to see).
    std::thread::sleep(Duration::from_millis(500));
    caller.kill();
    assert!(t.join().unwrap().is_err());
    // The server's one thread is free again (this call waits for it).
    assert_eq!(server.call(m::ECHO, b"free", &[]).unwrap().data, b"free");
    assert_eq!(
        server.u64(m::SLEPT_FULL, b""),
        0,
        "a call of the dead caller ran to its end unalerted"
    );
}

#[test]
fn dropping_many_doors_sends_their_releases_in_a_few_messages() {
    let p = Peer::start("plain");
    let counted: Vec<Door> = (0..64).map(|i| p.make_door(i)).collect();
    let mut held = counted;
    for _ in 0..64 {
        let k = lintel::abi::MAX_DOORS as u64;
        held.append(&mut p.call(m::MAKE_MANY, &k.to_le_bytes(), &[]).unwrap().doors);
    }
    let n = held.len() as u64;
    let before = lintel::introspect::release_messages_to(p.pid());
    drop(held);
    assert!(
        eventually(WAIT, || p.u64(m::UNREF_COUNT, b"") == 64),
        "every counted door was released"
    );
    let sent = lintel::introspect::release_messages_to(p.pid()) - before;
    eprintln!("{n} doors dropped, {sent} release messages");
    assert!(
        sent >= 1 && sent <= n / 8,
        "{n} doors dropped, {sent} release messages"
    );
}

/// A child made by `fork` (in this multithreaded test process) that calls
/// `lintel::after_fork` gets a domain of its own: its doors to the
/// parent's peers fail with `PeerDied` instead of writing into the
/// parent's call slots, its co-located doors work, and it can start and
/// call a peer of its own. The parent's calls go on undisturbed, also
/// while the child runs.
#[test]
fn a_forked_child_gets_a_domain_of_its_own() {
    let p = Peer::start("plain");
    assert_eq!(p.call(m::ECHO, b"before", &[]).unwrap().data, b"before");
    let local = Door::create(5, |req: Request<'_>, reply: &mut Reply| {
        reply.data.extend_from_slice(req.data);
        Ok(())
    });
    // SAFETY: the child runs only the code below and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        lintel::after_fork();
        let code = (|| {
            if lintel_tests::call(&p.ctl, m::ECHO, b"child", &[]).err() != Some(CallError::PeerDied) {
                return 2;
            }
            let mut r = Reply::new();
            if local.call(b"here", &[], &mut r).is_err() || r.data != b"here" {
                return 3;
            }
            let q = Peer::start("plain");
            for _ in 0..200 {
                if q.call(m::ECHO, b"own", &[]).map(|r| r.data).ok().as_deref() != Some(&b"own"[..]) {
                    return 4;
                }
            }
            if lintel::introspect::connections() != 1 {
                return 5;
            }
            0
        })();
        // SAFETY: leaves the child at once, running nothing of the parent's.
        unsafe { libc::_exit(code) };
    }
    for i in 0..2000u32 {
        let d = i.to_le_bytes();
        assert_eq!(p.call(m::ECHO, &d, &[]).unwrap().data, d);
    }
    let mut status = 0;
    // SAFETY: polls our own child (a child stuck on a lock its parent's
    // threads held at the fork fails the test instead of hanging it).
    let ended = lintel_tests::eventually(Duration::from_secs(60), || unsafe {
        libc::waitpid(pid, &mut status, libc::WNOHANG) == pid
    });
    if !ended {
        // SAFETY: our own child, stuck.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, &mut status, 0);
        }
    }
    assert!(ended, "the forked child hung");
    assert!(libc::WIFEXITED(status), "the child died: {status:#x}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "the child's check that failed");
    assert_eq!(p.call(m::ECHO, b"after", &[]).unwrap().data, b"after");
    // What the fork may not leave in the parent, asked of these two peers
    // alone (the process-wide count moves with the tests running beside).
    assert!(
        lintel::introspect::connected_to(p.pid()),
        "the parent kept its connection"
    );
    assert!(
        !lintel::introspect::connected_to(pid as u32),
        "the child left a connection behind in the parent"
    );
}

/// The server pool's threads, idle threads, and alertable sleeps running.
fn pool_state(p: &Peer) -> (u64, u64, u64) {
    let r = p.call(m::POOL_STATE, b"", &[]).expect("pool state");
    let v = |i: usize| u64::from_le_bytes(r.data[8 * i..8 * i + 8].try_into().unwrap());
    (v(0), v(1), v(2))
}

#[test]
fn server_threads_of_a_killed_caller_go_idle_when_its_calls_end() {
    killed_caller_leaves_every_server_thread_idle(m::CALL_HELD_PARALLEL, 6);
}

/// The same, for a caller whose calls are awaited by tasks of one thread
/// (parked, with no thread of the caller's per call).
#[test]
fn server_threads_of_a_killed_async_caller_go_idle_when_its_calls_end() {
    killed_caller_leaves_every_server_thread_idle(m::CALL_HELD_AWAITED, 4);
}

/// Four alertable calls of a caller (made by its method `calls`) killed
/// 0-200 ms into them: every handler is alerted and returns; then the four
/// threads that ran them must be idle again, not asleep on the dead
/// caller's slots (the pool counts a thread bound to a slot as busy). The
/// one thread left busy serves this test's own calls. The handlers would
/// sleep a minute, longer than the bound: only an alert ends them in time.
/// (The rule is model-checked in `handshake`:
/// a_server_busy_when_its_caller_dies_lets_go_of_the_slot.)
fn killed_caller_leaves_every_server_thread_idle(calls: u8, rounds: u64) {
    const BOUND: Duration = Duration::from_secs(30);
    let server = Peer::start_with("plain", &[("LINTEL_MAX_THREADS", "5")], &[]);
    for round in 0..rounds {
        let mut caller = Peer::start("plain");
        caller
            .call(m::HOLD, b"", std::slice::from_ref(&server.ctl))
            .unwrap();
        let mut arg = vec![4, m::SLEEP_ALERTABLE];
        arg.extend_from_slice(&60_000u64.to_le_bytes());
        let ctl = caller.ctl.clone();
        let t = std::thread::spawn(move || lintel_tests::call(&ctl, calls, &arg, &[]));
        assert!(
            eventually(BOUND, || pool_state(&server).2 == 4),
            "round {round}: the four calls run"
        );
        std::thread::sleep(Duration::from_millis(round * 40));
        caller.kill();
        let _ = t.join();
        assert!(
            eventually(BOUND, || pool_state(&server).2 == 0),
            "round {round}: every handler was alerted and returned"
        );
        assert!(
            eventually(BOUND, || {
                let (threads, idle, _) = pool_state(&server);
                threads == idle + 1
            }),
            "round {round}: threads left busy: {:?}",
            pool_state(&server)
        );
        assert_eq!(server.call(m::ECHO, b"on", &[]).unwrap().data, b"on");
    }
}
