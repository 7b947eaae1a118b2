//! Door semantics across real processes: calls on every path, passing,
//! third parties, reference counting, revocation.

use lintel::{CallError, Door, Reply, Request};
use lintel_tests::{m, Peer};

#[test]
fn calls_cross_process_on_fast_and_vanilla_paths() {
    let p = Peer::start("plain");
    for len in [0usize, 1, 15, 16, 17, 64, 1024, 5 * 1024 - 1] {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
        let r = p.call(m::ECHO, &data, &[]).unwrap();
        assert_eq!(r.data, data, "echo of {len} bytes");
    }
}

/// Arguments large enough to stream (the server copies each part while
/// the caller writes the next) reach a handler in another process whole at
/// every size around the streaming threshold and the parts' edges, on a
/// plain door (a private copy) and on a trusting one (read in place as the
/// parts land), between calls that grow and shrink the segment.
#[test]
fn streamed_arguments_arrive_whole_at_every_size() {
    use lintel::abi::{STREAM_MIN, STREAM_PART};
    let sizes = [
        STREAM_MIN - 1,
        STREAM_MIN,
        STREAM_MIN + 1,
        3 * STREAM_PART + 5,
        lintel::PEER_STREAM_MAX,
        lintel::PEER_STREAM_MAX + 1,
        (1 << 20) + 7,
        5 * 1024,
        (5 << 20) + 3,
        STREAM_MIN + 8,
        // Stored as the sensed distance to the reader says.
        lintel::PEER_SENSED_MIN - 1,
        lintel::PEER_SENSED_MIN,
        (16 << 10) + 3,
    ];
    for role in ["plain", "trusting"] {
        let p = Peer::start(role);
        for &len in &sizes {
            // The method byte leads the payload: the pattern starts after it.
            let data = lintel_tests::pattern(len);
            let r = p.call(m::ECHO, &data, &[]).unwrap();
            assert!(r.data == data, "{role}: echo of {len} bytes came back changed");
        }
    }
}

/// Results a handler writes in place (`Reply::data_in_place`, or copied
/// there by `Reply::copy_in_place`, with non-temporal stores between
/// `PEER_COPY_MIN` and `PEER_STREAM_MAX`, and from `PEER_SENSED_MIN` as the
/// reader's sensed distance says) reach a caller in another process
/// whole, at every size, on the fast and vanilla paths, as the segment
/// grows and shrinks back, between results built in `data`; a handler that
/// fills `data` afresh after making room answers with `data`; one that
/// fails after making room fails its call only, and the next call's result
/// is its own. Co-located, the room is `data`.
#[test]
fn results_written_in_place_arrive_whole_at_every_size() {
    let p = Peer::start("plain");
    // Request: mode (1 byte), length (u64), padding (to choose the path).
    let door = Door::create(0, |req: Request<'_>, reply: &mut Reply| {
        let len = u64::from_le_bytes(req.data[1..9].try_into().unwrap()) as usize;
        match req.data[0] {
            0 => reply
                .data_in_place(len)
                .copy_from_slice(&lintel_tests::pattern(len)),
            1 => reply.data.extend_from_slice(&lintel_tests::pattern(len)),
            // The pattern inverted, so that no byte the last call left
            // where it travels is already the right one.
            4 => reply.copy_in_place(&inverted(len)),
            2 => {
                reply.data_in_place(len).fill(0xee);
                reply.data.clear();
                reply.data.extend_from_slice(&lintel_tests::pattern(len));
            }
            _ => {
                reply.data_in_place(len).fill(0xee);
                return Err(lintel::Fault(77));
            }
        }
        Ok(())
    });
    lintel_tests::call(&p.ctl, m::HOLD, b"", std::slice::from_ref(&door)).unwrap();
    let request = |mode: u8, len: usize, pad: usize| {
        let mut r = vec![mode];
        r.extend_from_slice(&(len as u64).to_le_bytes());
        r.resize(9 + pad, 0);
        r
    };
    let sizes = [
        0,
        100,
        5 * 1024,
        5 * 1024 + 1,
        65_536,
        (1 << 20) + 3,
        5 << 20,
        100_000,
        lintel::PEER_COPY_MIN - 1,
        lintel::PEER_STREAM_MAX + 1,
        lintel::PEER_STREAM_MAX - 13,
        7,
        lintel::PEER_SENSED_MIN - 1,
        lintel::PEER_SENSED_MIN,
        (16 << 10) + 5,
    ];
    for (i, &len) in sizes.iter().enumerate() {
        for mode in [0u8, 1, 2, 4, 0, 4] {
            for pad in [0, 40] {
                let got = lintel_tests::call(&p.ctl, m::CALL_HELD, &request(mode, len, pad), &[])
                    .unwrap()
                    .data;
                let want = if mode == 4 {
                    inverted(len)
                } else {
                    lintel_tests::pattern(len)
                };
                assert!(
                    got == want,
                    "size {i} ({len} bytes), mode {mode}, padding {pad}: {} bytes came back",
                    got.len()
                );
            }
        }
        let failed = lintel_tests::call(&p.ctl, m::CALL_HELD, &request(3, len, 0), &[]).unwrap_err();
        assert_eq!(
            failed,
            CallError::Fault(100 + 9),
            "size {len}: the handler's fault reaches the peer"
        );
        let got = lintel_tests::call(&p.ctl, m::CALL_HELD, &request(1, 3, 0), &[])
            .unwrap()
            .data;
        assert_eq!(got, lintel_tests::pattern(3), "after a failed call at size {len}");
        let here = door.call_bytes(&request(0, len, 0)).unwrap();
        assert!(here == lintel_tests::pattern(len), "co-located, {len} bytes");
        let here = door.call_bytes(&request(4, len, 0)).unwrap();
        assert!(here == inverted(len), "co-located, {len} bytes copied in place");
    }
}

/// `lintel_tests::pattern` with every bit flipped.
fn inverted(len: usize) -> Vec<u8> {
    lintel_tests::pattern(len).iter().map(|b| !b).collect()
}

/// A door made with `Door::create_trusting` and called from another
/// process gets arguments larger than a slot's data region in place (a view
/// of the caller's memory, `data` empty) and smaller ones as a private
/// copy; read in place, whole or in pieces, they are the caller's bytes at
/// every size, between calls that grow and shrink the segment. A door made
/// with `Door::create` keeps getting a private copy. A caller that reads
/// its result in place (`Door::call_in_place`) gets the result's bytes as
/// they are, shared when large.
#[test]
fn trusting_doors_and_in_place_callers_read_large_bytes_where_they_lie() {
    use std::sync::{Arc, Mutex};
    let p = Peer::start("plain");
    // Request: mode (1 byte), then the payload. Mode 0 echoes in place,
    // mode 1 answers the payload's sum read in 1000-byte pieces, mode 2
    // fails after reading.
    let seen: Arc<Mutex<Vec<(usize, bool, bool)>>> = Arc::default();
    let make = |trusting: bool| {
        let seen = seen.clone();
        let handler = move |req: Request<'_>, reply: &mut Reply| {
            let args = req.args();
            seen.lock()
                .unwrap()
                .push((args.len(), args.is_shared(), req.data.is_empty()));
            match args.get(0) {
                Some(0) => {
                    args.read_at(1, reply.data_in_place(args.len() - 1));
                }
                Some(1) => {
                    let (mut sum, mut at, mut piece) = (0u64, 1, [0u8; 1000]);
                    while at < args.len() {
                        let n = args.read_at(at, &mut piece);
                        sum += piece[..n].iter().map(|&b| u64::from(b)).sum::<u64>();
                        at += n;
                    }
                    reply.data.extend_from_slice(&sum.to_le_bytes());
                }
                _ => return Err(lintel::Fault(9)),
            }
            Ok(())
        };
        match trusting {
            true => Door::create_trusting(0, handler),
            false => Door::create(0, handler),
        }
    };
    for trusting in [true, false] {
        let door = make(trusting);
        let q = Peer::start("plain");
        lintel_tests::call(&q.ctl, m::HOLD, b"", std::slice::from_ref(&door)).unwrap();
        for len in [
            0usize,
            7,
            5 * 1024 - 1,
            5 * 1024,
            5 * 1024 + 1,
            65_536,
            (1 << 20) + 3,
            5 << 20,
            9000,
        ] {
            let payload = lintel_tests::pattern(len);
            for mode in [0u8, 1, 2] {
                seen.lock().unwrap().clear();
                let mut arg = vec![mode];
                arg.extend_from_slice(&payload);
                let got = lintel_tests::call(&q.ctl, m::CALL_HELD, &arg, &[]);
                let what = format!("trusting {trusting}, {len} bytes, mode {mode}");
                match mode {
                    0 => assert!(got.unwrap().data == payload, "{what}: the echo differs"),
                    1 => {
                        let sum: u64 = payload.iter().map(|&b| u64::from(b)).sum();
                        assert_eq!(got.unwrap().data, sum.to_le_bytes(), "{what}");
                    }
                    _ => assert_eq!(got.unwrap_err(), CallError::Fault(100 + 9), "{what}"),
                }
                let in_place = trusting && len + 1 > lintel::abi::DATA_CAP;
                assert_eq!(
                    seen.lock().unwrap().as_slice(),
                    [(len + 1, in_place, in_place)],
                    "{what}: (length, read in place, data empty)"
                );
            }
        }
        // Co-located calls get a private copy on either kind of door.
        seen.lock().unwrap().clear();
        let mut arg = vec![0u8];
        arg.extend_from_slice(&lintel_tests::pattern(100_000));
        assert_eq!(door.call_bytes(&arg).unwrap(), arg[1..]);
        assert_eq!(seen.lock().unwrap().as_slice(), [(100_001, false, false)]);
    }

    // The peer reads our results in place: our ECHO door here, its peer's
    // held door. Shared when larger than the data region, the same bytes
    // at every size.
    let echo = Door::create(0, |req: Request<'_>, reply: &mut Reply| {
        reply.data_in_place(req.data.len()).copy_from_slice(req.data);
        Ok(())
    });
    lintel_tests::call(&p.ctl, m::HOLD, b"", std::slice::from_ref(&echo)).unwrap();
    for len in [
        0usize,
        9,
        5 * 1024,
        5 * 1024 + 1,
        65_536,
        (1 << 20) + 5,
        5 << 20,
        100,
    ] {
        let payload = lintel_tests::pattern(len);
        let got = lintel_tests::call(&p.ctl, m::CALL_HELD_IN_PLACE, &payload, &[])
            .unwrap()
            .data;
        let shared = u8::from(len > lintel::abi::DATA_CAP);
        assert_eq!(got.first(), Some(&shared), "{len} bytes: read in place or not");
        assert!(got[1..] == payload[..], "{len} bytes read in place differ");
    }
    // And we read the peer's in place: a handle with a timeout too; a call
    // that fails never runs the reader.
    for len in [3usize, 70_000, (1 << 20) + 1] {
        let mut arg = vec![m::ECHO];
        arg.extend_from_slice(&lintel_tests::pattern(len));
        let timed = p.ctl.with_timeout(std::time::Duration::from_secs(30));
        for door in [&p.ctl, &timed] {
            let (shared, bytes) = door.call_in_place(&arg, |r| (r.is_shared(), r.to_vec())).unwrap();
            assert_eq!(shared, len > lintel::abi::DATA_CAP, "{len} bytes");
            assert!(bytes == arg[1..], "{len} bytes read in place differ");
        }
    }
    let mut ran = false;
    let failed = p.ctl.call_in_place(&[250], |_| ran = true);
    assert!(
        failed.is_err() && !ran,
        "a failed call ran the reader: {failed:?}"
    );
}

#[test]
fn data_above_the_servers_limit_is_a_typed_error_naming_it() {
    // The server allows 64 KiB; we allow the default 1 GiB.
    let p = Peer::start_with("plain", &[("LINTEL_MAX_MESSAGE", "65536")], &[]);
    let big = vec![3u8; 100_000];
    let e = p.ctl.call(&big, &[], &mut Reply::new()).unwrap_err();
    assert_eq!(
        e,
        CallError::TooLarge {
            what: "arguments",
            len: 100_000,
            max: 65536
        }
    );
    // A result above it: the server refuses to send it.
    let e = p.call(m::BIG, &70_000u64.to_le_bytes(), &[]).unwrap_err();
    assert_eq!(
        e,
        CallError::TooLarge {
            what: "result",
            len: 70_000,
            max: 65536
        }
    );
    // Just under the limit goes through (method byte + 65535).
    let fits = vec![9u8; 65535];
    assert_eq!(p.call(m::LEN, &fits, &[]).unwrap().data, 65535u64.to_le_bytes());
    // The connection still works afterwards.
    assert_eq!(p.call(m::ECHO, b"ok", &[]).unwrap().data, b"ok");
}

#[test]
fn unknown_method_is_a_fault_not_a_crash() {
    let p = Peer::start("plain");
    assert_eq!(p.call(200, b"", &[]).unwrap_err(), CallError::Fault(9));
    assert_eq!(p.call(m::ECHO, b"x", &[]).unwrap().data, b"x");
}

#[test]
fn doors_pass_both_ways_and_come_back_local() {
    let p = Peer::start("plain");
    let made = p.make_door(42);
    assert!(!made.is_local());
    let r = made.call_bytes(b"abc").unwrap();
    assert_eq!(&r[..8], &42u64.to_le_bytes());
    assert_eq!(&r[8..], b"abc");

    // Our own door sent to the peer and returned is our own again.
    let mine = Door::create(5, |req: Request<'_>, r: &mut Reply| {
        r.data.extend_from_slice(&req.datum.to_le_bytes());
        Ok(())
    });
    p.call(m::HOLD, b"", std::slice::from_ref(&mine)).unwrap();
    let back = p.call(m::RETURN_HELD, b"", &[]).unwrap().doors;
    assert!(back.iter().any(|d| d.same(&mine) && d.is_local()));
    // The peer calls our door through its reference.
    assert_eq!(p.call(m::CALL_HELD, b"", &[]).unwrap().data, 5u64.to_le_bytes());
}

/// Work a handler leaves with `lintel::after_reply` runs after its caller
/// has the reply: here the work calls a door of ours that waits until the
/// reply has come. Were the work run first, the reply would wait for the
/// work, the work for the reply, and the door would give up after a long
/// timeout and say so (no wait on success: it returns as the reply lands).
#[test]
fn work_left_for_after_the_reply_runs_after_the_caller_has_it() {
    use std::sync::{Arc, Condvar, Mutex};
    let p = Peer::start("plain");
    // (reply came, what the door found when the work called it)
    let seen = Arc::new((Mutex::new((false, None::<bool>)), Condvar::new()));
    let s = seen.clone();
    let waits = Door::create(0, move |req: Request<'_>, _: &mut Reply| {
        let (m, cv) = &*s;
        let guard = m.lock().unwrap();
        let (mut guard, _) = cv
            .wait_timeout_while(guard, std::time::Duration::from_secs(60), |st| !st.0)
            .unwrap();
        guard.1 = Some(guard.0 && req.data == b"work");
        cv.notify_all();
        Ok(())
    });
    p.call(m::HOLD, b"", std::slice::from_ref(&waits)).unwrap();
    let r = p.call(m::CALL_HELD_AFTER, b"work", &[]).unwrap();
    assert!(r.data.is_empty());
    let (m, cv) = &*seen;
    let mut st = m.lock().unwrap();
    st.0 = true;
    cv.notify_all();
    let (st, _) = cv
        .wait_timeout_while(st, std::time::Duration::from_secs(120), |st| st.1.is_none())
        .unwrap();
    assert_eq!(
        st.1,
        Some(true),
        "the work ran after the reply, with its argument"
    );
}

#[test]
fn same_door_received_twice_has_one_entry() {
    let p = Peer::start("plain");
    let a = p.make_door(1);
    // Only this peer's doors (its control door and `a`): other tests in
    // this process hold doors too.
    let held = || lintel::introspect::remote_doors_from(p.pid());
    assert_eq!(held(), 2);
    let b = p.door(m::GIVE_MADE, 0);
    assert!(a.same(&b));
    assert_eq!(held(), 2);
}

#[test]
fn third_party_door_is_called_directly() {
    let b = Peer::start("plain");
    let c = Peer::start("plain");
    let door_c = c.make_door(77);
    // B gets C's door from us and calls it: the answer is C's.
    let r = b
        .call(m::CALL_PASSED, b"via-b", std::slice::from_ref(&door_c))
        .unwrap();
    assert_eq!(&r.data[..8], &77u64.to_le_bytes());
    assert_eq!(&r.data[8..], b"via-b");
}

#[test]
fn third_party_door_names_the_server_process() {
    let b = Peer::start("plain");
    let c = Peer::start("plain");
    let door_c = c.make_door(3);
    let r = b.call(m::SERVER_PID_OF_PASSED, b"", &[door_c]).unwrap();
    assert_eq!(
        u64::from_le_bytes(r.data[..8].try_into().unwrap()) as u32,
        c.pid()
    );
    assert_eq!(b.u64(m::CONNECTIONS, b""), 2, "B is connected to us and to C");
}

#[test]
fn more_live_calling_threads_than_slots_all_get_served() {
    // Each calling thread keeps its slot while it lives; with more live
    // threads than a connection has slots, the ones beyond must still be
    // served (a slot changes hands), not wait for a thread to exit.
    let p = Peer::start("plain");
    let n = lintel::abi::SLOTS + 8;
    let done = std::sync::Arc::new(std::sync::Barrier::new(n + 1));
    let (tx, rx) = std::sync::mpsc::channel();
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (ctl, done, tx) = (p.ctl.clone(), done.clone(), tx.clone());
            std::thread::spawn(move || {
                let arg = (i as u32).to_le_bytes();
                for _ in 0..3 {
                    let r = lintel_tests::call(&ctl, m::ECHO, &arg, &[]).map(|r| r.data);
                    tx.send((i, r)).unwrap();
                }
                done.wait(); // stay alive until every thread's calls returned
            })
        })
        .collect();
    for _ in 0..3 * n {
        let (i, r) = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("a calling thread beyond the slot count was never served");
        assert_eq!(r.unwrap(), (i as u32).to_le_bytes());
    }
    done.wait();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn threads_that_idle_after_calling_never_block_a_newcomer() {
    // 256 threads each call once and then stay alive without calling, as
    // the threads of a pool do: every one is served, and so is a newcomer
    // after them, though four times as many threads keep a lease as the
    // connection has slots.
    let p = Peer::start("plain");
    let n = 4 * lintel::abi::SLOTS;
    let idle = std::sync::Arc::new(std::sync::Barrier::new(n + 1));
    let (tx, rx) = std::sync::mpsc::channel();
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (ctl, idle, tx) = (p.ctl.clone(), idle.clone(), tx.clone());
            std::thread::spawn(move || {
                let arg = (i as u32).to_le_bytes();
                tx.send((i, lintel_tests::call(&ctl, m::ECHO, &arg, &[]).map(|r| r.data)))
                    .unwrap();
                idle.wait(); // alive and idle, lease kept
            })
        })
        .collect();
    for _ in 0..n {
        let (i, r) = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("a calling thread waited behind threads that had stopped calling");
        assert_eq!(r.unwrap(), (i as u32).to_le_bytes());
    }
    let ctl = p.ctl.clone();
    let newcomer = std::thread::spawn(move || lintel_tests::call(&ctl, m::ECHO, b"new", &[]).map(|r| r.data));
    let (ntx, nrx) = std::sync::mpsc::channel();
    std::thread::spawn(move || ntx.send(newcomer.join().unwrap()));
    let r = nrx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("a newcomer after 256 idle threads was never served");
    assert_eq!(r.unwrap(), b"new");
    idle.wait();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn join_with_hands_the_childs_handlers_the_parents_doors_before_any_call() {
    // The child stores the parent's door (slowly) before offering its own:
    // the first call the parent makes on the child's door finds it there.
    let mine = Door::create(41, |req: Request<'_>, r: &mut Reply| {
        r.data.extend_from_slice(&req.datum.to_le_bytes());
        Ok(())
    });
    let p = Peer::start_with("join-with", &[], &[mine]);
    let r = p
        .call(m::CALL_HELD, b"", &[])
        .expect("the child already held our door");
    assert_eq!(r.data, 41u64.to_le_bytes());
}

/// Calls made from a thread-local's destructor, after the thread's own
/// lintel state is gone (what an exit handler meets too: git unlinks its
/// lock files from one, after the main thread's thread-locals are
/// destroyed), go through: a raw call and a stub call (the file
/// service's), and the thread leaves no slot held.
#[test]
fn calls_from_a_thread_locals_destructor_go_through() {
    use std::sync::{Arc, Mutex};
    type Got = Arc<Mutex<Vec<String>>>;
    struct CallOnDrop(Door, lintel_fs::Fs, Got);
    impl Drop for CallOnDrop {
        fn drop(&mut self) {
            let raw = lintel_tests::call(&self.0, m::ECHO, b"late", &[]).map(|r| r.data);
            let stub = self.1.remove_file("doomed");
            self.2.lock().unwrap().push(format!("{raw:?} {stub:?}"));
        }
    }
    thread_local! {
        static LATE: std::cell::RefCell<Option<CallOnDrop>> = const { std::cell::RefCell::new(None) };
    }
    let p = Peer::start("plain");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("doomed"), b"x").unwrap();
    let svc = lintel_tests::fs::FsService::start(dir.path(), false);
    let got: Got = Arc::default();
    for _ in 0..3 {
        let (ctl, fs, g) = (p.ctl.clone(), svc.fs.clone(), got.clone());
        std::thread::spawn(move || {
            // Made before the thread's first call, so its destructor runs
            // after lintel's.
            LATE.with(|l| *l.borrow_mut() = Some(CallOnDrop(ctl.clone(), fs.clone(), g)));
            assert_eq!(
                lintel_tests::call(&ctl, m::ECHO, b"first", &[]).unwrap().data,
                b"first"
            );
            fs.stat(".").unwrap();
        })
        .join()
        .unwrap();
    }
    let got = got.lock().unwrap();
    assert_eq!(got.len(), 3);
    assert!(got[0].starts_with("Ok([108, 97, 116, 101]) Ok(())"), "{got:?}");
    assert!(
        got[1].starts_with("Ok([108, 97, 116, 101]) Err("),
        "the file was gone: {got:?}"
    );
    assert!(!dir.path().join("doomed").exists());
    // Nothing held: many more threads can still call.
    let threads: Vec<_> = (0..80)
        .map(|_| {
            let ctl = p.ctl.clone();
            std::thread::spawn(move || lintel_tests::call(&ctl, m::ECHO, b"x", &[]).unwrap().data)
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), b"x");
    }
}
