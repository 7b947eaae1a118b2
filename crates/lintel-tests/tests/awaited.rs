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
    let gathered = rt.block_on(async {
        let set = tokio::task::LocalSet::new();
        set.run_until(async {
            let calls: Vec<_> = (0..N)
                .map(|_| {
                    let door = p.ctl.clone();
                    tokio::task::spawn_local(async move { call(&door, m::GATHER, &N.to_le_bytes()).await })
                })
                .collect();
            let mut all = 0;
            for c in calls {
                all += u64::from_le_bytes(c.await.unwrap().unwrap().data[..8].try_into().unwrap());
            }
            all
        })
        .await
    });
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
