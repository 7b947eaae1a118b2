//! The peer's control door: one object whose methods (see [`crate::m`])
//! exercise the runtime from the serving side. The peer program serves it
//! in its own process; the conformance tests also serve it in the test's
//! own domain, to run the same checks co-located.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lintel::{AsyncRequest, Buffer, Door, Fault, Loan, Reply, Request, Sealed};

use crate::m;

/// What one control object counts (its own, so that several can live in
/// one test process).
#[derive(Default)]
pub struct Counts {
    pub unrefs: AtomicU64,
    pub alerted: AtomicU64,
    pub active: AtomicU64,
    pub max_active: AtomicU64,
    pub slept_full: AtomicU64,
    /// `HOLD_UNTIL_RELEASED` calls that ended.
    pub held_ended: AtomicU64,
    /// Calls on a door never handed out (counted by the peer program).
    pub secret: AtomicU64,
    /// Shortages its pool watcher saw (counted by the peer program).
    pub watched: AtomicU64,
    /// Handlers of `MAKE_UNKEPT` doors dropped.
    pub dropped: Arc<AtomicU64>,
}

/// Counts its drop: held by a handler, it says the door behind it is gone.
struct DropCounter(Arc<AtomicU64>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

impl Counts {
    /// A `SLEEP_ALERTABLE` call starts: counted active.
    fn sleep_starts(&self) {
        let n = self.active.fetch_add(1, SeqCst) + 1;
        self.max_active.fetch_max(n, SeqCst);
    }

    /// It ends, `alerted` or having slept in full.
    fn sleep_ends(&self, alerted: bool) {
        self.active.fetch_sub(1, SeqCst);
        match alerted {
            true => self.alerted.fetch_add(1, SeqCst),
            false => self.slept_full.fetch_add(1, SeqCst),
        };
    }
}

#[derive(Default)]
struct State {
    /// Calls inside `GATHER` now, and the most there at once.
    gathered: (u64, u64),
    held: Vec<Door>,
    made: Vec<Door>,
    kept: Vec<Buffer>,
    /// `RELEASE` was called.
    released: bool,
}

/// The control object behind the door.
#[derive(Default)]
pub struct Control {
    state: Mutex<State>,
    gathering: std::sync::Condvar,
    pub counts: Arc<Counts>,
}

impl Control {
    pub fn new() -> Arc<Control> {
        Arc::new(Control::default())
    }

    /// A door on it (datum 0).
    pub fn door(self: &Arc<Self>) -> Door {
        let me = self.clone();
        Door::create(0, move |req: Request<'_>, reply: &mut Reply| me.serve(req, reply))
    }

    /// A door on it that trusts its callers (`Door::create_trusting`,
    /// datum 0): large arguments are read in place. `ECHO` copies them
    /// straight from the caller's memory into the reply's room; every other
    /// method gets a private copy of its arguments first, as a handler
    /// that validates them must.
    pub fn trusting_door(self: &Arc<Self>) -> Door {
        let me = self.clone();
        Door::create_trusting(0, move |req: Request<'_>, reply: &mut Reply| {
            let args = req.args();
            if !args.is_shared() {
                return me.serve(req, reply);
            }
            if args.get(0) == Some(m::ECHO) {
                args.read_at(1, reply.data_in_place(args.len() - 1));
                return Ok(());
            }
            let copy = args.to_vec();
            let req = Request { data: &copy, ..req };
            me.serve(req, reply)
        })
    }

    /// A door on it served by an async handler on runtime `rt` (datum 0):
    /// the same methods, those that wait or call awaiting instead of
    /// blocking (the others run as they are, on the runtime's thread).
    pub fn async_door(self: &Arc<Self>, rt: tokio::runtime::Handle) -> Door {
        let me = self.clone();
        Door::create_async_on(rt, 0, move |req: AsyncRequest| {
            let me = me.clone();
            async move { me.serve_async(req).await }
        })
    }

    async fn serve_async(self: Arc<Self>, req: AsyncRequest) -> Result<Reply, Fault> {
        let mut reply = Reply::new();
        let (&method, arg) = req.data.split_first().ok_or(Fault(1))?;
        let put = |reply: &mut Reply, v: u64| reply.data.extend_from_slice(&v.to_le_bytes());
        let c = &self.counts;
        match method {
            m::SLEEP_ALERTABLE => {
                c.sleep_starts();
                let alerted = tokio::select! {
                    _ = req.alerted() => true,
                    _ = tokio::time::sleep(Duration::from_millis(u64_arg(arg))) => false,
                };
                c.sleep_ends(alerted);
                put(&mut reply, alerted as u64);
            }
            m::SLEEP_PLAIN => tokio::time::sleep(Duration::from_millis(u64_arg(arg))).await,
            m::ECHO_AFTER => {
                let (ms, bytes) = arg.split_at(arg.len().min(8));
                tokio::time::sleep(Duration::from_millis(u64_arg(ms))).await;
                reply.data.extend_from_slice(bytes);
            }
            m::CALLER => {
                let pid = req.caller.and_then(|c| c.pid()).unwrap_or(0) as u64;
                put(&mut reply, pid);
                put(&mut reply, req.caller.map_or(0, |c| c.connection()));
            }
            m::CALL_PASSED => {
                let d = req.doors.first().ok_or(Fault(4))?;
                match d.call_async(arg, &[]).await {
                    Ok(r) => reply.data.extend_from_slice(&r.data),
                    Err(e) => return Err(Fault(100 + error_code(&e))),
                }
            }
            m::GATHER => {
                let n = u64_arg(arg);
                {
                    let mut s = self.state.lock().unwrap();
                    s.gathered.0 += 1;
                    s.gathered.1 = s.gathered.1.max(s.gathered.0);
                }
                let end = std::time::Instant::now() + Duration::from_secs(60);
                let all = loop {
                    if self.state.lock().unwrap().gathered.1 >= n {
                        break true;
                    }
                    if std::time::Instant::now() > end || req.is_alerted() {
                        break false;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                };
                self.state.lock().unwrap().gathered.0 -= 1;
                put(&mut reply, all as u64);
            }
            m::CALL_HELD => {
                let d = self.state.lock().unwrap().held.first().cloned().ok_or(Fault(4))?;
                match d.call_async(arg, &[]).await {
                    Ok(r) => reply.data.extend_from_slice(&r.data),
                    Err(e) => return Err(Fault(100 + error_code(&e))),
                }
            }
            _ => {
                let r = Request {
                    datum: req.datum,
                    data: &req.data,
                    doors: req.doors.into(),
                    buffers: req.buffers.into(),
                };
                self.serve(r, &mut reply)?;
            }
        }
        Ok(reply)
    }

    /// Doors to hold as if passed with `HOLD`.
    pub fn hold(&self, doors: impl IntoIterator<Item = Door>) {
        self.state.lock().unwrap().held.extend(doors);
    }
}

fn u64_arg(a: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = a.len().min(8);
    b[..n].copy_from_slice(&a[..n]);
    u64::from_le_bytes(b)
}

impl Control {
    fn serve(self: &Arc<Self>, req: Request<'_>, reply: &mut Reply) -> Result<(), Fault> {
        let st = &self.state;
        let c = &self.counts;
        let (&method, arg) = req.data.split_first().ok_or(Fault(1))?;
        let put = |reply: &mut Reply, v: u64| reply.data.extend_from_slice(&v.to_le_bytes());
        match method {
            m::ECHO => reply.data.extend_from_slice(arg),
            m::CALLER => {
                let who = lintel::caller();
                let pid = who.and_then(|c| c.pid()).unwrap_or(0) as u64;
                reply.data.extend_from_slice(&pid.to_le_bytes());
                reply
                    .data
                    .extend_from_slice(&who.map_or(0, |c| c.connection()).to_le_bytes());
            }
            m::BUFFERS_INFO => describe(&req.buffers, reply),
            m::KEEP_BUFFERS => st.lock().unwrap().kept.extend(req.buffers),
            m::KEPT_INFO => describe(&st.lock().unwrap().kept, reply),
            m::DROP_KEPT => st.lock().unwrap().kept.clear(),
            m::RETURN_SEALED => {
                let bytes = crate::pattern(u64_arg(arg) as usize);
                let s = Sealed::from_slice(&bytes).map_err(|_| Fault(6))?;
                reply.buffers.push(Buffer::Sealed(s));
            }
            m::RETURN_LOAN => {
                let n = u64_arg(arg) as usize;
                let mut l = Loan::new(n).map_err(|_| Fault(6))?;
                l.as_mut_slice().copy_from_slice(&crate::pattern(n));
                reply.buffers.push(Buffer::Loan(l));
            }
            m::RETURN_LOAN_FILLED => {
                let n = u64_arg(arg) as usize;
                let fill = *arg.get(8).ok_or(Fault(1))?;
                let mut l = Loan::new(n).map_err(|_| Fault(6))?;
                l.as_mut_slice().fill(fill);
                reply.buffers.push(Buffer::Loan(l));
            }
            m::BIG => reply.data.extend((0..u64_arg(arg) as usize).map(|i| i as u8)),
            m::LEN => put(reply, arg.len() as u64),
            m::MAKE_DOOR => {
                let counts = self.counts.clone();
                let d = Door::create_with_unref(
                    u64_arg(arg),
                    |r: Request<'_>, reply: &mut Reply| {
                        reply.data.extend_from_slice(&r.datum.to_le_bytes());
                        reply.data.extend_from_slice(r.data);
                        Ok(())
                    },
                    move |_| {
                        counts.unrefs.fetch_add(1, SeqCst);
                    },
                );
                st.lock().unwrap().made.push(d.clone());
                reply.doors.push(d);
            }
            m::MAKE_UNKEPT => {
                let guard = DropCounter(self.counts.dropped.clone());
                reply
                    .doors
                    .push(Door::create(0, move |r: Request<'_>, reply: &mut Reply| {
                        let _held = &guard;
                        reply.data.extend_from_slice(r.data);
                        Ok(())
                    }));
            }
            m::HANDLERS_DROPPED => put(reply, self.counts.dropped.load(SeqCst)),
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
            m::CALL_HELD_AFTER => {
                let d = st.lock().unwrap().held.first().cloned().ok_or(Fault(4))?;
                let arg = arg.to_vec();
                lintel::after_reply(move || {
                    let _ = d.call(&arg, &[], &mut Reply::new());
                });
            }
            m::CALL_HELD_IN_PLACE => {
                let d = st.lock().unwrap().held.first().cloned().ok_or(Fault(4))?;
                let read = d.call_in_place(arg, |r| {
                    let mut out = vec![u8::from(r.is_shared()); 1 + r.len()];
                    // In pieces of odd sizes at odd offsets, as a parser would.
                    let (mut at, mut piece) = (0, 1);
                    while at < r.len() {
                        at += r.read_at(at, &mut out[1 + at..][..piece.min(r.len() - at)]);
                        piece = piece * 3 + 1;
                    }
                    out
                });
                match read {
                    Ok(v) => reply.data.extend_from_slice(&v),
                    Err(e) => return Err(Fault(100 + error_code(&e))),
                }
            }
            m::CALL_HELD_WITH_BUFFERS => {
                let d = st.lock().unwrap().held.first().cloned().ok_or(Fault(4))?;
                let n = u64_arg(arg) as usize;
                let bytes = crate::pattern(n);
                let mut loan = Loan::new(n).map_err(|_| Fault(6))?;
                loan.as_mut_slice().copy_from_slice(&bytes);
                let sealed = Sealed::from_slice(&bytes).map_err(|_| Fault(6))?;
                let bufs = vec![Buffer::Loan(loan), Buffer::Sealed(sealed)];
                let mut r = Reply::new();
                match d.call_with(&bytes, &[], bufs, &mut r) {
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
            m::CALL_HELD_AWAITED => {
                let (&n, inner) = arg.split_first().ok_or(Fault(1))?;
                let d = st.lock().unwrap().held.first().cloned().ok_or(Fault(4))?;
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|_| Fault(6))?;
                let ok = rt.block_on(async {
                    let set = tokio::task::LocalSet::new();
                    set.run_until(async {
                        let calls: Vec<_> = (0..n)
                            .map(|_| {
                                let (d, inner) = (d.clone(), inner.to_vec());
                                tokio::task::spawn_local(
                                    async move { d.call_async(&inner, &[]).await.is_ok() },
                                )
                            })
                            .collect();
                        let mut ok = 0u64;
                        for c in calls {
                            ok += u64::from(matches!(c.await, Ok(true)));
                        }
                        ok
                    })
                    .await
                });
                put(reply, ok);
            }
            m::HOLD => st.lock().unwrap().held.extend(req.doors),
            m::DROP_HELD => st.lock().unwrap().held.clear(),
            m::RETURN_HELD => reply.doors.extend(st.lock().unwrap().held.iter().cloned()),
            m::SIGNAL_THEN_SLEEP => {
                let d = st.lock().unwrap().held.first().cloned().ok_or(Fault(4))?;
                d.call_bytes(b"").map_err(|_| Fault(5))?;
                let again = [&[m::SLEEP_ALERTABLE][..], arg].concat();
                let req = Request {
                    datum: req.datum,
                    data: &again,
                    doors: Default::default(),
                    buffers: Default::default(),
                };
                return self.serve(req, reply);
            }
            m::SLEEP_ALERTABLE => {
                c.sleep_starts();
                let alerted = lintel::shuttle::sleep_alertable(Duration::from_millis(u64_arg(arg))).is_err();
                c.sleep_ends(alerted);
                put(reply, alerted as u64);
            }
            m::SLEEP_PLAIN => std::thread::sleep(Duration::from_millis(u64_arg(arg))),
            m::HOLD_UNTIL_RELEASED => {
                c.sleep_starts();
                let end = std::time::Instant::now() + Duration::from_secs(60);
                let mut s = st.lock().unwrap();
                while !s.released && std::time::Instant::now() < end {
                    s = self
                        .gathering
                        .wait_timeout(s, Duration::from_millis(100))
                        .unwrap()
                        .0;
                }
                drop(s);
                c.active.fetch_sub(1, SeqCst);
                c.held_ended.fetch_add(1, SeqCst);
            }
            m::RELEASE => {
                st.lock().unwrap().released = true;
                self.gathering.notify_all();
            }
            m::HELD_ENDED => put(reply, c.held_ended.load(SeqCst)),
            m::SETTLE_DEAD => {
                let (pid, ms) = arg.split_at(arg.len().min(4));
                let pid = u32::from_le_bytes(pid.try_into().map_err(|_| Fault(1))?);
                put(
                    reply,
                    lintel::settle_dead(pid, Duration::from_millis(u64_arg(ms))) as u64,
                );
            }
            m::REMAINING_MS => put(
                reply,
                lintel::deadline::remaining().map_or(u64::MAX, |d| d.as_millis() as u64),
            ),
            m::ECHO_AFTER => {
                let (ms, bytes) = arg.split_at(arg.len().min(8));
                std::thread::sleep(Duration::from_millis(u64_arg(ms)));
                reply.data.extend_from_slice(bytes);
            }
            m::UNREF_COUNT => put(reply, c.unrefs.load(SeqCst)),
            m::MADE_COUNT => put(reply, st.lock().unwrap().made.len() as u64),
            m::SLEPT_FULL => put(reply, c.slept_full.load(SeqCst)),
            m::ALERTED_COUNT => put(reply, c.alerted.load(SeqCst)),
            m::MAX_CONCURRENT => put(reply, c.max_active.load(SeqCst)),
            m::GATHER => {
                let n = u64_arg(arg);
                let end = std::time::Instant::now() + Duration::from_secs(60);
                let mut s = st.lock().unwrap();
                s.gathered.0 += 1;
                s.gathered.1 = s.gathered.1.max(s.gathered.0);
                self.gathering.notify_all();
                while s.gathered.1 < n && std::time::Instant::now() < end && !lintel::shuttle::alerted() {
                    s = self
                        .gathering
                        .wait_timeout(s, Duration::from_millis(50))
                        .unwrap()
                        .0;
                }
                s.gathered.0 -= 1;
                put(reply, (s.gathered.1 >= n) as u64);
            }
            m::SECRET_CALLS => put(reply, c.secret.load(SeqCst)),
            m::POOL_SHORTAGES => put(reply, lintel::pool::stats().shortages),
            m::LENT => put(reply, lintel::buffer::lent_bytes() as u64),
            m::POOL_STATE => {
                let s = lintel::pool::stats();
                for v in [s.threads, s.idle] {
                    put(reply, v as u64);
                }
                put(reply, c.active.load(SeqCst));
            }
            m::SHORTAGES_WATCHED => put(reply, c.watched.load(SeqCst)),
            m::SERVER_PID_OF_PASSED => put(reply, req.doors.first().ok_or(Fault(4))?.server_pid() as u64),
            m::CONNECTIONS => put(reply, lintel::introspect::connections() as u64),
            _ => return Err(Fault(9)),
        }
        Ok(())
    }
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

/// For each buffer: kind (1 sealed, 2 a loan, ours or a peer's), length,
/// and whether its bytes are `pattern(len)` (1) or not (0), as u64s.
fn describe(bufs: &[Buffer], reply: &mut Reply) {
    for b in bufs {
        let bytes = crate::buffer_bytes(b);
        let kind = match b {
            Buffer::Sealed(_) => 1u64,
            _ => 2,
        };
        let good = u64::from(bytes == crate::pattern(bytes.len()));
        for v in [kind, bytes.len() as u64, good] {
            reply.data.extend_from_slice(&v.to_le_bytes());
        }
    }
}
