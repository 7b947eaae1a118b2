//! A domain the multi-process tests start: it offers one control door whose
//! methods (see `lintel_tests::m`) exercise the runtime from the other side.
#![forbid(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lintel::{Door, Fault, Reply, Request};
use lintel_tests::m;

static UNREFS: AtomicU64 = AtomicU64::new(0);
static ALERTED: AtomicU64 = AtomicU64::new(0);
static ACTIVE: AtomicU64 = AtomicU64::new(0);
static MAX_ACTIVE: AtomicU64 = AtomicU64::new(0);
static SECRET: AtomicU64 = AtomicU64::new(0);
static WATCHED: AtomicU64 = AtomicU64::new(0);
static SLEPT_FULL: AtomicU64 = AtomicU64::new(0);

#[derive(Default)]
struct State {
    held: Vec<Door>,
    made: Vec<Door>,
}

fn u64_arg(a: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = a.len().min(8);
    b[..n].copy_from_slice(&a[..n]);
    u64::from_le_bytes(b)
}

fn serve(st: &Mutex<State>, req: Request<'_>, reply: &mut Reply) -> Result<(), Fault> {
    let (&method, arg) = req.data.split_first().ok_or(Fault(1))?;
    let put = |reply: &mut Reply, v: u64| reply.data.extend_from_slice(&v.to_le_bytes());
    match method {
        m::ECHO => reply.data.extend_from_slice(arg),
        m::MAKE_DOOR => {
            let d = Door::create_with_unref(
                u64_arg(arg),
                |r: Request<'_>, reply: &mut Reply| {
                    reply.data.extend_from_slice(&r.datum.to_le_bytes());
                    reply.data.extend_from_slice(r.data);
                    Ok(())
                },
                |_| {
                    UNREFS.fetch_add(1, SeqCst);
                },
            );
            st.lock().unwrap().made.push(d.clone());
            reply.doors.push(d);
        }
        m::MAKE_MANY => {
            // arg: count; returns that many fresh doors (datum = index).
            for i in 0..u64_arg(arg) {
                reply
                    .doors
                    .push(Door::create(i, |r: Request<'_>, reply: &mut Reply| {
                        reply.data.extend_from_slice(&r.datum.to_le_bytes());
                        Ok(())
                    }));
            }
        }
        m::GIVE_MADE => {
            let st = st.lock().unwrap();
            reply
                .doors
                .push(st.made.get(u64_arg(arg) as usize).ok_or(Fault(2))?.clone());
        }
        m::REVOKE_MADE => {
            let st = st.lock().unwrap();
            st.made
                .get(u64_arg(arg) as usize)
                .ok_or(Fault(2))?
                .revoke()
                .map_err(|_| Fault(3))?;
        }
        m::CALL_PASSED => {
            let d = req.doors.first().ok_or(Fault(4))?;
            let mut r = Reply::new();
            match d.call(arg, &[], &mut r) {
                Ok(()) => reply.data.extend_from_slice(&r.data),
                Err(e) => return Err(Fault(100 + error_code(&e))),
            }
        }
        m::CALL_HELD => {
            let d = st.lock().unwrap().held.first().cloned().ok_or(Fault(4))?;
            let mut r = Reply::new();
            match d.call(arg, &[], &mut r) {
                Ok(()) => reply.data.extend_from_slice(&r.data),
                Err(e) => return Err(Fault(100 + error_code(&e))),
            }
        }
        m::CALL_HELD_PARALLEL => {
            let (&n, inner) = arg.split_first().ok_or(Fault(1))?;
            let d = st.lock().unwrap().held.first().cloned().ok_or(Fault(4))?;
            let calls: Vec<_> = (0..n)
                .map(|_| {
                    let (d, inner) = (d.clone(), inner.to_vec());
                    std::thread::spawn(move || d.call_bytes(&inner).is_ok())
                })
                .collect();
            let ok = calls
                .into_iter()
                .map(|t| t.join())
                .filter(|r| matches!(r, Ok(true)))
                .count();
            put(reply, ok as u64);
        }
        m::HOLD => st.lock().unwrap().held.extend(req.doors),
        m::DROP_HELD => st.lock().unwrap().held.clear(),
        m::RETURN_HELD => reply.doors.extend(st.lock().unwrap().held.iter().cloned()),
        m::SIGNAL_THEN_SLEEP => {
            let d = st.lock().unwrap().held.first().cloned().ok_or(Fault(4))?;
            d.call_bytes(b"").map_err(|_| Fault(5))?;
            return serve(
                st,
                Request {
                    datum: req.datum,
                    data: &[&[m::SLEEP_ALERTABLE][..], arg].concat(),
                    doors: Vec::new(),
                },
                reply,
            );
        }
        m::SLEEP_ALERTABLE => {
            let n = ACTIVE.fetch_add(1, SeqCst) + 1;
            MAX_ACTIVE.fetch_max(n, SeqCst);
            let r = lintel::shuttle::sleep_alertable(Duration::from_millis(u64_arg(arg)));
            ACTIVE.fetch_sub(1, SeqCst);
            match r {
                Err(_) => ALERTED.fetch_add(1, SeqCst),
                Ok(()) => SLEPT_FULL.fetch_add(1, SeqCst),
            };
            put(reply, r.is_err() as u64);
        }
        m::SLEEP_PLAIN => std::thread::sleep(Duration::from_millis(u64_arg(arg))),
        m::REMAINING_MS => put(
            reply,
            lintel::deadline::remaining().map_or(u64::MAX, |d| d.as_millis() as u64),
        ),
        m::ECHO_AFTER => {
            let (ms, bytes) = arg.split_at(arg.len().min(8));
            std::thread::sleep(Duration::from_millis(u64_arg(ms)));
            reply.data.extend_from_slice(bytes);
        }
        m::UNREF_COUNT => put(reply, UNREFS.load(SeqCst)),
        m::SLEPT_FULL => put(reply, SLEPT_FULL.load(SeqCst)),
        m::ALERTED_COUNT => put(reply, ALERTED.load(SeqCst)),
        m::MAX_CONCURRENT => put(reply, MAX_ACTIVE.load(SeqCst)),
        m::SECRET_CALLS => put(reply, SECRET.load(SeqCst)),
        m::POOL_SHORTAGES => put(reply, lintel::pool::stats().shortages),
        m::SHORTAGES_WATCHED => put(reply, WATCHED.load(SeqCst)),
        m::SERVER_PID_OF_PASSED => put(reply, req.doors.first().ok_or(Fault(4))?.server_pid() as u64),
        m::CONNECTIONS => put(reply, lintel::introspect::connections() as u64),
        _ => return Err(Fault(9)),
    }
    Ok(())
}

fn error_code(e: &lintel::CallError) -> u32 {
    use lintel::CallError::*;
    match e {
        PeerDied => 1,
        Revoked => 2,
        BadDoor => 3,
        _ => 9,
    }
}

fn main() {
    // A test peer should not outlive the test that started it.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let role = std::env::args().nth(1).unwrap_or_default();
    lintel::pool::on_shortage(|stats| {
        if stats.threads >= stats.limit {
            WATCHED.fetch_add(1, SeqCst);
        }
    });
    let st = Arc::new(Mutex::new(State::default()));
    let s2 = st.clone();
    let ctl = Door::create(0, move |req: Request<'_>, reply: &mut Reply| {
        serve(&s2, req, reply)
    });
    // A door never handed out: calls reaching it would mean a forged door.
    let secret = Door::create(0xdead, |_: Request<'_>, _: &mut Reply| {
        SECRET.fetch_add(1, SeqCst);
        Ok(())
    });
    let offered = match role.as_str() {
        "hold-offered" => vec![ctl.clone()],
        _ => vec![ctl.clone()],
    };
    if role == "join-with" {
        // The parent's doors are held before ours are offered.
        let st = st.clone();
        lintel::boot::join_with(move |parent| {
            // Slow on purpose: a parent call that could overtake this would.
            std::thread::sleep(std::time::Duration::from_millis(200));
            st.lock().unwrap().held.extend(parent.iter().cloned());
            offered
        })
        .expect("join parent domain");
    } else {
        let given = lintel::boot::join(&offered).expect("join parent domain");
        st.lock().unwrap().held.extend(given);
    }
    // Serve until the parent goes away (death signal) or kills us.
    let _keep = (ctl, secret);
    loop {
        std::thread::park();
    }
}
