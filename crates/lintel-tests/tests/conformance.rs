//! Door behaviour, written once and run wherever the server is and however
//! it serves and is called: in this domain (the co-located path) or in a
//! peer process (the fast path and, with `LINTEL_PATH=vanilla` or
//! `LINTEL_SPIN=off` as CI runs this suite again, the vanilla path and the
//! sleeping waits); served by a blocking handler or an async one (on a
//! tokio runtime); called by a blocking thread or awaited by a task. Each
//! check below is instantiated for all eight by `conformance!`; the same
//! calls must give the same results, errors and effects. (Behaviours only
//! one placement has, such as a server that dies or `unreferenced` across
//! domains, are in `lifecycle.rs`.)

use std::time::Duration;

use lintel::{Buffer, CallError, Door, Loan, Reply, Request, Sealed};
use lintel_tests::control::Control;
use lintel_tests::{m, Peer};

#[derive(Clone, Copy, PartialEq)]
enum Place {
    Here,
    Peer,
}

#[derive(Clone, Copy, PartialEq)]
enum Serve {
    Blocking,
    Async,
}

#[derive(Clone, Copy, PartialEq)]
enum Calls {
    Blocking,
    Awaited,
}

/// The control door's server and how this test calls it.
struct Server {
    ctl: Door,
    place: Place,
    serve: Serve,
    _peer: Option<Peer>,
    /// The runtime an async handler served here runs on.
    _served_on: Option<tokio::runtime::Runtime>,
    /// Calls are awaited on this runtime's thread (else they block).
    awaited: Option<tokio::runtime::Runtime>,
}

impl Server {
    fn new(place: Place, serve: Serve, calls: Calls) -> Server {
        let (mut peer, mut served_on) = (None, None);
        let ctl = match (place, serve) {
            (Place::Here, Serve::Blocking) => Control::new().door(),
            (Place::Here, Serve::Async) => {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap();
                let d = Control::new().async_door(rt.handle().clone());
                served_on = Some(rt);
                d
            }
            (Place::Peer, _) => {
                let p = Peer::start(if serve == Serve::Async { "async" } else { "plain" });
                let d = p.ctl.clone();
                peer = Some(p);
                d
            }
        };
        let awaited = (calls == Calls::Awaited).then(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        });
        Server {
            ctl,
            place,
            serve,
            _peer: peer,
            _served_on: served_on,
            awaited,
        }
    }

    fn ctl(&self) -> &Door {
        &self.ctl
    }

    fn call(&self, method: u8, arg: &[u8], doors: &[Door]) -> Result<Reply, CallError> {
        self.raw(&self.ctl, &[&[method][..], arg].concat(), doors)
    }

    /// A call of any door, made the way this server's calls are made.
    fn raw(&self, door: &Door, data: &[u8], doors: &[Door]) -> Result<Reply, CallError> {
        self.raw_with(door, data, doors, Vec::new())
    }

    fn raw_with(
        &self,
        door: &Door,
        data: &[u8],
        doors: &[Door],
        bufs: Vec<Buffer>,
    ) -> Result<Reply, CallError> {
        match &self.awaited {
            None => {
                let mut reply = Reply::new();
                door.call_with(data, doors, bufs, &mut reply).map(|()| reply)
            }
            Some(rt) => rt.block_on(door.call_with_async(data, doors, bufs)),
        }
    }

    fn u64(&self, method: u8, arg: &[u8]) -> u64 {
        let r = self.call(method, arg, &[]).expect("control call");
        u64::from_le_bytes(r.data[..8].try_into().unwrap())
    }

    fn door(&self, method: u8, arg: u64) -> Door {
        let mut r = self.call(method, &arg.to_le_bytes(), &[]).expect("control call");
        r.doors.pop().expect("a door")
    }
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        conformance!(@ colocated, Here, Blocking, Blocking; $($name),*);
        conformance!(@ cross_process, Peer, Blocking, Blocking; $($name),*);
        conformance!(@ colocated_async_handler, Here, Async, Blocking; $($name),*);
        conformance!(@ cross_process_async_handler, Peer, Async, Blocking; $($name),*);
        conformance!(@ colocated_awaited, Here, Blocking, Awaited; $($name),*);
        conformance!(@ cross_process_awaited, Peer, Blocking, Awaited; $($name),*);
        conformance!(@ colocated_awaited_async_handler, Here, Async, Awaited; $($name),*);
        conformance!(@ cross_process_awaited_async_handler, Peer, Async, Awaited; $($name),*);
    };
    (@ $module:ident, $place:ident, $serve:ident, $calls:ident; $($name:ident),*) => {
        mod $module {
            $( #[test] fn $name() {
                let s = super::Server::new(super::Place::$place, super::Serve::$serve, super::Calls::$calls);
                super::$name(&s)
            } )*
        }
    };
}

conformance!(
    results_come_back_whole,
    each_reply_reads_as_its_own,
    errors_are_typed_and_the_server_lives_on,
    doors_made_by_the_server_carry_their_datum,
    revoked_doors_fail_every_later_call,
    doors_passed_in_come_back_as_the_same_door,
    a_third_partys_door_is_called_through,
    an_alert_cuts_the_servers_sleep_short,
    deadlines_reach_the_handler_and_bound_the_call,
    cancel_ends_the_next_call,
    data_of_any_size_comes_back_whole,
    buffers_pass_both_ways_and_may_be_kept,
    the_caller_is_the_process_the_kernel_names,
);

/// A handler learns which process calls it, on every path (small and
/// large requests), from the connection the kernel named; a co-located
/// call is this process's own and names no other.
fn the_caller_is_the_process_the_kernel_names(s: &Server) {
    let want = match s.place {
        Place::Here => 0,
        Place::Peer => u64::from(std::process::id()),
    };
    let mut connections = Vec::new();
    for arg in [&[][..], &[7u8; 100_000][..]] {
        let r = s.call(m::CALLER, arg, &[]).unwrap().data;
        let word = |i: usize| u64::from_le_bytes(r[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!(word(0), want, "the caller's pid, {} argument bytes", arg.len());
        connections.push(word(1));
    }
    assert_eq!(connections[0], connections[1], "one connection for both calls");
    assert_eq!(
        connections[0] != 0,
        want != 0,
        "a connection names a caller from another process"
    );
}

fn results_come_back_whole(s: &Server) {
    for len in [0usize, 1, 15, 16, 17, 100, 1000, lintel::abi::DATA_CAP - 1] {
        let arg: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
        assert_eq!(s.call(m::ECHO, &arg, &[]).unwrap().data, arg, "{len} bytes");
    }
}

/// Replies on one thread's slot, small and not, failed and not, in turn:
/// each reads as its own, whatever the one before it left in the slot (a
/// server writes only what changed of a small reply's header).
fn each_reply_reads_as_its_own(s: &Server) {
    let big: Vec<u8> = (0..100).map(|i| i as u8).collect();
    for round in 0..3 {
        for arg in [&b"abc"[..], b"", b"abc", &big, b"abc", b"", b"xy"] {
            assert_eq!(s.call(m::ECHO, arg, &[]).unwrap().data, arg, "round {round}");
            assert_eq!(
                s.call(200, arg, &[]).unwrap_err(),
                CallError::Fault(9),
                "round {round}"
            );
            assert_eq!(s.call(m::ECHO, arg, &[]).unwrap().data, arg, "round {round}");
        }
    }
}

fn errors_are_typed_and_the_server_lives_on(s: &Server) {
    assert_eq!(
        s.call(200, b"", &[]).unwrap_err(),
        CallError::Fault(9),
        "unknown method"
    );
    let empty = s.raw(s.ctl(), b"", &[]).unwrap_err();
    assert_eq!(empty, CallError::Fault(1), "no method byte");
    // Above the message limit: refused before anything is sent (the vector
    // is never touched, so its pages are never made).
    let max = lintel::max_message();
    let huge = vec![0u8; max + 1];
    assert_eq!(
        s.raw(s.ctl(), &huge, &[]).unwrap_err(),
        CallError::TooLarge {
            what: "arguments",
            len: max + 1,
            max
        }
    );
    let too_many: Vec<Door> = (0..=lintel::abi::MAX_DOORS)
        .map(|_| Door::create(0, |_: Request<'_>, _: &mut Reply| Ok(())))
        .collect();
    assert!(matches!(
        s.call(m::HOLD, b"", &too_many).unwrap_err(),
        CallError::TooManyDoors { .. }
    ));
    assert_eq!(s.call(m::ECHO, b"alive", &[]).unwrap().data, b"alive");
}

fn doors_made_by_the_server_carry_their_datum(s: &Server) {
    let d = s.door(m::MAKE_DOOR, 42);
    let r = s.raw(&d, b"x", &[]).unwrap().data;
    assert_eq!(r, [&42u64.to_le_bytes()[..], b"x"].concat());
    let many = s.call(m::MAKE_MANY, &5u64.to_le_bytes(), &[]).unwrap().doors;
    assert_eq!(many.len(), 5);
    for (i, d) in many.iter().enumerate() {
        assert_eq!(s.raw(d, b"", &[]).unwrap().data, (i as u64).to_le_bytes());
    }
}

fn revoked_doors_fail_every_later_call(s: &Server) {
    let d = s.door(m::MAKE_DOOR, 1);
    assert!(s.raw(&d, b"", &[]).is_ok());
    s.call(m::REVOKE_MADE, &0u64.to_le_bytes(), &[]).unwrap();
    assert_eq!(s.raw(&d, b"", &[]).unwrap_err(), CallError::Revoked);
    assert_eq!(s.raw(&d.clone(), b"", &[]).unwrap_err(), CallError::Revoked);
}

fn doors_passed_in_come_back_as_the_same_door(s: &Server) {
    let mine = Door::create(5, |_: Request<'_>, _: &mut Reply| Ok(()));
    s.call(m::HOLD, b"", std::slice::from_ref(&mine)).unwrap();
    let back = s.call(m::RETURN_HELD, b"", &[]).unwrap().doors;
    assert_eq!(back.len(), 1);
    assert!(
        back[0].same(&mine) && back[0].is_local(),
        "our own door, local again"
    );
    s.call(m::DROP_HELD, b"", &[]).unwrap();
}

fn a_third_partys_door_is_called_through(s: &Server) {
    let third = Peer::start("plain");
    let d = third.make_door(77);
    let mut arg = b"via".to_vec();
    arg.insert(0, b'!');
    let r = s.call(m::CALL_PASSED, &arg, std::slice::from_ref(&d)).unwrap();
    assert_eq!(r.data, [&77u64.to_le_bytes()[..], &arg].concat());
    let pid = s
        .call(m::SERVER_PID_OF_PASSED, b"", std::slice::from_ref(&d))
        .unwrap();
    assert_eq!(pid.data, (third.pid() as u64).to_le_bytes());
}

/// A blocking caller (and an awaited one whose blocking handler runs on
/// its own thread) is alerted through its thread's shuttle; an awaited
/// call is cancelled by dropping it, which alerts a server in another
/// process and drops the future of an async handler served here.
fn an_alert_cuts_the_servers_sleep_short(s: &Server) {
    let on_this_thread = s.place == Place::Here && s.serve == Serve::Blocking;
    if let (Some(rt), false) = (&s.awaited, on_this_thread) {
        let sleep = [&[m::SLEEP_ALERTABLE][..], &20_000u64.to_le_bytes()].concat();
        let cut = rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(100), s.ctl().call_async(&sleep, &[])).await
        });
        assert!(cut.is_err(), "the call was still running when dropped");
        if s.place == Place::Peer {
            let alerted =
                lintel_tests::eventually(Duration::from_secs(10), || s.u64(m::ALERTED_COUNT, b"") == 1);
            assert!(alerted, "the server's sleep saw the alert");
        }
        assert_eq!(s.call(m::ECHO, b"alive", &[]).unwrap().data, b"alive");
        return;
    }
    let me = lintel::shuttle::current();
    let alerter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        me.alert();
    });
    let r = s.call(m::SLEEP_ALERTABLE, &20_000u64.to_le_bytes(), &[]).unwrap();
    alerter.join().unwrap();
    lintel::shuttle::clear_alert();
    assert_eq!(r.data, 1u64.to_le_bytes(), "the sleep saw the alert");
}

fn deadlines_reach_the_handler_and_bound_the_call(s: &Server) {
    assert_eq!(s.u64(m::REMAINING_MS, b""), u64::MAX, "no deadline");
    let left = lintel::deadline::within(Duration::from_secs(60), || s.u64(m::REMAINING_MS, b""));
    assert!(left > 0 && left <= 60_000, "{left} ms");
    let late = lintel::deadline::within(Duration::ZERO, || s.call(m::ECHO, b"x", &[]));
    assert_eq!(late.unwrap_err(), CallError::TimedOut);
    let bounded = s.ctl().with_timeout(Duration::from_secs(60));
    assert_eq!(s.raw(&bounded, &[m::ECHO, b'o', b'k'], &[]).unwrap().data, b"ok");
}

/// A thread's cancel ends its next call; an awaited call is cancelled by
/// dropping its future, and the next one is not affected either way.
fn cancel_ends_the_next_call(s: &Server) {
    if let Some(rt) = &s.awaited {
        let slow = [&[m::ECHO_AFTER][..], &50u64.to_le_bytes(), b"late"].concat();
        let cut = rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(1), s.ctl().call_async(&slow, &[])).await
        });
        if s.place == Place::Here && s.serve == Serve::Blocking {
            // A blocking handler served here runs to its end on this thread.
            assert_eq!(cut.unwrap().unwrap().data, b"late");
        } else {
            assert!(cut.is_err(), "the call was still running when dropped");
        }
        assert_eq!(s.call(m::ECHO, b"y", &[]).unwrap().data, b"y", "its own reply");
        return;
    }
    lintel::shuttle::current().cancel();
    assert_eq!(s.call(m::ECHO, b"x", &[]).unwrap_err(), CallError::Cancelled);
    lintel::shuttle::clear_alert();
    assert_eq!(s.call(m::ECHO, b"y", &[]).unwrap().data, b"y", "one call only");
}

/// No size cliff between the paths: arguments and results of every size
/// up to the limit (here up to 16 MiB) come back as they went, including
/// across the data region's edge and across bulk segment growth and
/// shrinking back.
fn data_of_any_size_comes_back_whole(s: &Server) {
    let cap = lintel::abi::DATA_CAP;
    let sizes = [
        cap - 1,
        cap,
        cap + 1,
        64 << 10,
        (64 << 10) + 1,
        1 << 20,
        100,
        (16 << 20) + 3,
        (3 << 20) + 5,
        cap + 2,
    ];
    for len in sizes {
        let arg: Vec<u8> = (0..len).map(|i| (i * 31 + len) as u8).collect();
        let r = s.call(m::ECHO, &arg, &[]).unwrap();
        assert!(r.data == arg, "{len} bytes came back changed");
    }
    // A large result for a small request, and the reverse.
    let r = s.call(m::BIG, &(5u64 << 20).to_le_bytes(), &[]).unwrap();
    assert_eq!(r.data.len(), 5 << 20);
    assert!(r.data.iter().enumerate().all(|(i, &b)| b == i as u8));
    let big: Vec<u8> = vec![7u8; 2 << 20];
    assert_eq!(
        s.call(m::LEN, &big, &[]).unwrap().data,
        (2u64 << 20).to_le_bytes()
    );
}

/// Sealed snapshots and loans reach the handler with their bytes, may be
/// kept past the call, and come back in replies; the limits on them are
/// the same on every path.
fn buffers_pass_both_ways_and_may_be_kept(s: &Server) {
    use lintel_tests::{buffer_bytes, pattern};
    let info = |r: Reply| -> Vec<u64> {
        r.data
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let loan = |n: usize| {
        let mut l = Loan::new(n).unwrap();
        l.as_mut_slice().copy_from_slice(&pattern(n));
        Buffer::Loan(l)
    };
    let sealed = |n: usize| Buffer::Sealed(Sealed::from_slice(&pattern(n)).unwrap());
    let call = |method: u8, arg: &[u8], bufs: Vec<Buffer>| {
        s.raw_with(s.ctl(), &[&[method][..], arg].concat(), &[], bufs)
    };
    // Passed in: kind, length, contents (loans filled by `from_slice` too,
    // whose copy stores around the caches at these lengths).
    let copied = |n: usize| Buffer::Loan(Loan::from_slice(&pattern(n)).unwrap());
    let r = call(
        m::BUFFERS_INFO,
        b"",
        vec![
            loan(1 << 20),
            sealed(70_000),
            loan(1),
            sealed(0),
            copied(200_003),
            copied(lintel::PEER_COPY_MAX),
        ],
    )
    .unwrap();
    assert_eq!(
        info(r),
        [
            2,
            1 << 20,
            1,
            1,
            70_000,
            1,
            2,
            1,
            1,
            1,
            0,
            1,
            2,
            200_003,
            1,
            2,
            1 << 20,
            1
        ]
    );
    // Kept past the call, read again later.
    call(m::KEEP_BUFFERS, b"", vec![loan(3 << 20), sealed(5000)]).unwrap();
    let r = call(m::KEPT_INFO, b"", vec![]).unwrap();
    assert_eq!(info(r), [2, 3 << 20, 1, 1, 5000, 1]);
    call(m::DROP_KEPT, b"", vec![]).unwrap();
    // Returned: a sealed snapshot and a loan of the server's.
    let mut r = call(m::RETURN_SEALED, &100_000u64.to_le_bytes(), vec![]).unwrap();
    assert!(matches!(&r.buffers[..], [Buffer::Sealed(_)]));
    assert_eq!(buffer_bytes(&r.buffers[0]), pattern(100_000));
    let keep = r.buffers.pop().unwrap();
    let r = call(m::RETURN_LOAN, &300_000u64.to_le_bytes(), vec![]).unwrap();
    assert_eq!(r.buffers.len(), 1);
    assert_eq!(buffer_bytes(&r.buffers[0]), pattern(300_000));
    drop(r);
    assert_eq!(
        buffer_bytes(&keep),
        pattern(100_000),
        "a received snapshot outlives its reply"
    );
    // Limits, the same everywhere.
    let many: Vec<Buffer> = (0..=lintel::abi::MAX_BUFFERS).map(|_| sealed(1)).collect();
    assert!(matches!(
        call(m::BUFFERS_INFO, b"", many).unwrap_err(),
        CallError::TooManyDoors { .. }
    ));
    assert_eq!(call(m::ECHO, b"alive", vec![]).unwrap().data, b"alive");
}
