//! Calls awaited by tasks (`Door::call_async`), across real processes:
//! results on every path, many calls in flight from one thread, dropping
//! a call's future, deadlines, the server's death.

use std::time::Duration;

use lintel::{CallError, Door, Reply};
use lintel_tests::{m, Peer};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn request(method: u8, arg: &[u8]) -> Vec<u8> {
    [&[method][..], arg].concat()
}

async fn call(door: &Door, method: u8, arg: &[u8]) -> Result<Reply, CallError> {
    door.call_async(&request(method, arg), &[]).await
}

/// `n` calls of `GATHER n` made at once from tasks of this thread: how many
/// saw all `n` inside the server together.
async fn gather(door: &Door, n: u64) -> u64 {
    let set = tokio::task::LocalSet::new();
    set.run_until(async {
        let calls: Vec<_> = (0..n)
            .map(|_| {
                let door = door.clone();
                tokio::task::spawn_local(async move { call(&door, m::GATHER, &n.to_le_bytes()).await })
            })
            .collect();
        let mut all = 0;
        for c in calls {
            all += u64::from_le_bytes(c.await.unwrap().unwrap().data[..8].try_into().unwrap());
        }
        all
    })
    .await
}

#[test]
fn awaited_calls_answer_as_blocking_ones_on_every_path() {
    let p = Peer::start("plain");
    runtime().block_on(async {
        for len in [0usize, 1, 15, 16, 17, 1024, 5 * 1024, 100_000] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let r = call(&p.ctl, m::ECHO, &data).await.unwrap();
            assert_eq!(r.data, data, "echo of {len} bytes");
        }
        assert_eq!(call(&p.ctl, 200, b"").await.unwrap_err(), CallError::Fault(9));
        // A door returned, and a door passed.
        let made = call(&p.ctl, m::MAKE_DOOR, &7u64.to_le_bytes())
            .await
            .unwrap()
            .doors;
        assert_eq!(made.len(), 1);
        let back = p.ctl.call_async(&request(m::ECHO, b"x"), &made).await.unwrap();
        assert_eq!(back.data, b"x");
    });
}

#[test]
fn a_thousand_calls_are_in_flight_at_once_from_one_thread() {
    // Enough server threads that none of the calls waits for another.
    let p = Peer::start_with("plain", &[("LINTEL_MAX_THREADS", "1100")], &[]);
    const N: u64 = 1000;
    let rt = runtime();
    let gathered = rt.block_on(gather(&p.ctl, N));
    assert_eq!(gathered, N, "every call saw all {N} inside the server at once");
}

#[test]
fn a_dropped_call_is_alerted_and_its_late_reply_reaches_no_later_call() {
    let p = Peer::start("plain");
    runtime().block_on(async {
        for round in 0..20u64 {
            let slow = request(m::ECHO_AFTER, &[&30u64.to_le_bytes()[..], b"late"].concat());
            let cut =
                tokio::time::timeout(Duration::from_millis(round % 5), p.ctl.call_async(&slow, &[])).await;
            assert!(cut.is_err(), "the call outlives its timeout");
            let tag = round.to_le_bytes();
            let r = call(&p.ctl, m::ECHO, &tag).await.unwrap();
            assert_eq!(r.data, tag, "round {round}: a later call gets its own reply");
        }
        // An alertable call dropped: the server thread running it is alerted.
        let before = u64::from_le_bytes(
            call(&p.ctl, m::ALERTED_COUNT, b"").await.unwrap().data[..8]
                .try_into()
                .unwrap(),
        );
        let sleep = request(m::SLEEP_ALERTABLE, &10_000u64.to_le_bytes());
        let _ = tokio::time::timeout(Duration::from_millis(50), p.ctl.call_async(&sleep, &[])).await;
        let alerted = lintel_tests::eventually(Duration::from_secs(10), || {
            let r = lintel_tests::call(&p.ctl, m::ALERTED_COUNT, b"", &[]).unwrap();
            u64::from_le_bytes(r.data[..8].try_into().unwrap()) > before
        });
        assert!(alerted, "the server thread of the dropped call was alerted");
    });
}

#[test]
fn deadlines_bound_awaited_calls() {
    let p = Peer::start("plain");
    runtime().block_on(async {
        let slow = request(m::SLEEP_ALERTABLE, &10_000u64.to_le_bytes());
        let timed = p.ctl.with_timeout(Duration::from_millis(50));
        assert_eq!(
            timed.call_async(&slow, &[]).await.unwrap_err(),
            CallError::TimedOut
        );
        let f = lintel::deadline::within(Duration::from_millis(50), || p.ctl.call_async(&slow, &[]));
        assert_eq!(f.await.unwrap_err(), CallError::TimedOut);
        // The remaining time travels with the call.
        let f = lintel::deadline::within(Duration::from_secs(100), || {
            p.ctl.call_async(&[m::REMAINING_MS], &[])
        });
        let left = u64::from_le_bytes(f.await.unwrap().data[..8].try_into().unwrap());
        assert!(
            left > 0 && left <= 100_000,
            "the server sees the caller's deadline: {left} ms left"
        );
    });
}

#[test]
fn the_servers_death_fails_every_parked_call() {
    let mut p = Peer::start("plain");
    runtime().block_on(async {
        let sleep = request(m::SLEEP_PLAIN, &60_000u64.to_le_bytes());
        let calls: Vec<_> = (0..10).map(|_| p.ctl.call_async(&sleep, &[])).collect();
        let all = futures_join(calls);
        let pid = p.child.id();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
        });
        for r in all.await {
            assert_eq!(r.unwrap_err(), CallError::PeerDied);
        }
        assert_eq!(call(&p.ctl, m::ECHO, b"").await.unwrap_err(), CallError::PeerDied);
    });
    let _ = p.child.wait();
}

/// Await every future, polled together on this task.
async fn futures_join<F: std::future::Future>(fs: Vec<F>) -> Vec<F::Output> {
    let mut fs: Vec<_> = fs.into_iter().map(Box::pin).map(Some).collect();
    let mut out: Vec<Option<F::Output>> = fs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in fs.iter_mut().zip(out.iter_mut()) {
            if let Some(fut) = f {
                match fut.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *o = Some(v);
                        *f = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.expect("ready")).collect()
}

/// Handlers written as `async fn`, served by this process or a peer.
mod async_handlers {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    use std::sync::Arc;
    use std::time::Duration;

    use lintel::{AsyncHandler, AsyncRequest, CallError, Door, HandlerFuture, Reply};
    use lintel_tests::{m, Peer};

    use super::{gather, runtime};

    #[test]
    fn a_handler_that_awaits_holds_no_server_thread() {
        // Two server threads, fifty calls inside the handler at once: only
        // a handler that gives its thread back while it waits lets them in.
        let p = Peer::start_with("async", &[("LINTEL_MAX_THREADS", "2")], &[]);
        const N: u64 = 50;
        let rt = runtime();
        let gathered = rt.block_on(gather(&p.ctl, N));
        assert_eq!(gathered, N, "all {N} calls were inside the handler at once");
    }

    struct Counted {
        unrefs: Arc<AtomicU64>,
    }

    impl AsyncHandler for Counted {
        fn call(&self, req: AsyncRequest) -> HandlerFuture {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                Ok(Reply {
                    data: req.data,
                    ..Reply::default()
                })
            })
        }
        fn unreferenced(&self, _datum: u64) {
            self.unrefs.fetch_add(1, SeqCst);
        }
    }

    #[test]
    fn unreferenced_and_revocation_reach_async_doors_held_by_a_peer() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let unrefs = Arc::new(AtomicU64::new(0));
        let door = Door::create_async_on(
            rt.handle().clone(),
            3,
            Counted {
                unrefs: unrefs.clone(),
            },
        );
        let p = Peer::start("plain");
        lintel_tests::call(&p.ctl, m::HOLD, b"", std::slice::from_ref(&door)).unwrap();
        let r = lintel_tests::call(&p.ctl, m::CALL_HELD, b"through", &[]).unwrap();
        assert_eq!(
            r.data, b"through",
            "the peer's blocking call, served by a task here"
        );
        lintel_tests::call(&p.ctl, m::DROP_HELD, b"", &[]).unwrap();
        let seen = lintel_tests::eventually(Duration::from_secs(10), || unrefs.load(SeqCst) == 1);
        assert!(seen, "unreferenced once the peer let go");

        lintel_tests::call(&p.ctl, m::HOLD, b"", std::slice::from_ref(&door)).unwrap();
        door.revoke().unwrap();
        let e = lintel_tests::call(&p.ctl, m::CALL_HELD, b"x", &[]).unwrap_err();
        assert_eq!(e, CallError::Fault(102), "the peer's call saw the revocation");
    }

    #[test]
    fn a_blocking_call_on_a_runtime_thread_of_an_async_door_here_is_an_error_not_a_deadlock() {
        let rt = runtime();
        rt.block_on(async {
            let door = Door::create_async(0, |req: AsyncRequest| async move {
                Ok(Reply {
                    data: req.data,
                    ..Reply::default()
                })
            });
            assert_eq!(door.call_bytes(b"x").unwrap_err(), CallError::WouldBlock);
            assert_eq!(
                door.call_async(b"x", &[]).await.unwrap().data,
                b"x",
                "awaited, it runs"
            );
        });
    }

    /// A blocking call of an async door served here, from a thread outside
    /// the runtime, ends at its deadline with `TimedOut`, and the handler
    /// sees the alert; a relayed fault reaches the caller as the error it
    /// stands for.
    #[test]
    fn a_blocking_call_of_an_async_door_here_ends_at_its_deadline() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let door = Door::create_async_on(rt.handle().clone(), 0, move |req: AsyncRequest| {
            let tx = tx.clone();
            async move {
                if req.data == b"dead" {
                    return Err(lintel::Fault::relay(&CallError::PeerDied));
                }
                let woke = tokio::time::timeout(Duration::from_secs(30), req.alerted())
                    .await
                    .is_ok();
                let _ = tx.send(woke);
                Ok(Reply::default())
            }
        });
        let t = std::time::Instant::now();
        let r = door.with_timeout(Duration::from_millis(100)).call_bytes(b"wait");
        assert_eq!(r.unwrap_err(), CallError::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        // Its future was dropped at the deadline: nothing more is sent, or
        // (had it seen the alert first) it was woken by the alert.
        assert!(!matches!(rx.recv_timeout(Duration::from_millis(200)), Ok(false)));
        assert_eq!(door.call_bytes(b"dead").unwrap_err(), CallError::PeerDied);
    }

    #[test]
    fn a_panicking_async_handler_fails_its_call_and_the_server_lives_on() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let door = Door::create_async_on(rt.handle().clone(), 0, |req: AsyncRequest| async move {
            tokio::task::yield_now().await;
            if req.data == b"panic" {
                panic!("on purpose");
            }
            Ok(Reply {
                data: req.data,
                ..Reply::default()
            })
        });
        let p = Peer::start("plain");
        lintel_tests::call(&p.ctl, m::HOLD, b"", std::slice::from_ref(&door)).unwrap();
        let e = lintel_tests::call(&p.ctl, m::CALL_HELD, b"panic", &[]).unwrap_err();
        assert_eq!(e, CallError::Fault(109), "the peer's call failed (Panicked)");
        assert_eq!(
            lintel_tests::call(&p.ctl, m::CALL_HELD, b"ok", &[]).unwrap().data,
            b"ok"
        );
        drop(rt);
    }
}

/// Futures of awaited calls dropped at random points (timeouts from 0 to
/// 4 ms around calls that answer at once, after up to 3 ms or after
/// 100 ms, and one call in sixteen dropped after its first poll): every call
/// that completes gets its own reply, none hangs, and no slot is lost
/// (afterwards 1,000 calls are in flight at once again). Run against a
/// blocking and an async server in another process and an async door
/// served here, and with more tasks than a connection has slots, so that
/// drops also land while a call waits for a slot. The seed is random
/// unless `LINTEL_DROP_SEED` gives one; a failure prints it.
#[test]
fn dropping_calls_at_random_loses_no_slot_and_misdelivers_no_reply() {
    let seed = std::env::var("LINTEL_DROP_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| {
            let mut b = [0u8; 8];
            rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).unwrap();
            u64::from_le_bytes(b)
        });
    eprintln!("LINTEL_DROP_SEED={seed:x}");
    let threads = [("LINTEL_MAX_THREADS", "1100")];
    let plain = Peer::start_with("plain", &threads, &[]);
    let served = Peer::start_with("async", &threads, &[]);
    let here_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let here = lintel_tests::control::Control::new().async_door(here_rt.handle().clone());
    let runs = [
        ("a blocking server", &plain.ctl, 64, 60),
        ("an async server", &served.ctl, 64, 60),
        ("an async door here", &here, 64, 60),
        ("more tasks than slots", &plain.ctl, 1100, 4),
    ];
    for (what, door, tasks, calls) in runs {
        let (done, dropped) = runtime().block_on(drop_at_random(door, seed, tasks, calls));
        assert!(
            done > 0 && dropped > 0,
            "seed {seed:x}, {what}: both ends happened ({done} done, {dropped} dropped)"
        );
        // Every slot comes back: a thousand calls in flight at once.
        let all = runtime().block_on(gather(door, 1000));
        assert_eq!(all, 1000, "seed {seed:x}, {what}: slots were lost");
    }
}

/// Poll `fut` once and drop it: its output if that poll finished it.
fn poll_once<F: std::future::Future>(fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(r) => Some(r),
        std::task::Poll::Pending => None,
    }
}

/// `tasks` tasks of this thread each make `calls` calls on `door`, each
/// dropped when a random timeout passes; (calls answered, calls dropped).
async fn drop_at_random(door: &Door, seed: u64, tasks: u64, calls: u64) -> (u64, u64) {
    let set = tokio::task::LocalSet::new();
    set.run_until(async {
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let door = door.clone();
                tokio::task::spawn_local(async move {
                    let mut rng = seed ^ (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    let mut next = move || {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        rng
                    };
                    let (mut done, mut dropped) = (0u64, 0u64);
                    for i in 0..calls {
                        let tag = (t << 32 | i).to_le_bytes();
                        // One call in sixteen is dropped after its first poll
                        // (it has posted its request and spun at most 2 ms for
                        // a reply that takes 3), so some drop however slowly
                        // this runtime polls: a timeout that fires after the
                        // reply came is no drop.
                        // One more in sixteen answers after 100 ms, long after
                        // its timeout: its slot drains after this phase ends,
                        // and the 1,000 calls that follow must find it again.
                        let pick = next() % 16;
                        let once = pick == 0;
                        let delay_us = match pick {
                            0 => 3000,
                            1 => 100_000,
                            _ => next() % 3000,
                        };
                        let arg = [&(delay_us / 1000).to_le_bytes()[..], &tag].concat();
                        let data = if pick > 1 && next() % 2 == 0 {
                            request(m::ECHO, &tag)
                        } else {
                            request(m::ECHO_AFTER, &arg)
                        };
                        let limit = Duration::from_micros(next() % 4000);
                        let answer = match once {
                            true => poll_once(door.call_async(&data, &[])).ok_or(()),
                            false => tokio::time::timeout(limit, door.call_async(&data, &[]))
                                .await
                                .map_err(drop),
                        };
                        match answer {
                            Ok(r) => {
                                assert_eq!(
                                    r.unwrap().data,
                                    tag,
                                    "seed {seed:x}: task {t} call {i} got another's reply"
                                );
                                done += 1;
                            }
                            Err(_) => dropped += 1,
                        }
                    }
                    (done, dropped)
                })
            })
            .collect();
        let (mut done, mut dropped) = (0, 0);
        for h in handles {
            let (d, x) = tokio::time::timeout(Duration::from_secs(120), h)
                .await
                .unwrap_or_else(|_| panic!("seed {seed:x}: a task hung"))
                .unwrap();
            done += d;
            dropped += x;
        }
        (done, dropped)
    })
    .await
}

/// The runtime whose reactor a connection's notices are registered with
/// can go away: calls from the next runtime are still woken.
#[test]
fn calls_from_a_second_runtime_are_woken_after_the_first_is_gone() {
    let p = Peer::start("plain");
    let slow = request(m::ECHO_AFTER, &[&20u64.to_le_bytes()[..], b"one"].concat());
    for round in 0..3 {
        let rt = runtime();
        let r = rt.block_on(p.ctl.call_async(&slow, &[]));
        assert_eq!(r.unwrap().data, b"one", "runtime {round}");
        drop(rt);
    }
    // And from a multi-threaded runtime after them.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(async { p.ctl.call_async(&slow, &[]).await });
    assert_eq!(r.unwrap().data, b"one");
}

/// Awaited calls are counted in the domain's statistics as a thread's are:
/// by path, failures apart. Counted in a process of its own (this test
/// binary again, running only `counting_child`), where no other test calls,
/// on the default paths whatever this run forces (`LINTEL_PATH=vanilla`
/// sends every call the vanilla way, and the counts say so).
#[test]
fn awaited_calls_are_counted_by_path() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "counting_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LINTEL_COUNTING_CHILD", "1")
        .env_remove("LINTEL_PATH")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("1 passed"), "the child ran its test: {text}");
}

#[test]
#[ignore = "run by awaited_calls_are_counted_by_path in a process of its own"]
fn counting_child() {
    use lintel::stats::Path;
    if std::env::var_os("LINTEL_COUNTING_CHILD").is_none() {
        return;
    }
    let p = Peer::start("plain");
    let before = lintel::stats::snapshot();
    runtime().block_on(async {
        for _ in 0..10 {
            call(&p.ctl, m::ECHO, b"small").await.unwrap();
        }
        call(&p.ctl, m::ECHO, &[7u8; 100]).await.unwrap();
        assert!(call(&p.ctl, 200, b"").await.is_err());
    });
    let d = lintel::stats::snapshot().since(&before);
    assert_eq!(d.calls[Path::Fast as usize], 11, "{d:?}");
    assert_eq!(d.failed[Path::Fast as usize], 1, "{d:?}");
    assert_eq!(d.calls[Path::Vanilla as usize], 1, "{d:?}");
}
