//! Doors across machines (`lintel-net`), with real processes: a "host"
//! (`lintel-net-host`, a proxy listening on loopback that exports the
//! control door of a peer domain it starts) and this test process, whose
//! own proxy connects to it. Every wait is bounded; none relies on a quiet
//! machine (the bounds are seconds where the work takes milliseconds).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lintel::{Buffer, CallError, Door, Loan, Reply, Request, SealedWriter};
use lintel_net::{Endpoint, LinkOptions, NetError, Proxy, Remote, Tls};
use lintel_tests::net::{eventually, u64_of, Host};
use lintel_tests::{buffer_bytes, call, m, pattern, Peer};

fn connect(addr: SocketAddr, opts: LinkOptions) -> (Proxy, Remote) {
    let proxy = Proxy::start().unwrap();
    let remote = proxy
        .connect(addr, opts, BTreeMap::<String, Door>::new())
        .unwrap();
    (proxy, remote)
}

/// The same calls, made on a control door of a peer here and on one
/// through the proxies, answer the same: bytes of every size, the
/// handler's faults, revocation, deadlines told to the server.
#[test]
fn a_proxied_door_answers_as_a_door_here_does() {
    let host = Host::start(&[]);
    let (_proxy, remote) = connect(host.addr, LinkOptions::plain());
    let far = remote.lookup("ctl").unwrap();
    let near = Peer::start("plain");
    let big: Vec<u8> = (0..(1usize << 20) + 3).map(|i| (i * 7) as u8).collect();
    let cases: Vec<(u8, Vec<u8>)> = vec![
        (m::ECHO, b"hi".to_vec()),
        (m::ECHO, vec![1; 1024]),
        (m::ECHO, vec![2; 64 << 10]),
        (m::ECHO, big),
        (m::BIG, (3u64 << 20).to_le_bytes().to_vec()),
        (m::LEN, vec![0; 5000]),
        (200, vec![]),          // an unknown method: the handler's fault
        (m::CALL_HELD, vec![]), // nothing held: another fault
    ];
    for (method, arg) in &cases {
        let a = call(&near.ctl, *method, arg, &[]).map(|r| r.data);
        let b = call(&far, *method, arg, &[]).map(|r| r.data);
        assert_eq!(a, b, "method {method} with {} bytes", arg.len());
    }
    // A door the far peer makes, then revokes.
    let made = call(&far, m::MAKE_DOOR, &7u64.to_le_bytes(), &[])
        .unwrap()
        .doors
        .pop()
        .unwrap();
    assert!(call(&made, m::ECHO, b"x", &[]).is_ok());
    call(&far, m::REVOKE_MADE, &[], &[]).unwrap();
    assert_eq!(call(&made, m::ECHO, b"x", &[]).unwrap_err(), CallError::Revoked);
    // The time left travels with the call.
    let bounded = far.with_timeout(Duration::from_secs(20));
    let left = u64_of(&call(&bounded, m::REMAINING_MS, &[], &[]).unwrap());
    assert!(left > 0 && left <= 20_000, "{left} ms left");
    assert_eq!(u64_of(&call(&far, m::REMAINING_MS, &[], &[]).unwrap()), u64::MAX);
}

/// Doors cross with calls and replies, both ways: one of this side, held
/// over there and returned, is the original again; the far side's calls on
/// it reach it here; and each side's server hears `unreferenced` when the
/// other side lets go.
#[test]
fn doors_cross_both_ways_come_back_as_themselves_and_are_counted() {
    let host = Host::start(&[]);
    let (proxy, remote) = connect(host.addr, LinkOptions::plain());
    let far = remote.lookup("ctl").unwrap();

    let unrefs = Arc::new(AtomicU64::new(0));
    let u = unrefs.clone();
    let mine = Door::create_with_unref(
        5,
        |r: Request<'_>, out: &mut Reply| {
            out.data.extend_from_slice(b"mine:");
            out.data.extend_from_slice(r.data);
            Ok(())
        },
        move |_| {
            u.fetch_add(1, SeqCst);
        },
    );
    call(&far, m::HOLD, &[], std::slice::from_ref(&mine)).unwrap();
    let back = call(&far, m::RETURN_HELD, &[], &[]).unwrap().doors.pop().unwrap();
    assert!(
        back.same(&mine),
        "a door that comes back is the original: {back:?}"
    );
    drop(back);
    let r = call(&far, m::CALL_HELD, b"abc", &[]).unwrap();
    assert_eq!(r.data, b"mine:abc");
    // Held over there only, and then not at all.
    drop(mine);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(unrefs.load(SeqCst), 0, "held by the far side");
    call(&far, m::DROP_HELD, &[], &[]).unwrap();
    eventually(
        Duration::from_secs(10),
        "unreferenced after the far side dropped it",
        || unrefs.load(SeqCst) == 1,
    );

    let held_before = proxy.imports_held().unwrap();
    let made = call(&far, m::MAKE_DOOR, &9u64.to_le_bytes(), &[])
        .unwrap()
        .doors
        .pop()
        .unwrap();
    assert!(call(&made, m::ECHO, b"m", &[]).is_ok());
    assert_eq!(proxy.imports_held().unwrap(), held_before + 1);
    let unref_count = || u64_of(&call(&far, m::UNREF_COUNT, &[], &[]).unwrap());
    assert_eq!(unref_count(), 0);
    drop(made);
    eventually(Duration::from_secs(10), "the far server's unreferenced", || {
        unref_count() == 1
    });
    assert_eq!(proxy.imports_held().unwrap(), held_before);
}

/// Loans and sealed snapshots cross as sealed snapshots of their bytes,
/// both ways; a file descriptor cannot cross, and says so.
#[test]
fn buffers_cross_as_sealed_snapshots_and_descriptors_are_refused() {
    let host = Host::start(&[]);
    let (_proxy, remote) = connect(host.addr, LinkOptions::plain());
    let far = remote.lookup("ctl").unwrap();
    let mut loan = Loan::new(70_000).unwrap();
    loan.as_mut_slice().copy_from_slice(&pattern(70_000));
    let mut w = SealedWriter::new(3000).unwrap();
    w.as_mut_slice().copy_from_slice(&pattern(3000));
    let mut reply = Reply::new();
    let buffers = vec![Buffer::Loan(loan), Buffer::Sealed(w.seal().unwrap())];
    far.call_with(&[m::BUFFERS_INFO], &[], buffers, &mut reply)
        .unwrap();
    let info: Vec<u64> = reply
        .data
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    // (kind 1 = sealed, length, bytes as written)
    assert_eq!(info, [1, 70_000, 1, 1, 3000, 1]);
    for method in [m::RETURN_LOAN, m::RETURN_SEALED] {
        let mut r = call(&far, method, &5000u64.to_le_bytes(), &[]).unwrap();
        let b = r.buffers.pop().expect("one buffer back");
        assert!(matches!(b, Buffer::Sealed(_)), "method {method}: {b:?}");
        assert_eq!(buffer_bytes(&b), pattern(5000), "method {method}");
    }
    let fd: std::os::fd::OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
    let e = far
        .call_with(&[m::BUFFERS_INFO], &[], vec![Buffer::Fd(fd)], &mut reply)
        .unwrap_err();
    assert!(matches!(e, CallError::Unpassable(_)), "{e:?}");
    assert_eq!(call(&far, m::ECHO, b"still", &[]).unwrap().data, b"still");
}

/// A call or a reply larger than the link's message limit is refused
/// with `TooLarge` before it leaves, and the link serves on: the far end
/// would have closed it on such a message, failing every call on it.
#[test]
fn a_message_over_the_link_limit_is_refused_and_the_link_lives_on() {
    const MAX: usize = 256 << 10;
    let limit = MAX.to_string();
    let host = Host::start(&[("LINTEL_NET_MAX_MESSAGE", &limit)]);
    let mut opts = LinkOptions::plain();
    opts.max_message = MAX;
    let (_proxy, remote) = connect(host.addr, opts);
    let far = remote.lookup("ctl").unwrap();
    let at_limit = vec![7u8; MAX - 1]; // with the method's byte: MAX
    assert_eq!(
        call(&far, m::LEN, &at_limit, &[]).map(|r| u64_of(&r)),
        Ok(MAX as u64 - 1)
    );
    let e = call(&far, m::ECHO, &vec![7u8; MAX], &[]).map(|r| r.data.len());
    assert!(matches!(e, Err(CallError::TooLarge { .. })), "arguments: {e:?}");
    // Bytes and buffers count together.
    let mut w = SealedWriter::new(MAX / 2).unwrap();
    w.as_mut_slice().fill(1);
    let mut reply = Reply::new();
    let e = far
        .call_with(
            &vec![m::LEN; MAX / 2 + 1],
            &[],
            vec![Buffer::Sealed(w.seal().unwrap())],
            &mut reply,
        )
        .unwrap_err();
    assert!(
        matches!(e, CallError::TooLarge { .. }),
        "arguments and a buffer: {e:?}"
    );
    // The far proxy refuses a reply over the limit.
    let e = call(&far, m::BIG, &(MAX as u64 + 1).to_le_bytes(), &[]).map(|r| r.data.len());
    assert!(matches!(e, Err(CallError::TooLarge { .. })), "result: {e:?}");
    assert_eq!(
        call(&far, m::BIG, &(MAX as u64).to_le_bytes(), &[])
            .unwrap()
            .data
            .len(),
        MAX
    );
    assert_eq!(call(&far, m::ECHO, b"still", &[]).unwrap().data, b"still");
}

/// A deadline that passes, or an awaited call dropped, cancels the far
/// call: its server thread is alerted.
#[test]
fn deadlines_and_cancellation_alert_the_far_server() {
    let host = Host::start(&[]);
    let (_proxy, remote) = connect(host.addr, LinkOptions::plain());
    let far = remote.lookup("ctl").unwrap();
    let alerted = || u64_of(&call(&far, m::ALERTED_COUNT, &[], &[]).unwrap());

    let t = Instant::now();
    let r = call(
        &far.with_timeout(Duration::from_millis(300)),
        m::SLEEP_ALERTABLE,
        &30_000u64.to_le_bytes(),
        &[],
    );
    assert_eq!(r.unwrap_err(), CallError::TimedOut);
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    eventually(
        Duration::from_secs(10),
        "the far server alerted at the deadline",
        || alerted() == 1,
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let arg = [&[m::SLEEP_ALERTABLE][..], &30_000u64.to_le_bytes()].concat();
        let r = tokio::time::timeout(Duration::from_millis(300), far.call_async(&arg, &[])).await;
        assert!(r.is_err(), "the call was still running");
    });
    eventually(
        Duration::from_secs(10),
        "the far server alerted when the call was dropped",
        || alerted() == 2,
    );
}

/// A door served in the proxy's own domain by a blocking handler: its
/// long calls hold up neither the link nor other calls, and a deadline
/// alerts it as any other.
#[test]
fn a_blocking_door_in_the_proxy_s_own_domain_holds_up_nothing() {
    let host = Host::start(&[("LINTEL_NET_KEEPALIVE_MS", "500")]);
    let (_proxy, remote) = connect(
        host.addr,
        LinkOptions::plain().keepalive(Duration::from_millis(500)),
    );
    let local = remote.lookup("local").unwrap();
    let l = local.clone();
    let long = std::thread::spawn(move || call(&l, m::SLEEP_ALERTABLE, &2_000u64.to_le_bytes(), &[]));
    std::thread::sleep(Duration::from_millis(100));
    // Meanwhile: calls answer, and the keepalive (500 ms) keeps the link.
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(1_500) {
        assert_eq!(
            call(&local, m::ECHO, b"meanwhile", &[]).unwrap().data,
            b"meanwhile"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        u64_of(&long.join().unwrap().unwrap()),
        0,
        "slept in full, not alerted"
    );
    let r = call(
        &local.with_timeout(Duration::from_millis(200)),
        m::SLEEP_ALERTABLE,
        &30_000u64.to_le_bytes(),
        &[],
    );
    assert_eq!(r.unwrap_err(), CallError::TimedOut);
    eventually(Duration::from_secs(10), "the handler alerted", || {
        u64_of(&call(&local, m::ALERTED_COUNT, &[], &[]).unwrap()) == 1
    });
}

/// An import by name over a named link follows the far side: the host
/// killed, the call in flight fails with `PeerDied` (never retried), and
/// once a new host listens at the same address the link reconnects and
/// the same door calls the new instance.
#[test]
fn an_import_by_name_finds_the_far_service_again_after_a_restart() {
    let mut host = Host::start(&[("LINTEL_NET_KEEPALIVE_MS", "500")]);
    let proxy = Proxy::start().unwrap();
    let opts = LinkOptions::plain().keepalive(Duration::from_millis(500));
    proxy
        .link(
            "far",
            Endpoint::Connect(host.addr),
            opts,
            BTreeMap::<String, Door>::new(),
        )
        .unwrap();
    let ctl = proxy.import("far", "ctl");
    assert_eq!(call(&ctl, m::ECHO, b"first", &[]).unwrap().data, b"first");
    let c = ctl.clone();
    let in_flight = std::thread::spawn(move || call(&c, m::SLEEP_ALERTABLE, &60_000u64.to_le_bytes(), &[]));
    std::thread::sleep(Duration::from_millis(200));
    host.kill();
    assert_eq!(in_flight.join().unwrap().unwrap_err(), CallError::PeerDied);
    let _again = Host::start_in(
        None,
        &host.addr.to_string(),
        &[("LINTEL_NET_KEEPALIVE_MS", "500")],
    );
    eventually(
        Duration::from_secs(20),
        "the new host called through the same door",
        || call(&ctl, m::ECHO, b"second", &[]).is_ok_and(|r| r.data == b"second"),
    );
    assert_eq!(proxy.link_up("far").unwrap(), Some(true));
    assert_eq!(
        proxy.import("far", "nothing").call_bytes(b"").unwrap_err(),
        CallError::BadDoor
    );
}

/// The host killed mid-call: the call in flight and every later one fail
/// with `PeerDied`, promptly.
#[test]
fn a_dead_host_fails_calls_in_flight_and_later_with_peer_died() {
    let mut host = Host::start(&[]);
    let (_proxy, remote) = connect(host.addr, LinkOptions::plain());
    let far = remote.lookup("ctl").unwrap();
    let f = far.clone();
    let in_flight = std::thread::spawn(move || {
        let t = Instant::now();
        (call(&f, m::SLEEP_ALERTABLE, &60_000u64.to_le_bytes(), &[]), t)
    });
    std::thread::sleep(Duration::from_millis(200));
    let killed = Instant::now();
    host.kill();
    let (r, _) = in_flight.join().unwrap();
    assert_eq!(r.unwrap_err(), CallError::PeerDied);
    assert!(
        killed.elapsed() < Duration::from_secs(10),
        "{:?}",
        killed.elapsed()
    );
    assert_eq!(call(&far, m::ECHO, b"x", &[]).unwrap_err(), CallError::PeerDied);
    assert!(matches!(remote.lookup("ctl"), Err(NetError::LinkDown(_))));
}

/// The far server's domain killed mid-call: the call fails with
/// `PeerDied`, and the link and the far side's other doors live on.
#[test]
fn a_dead_far_server_fails_its_calls_and_the_link_lives_on() {
    let host = Host::start(&[]);
    let (_proxy, remote) = connect(host.addr, LinkOptions::plain());
    let far = remote.lookup("ctl").unwrap();
    let f = far.clone();
    let in_flight = std::thread::spawn(move || call(&f, m::SLEEP_ALERTABLE, &60_000u64.to_le_bytes(), &[]));
    std::thread::sleep(Duration::from_millis(200));
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(host.peer_pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    assert_eq!(in_flight.join().unwrap().unwrap_err(), CallError::PeerDied);
    assert_eq!(call(&far, m::ECHO, b"x", &[]).unwrap_err(), CallError::PeerDied);
    let local = remote.lookup("local").unwrap();
    assert_eq!(call(&local, m::ECHO, b"still", &[]).unwrap().data, b"still");
}

/// A caller on the far side that dies mid-call (its host killed) alerts
/// the server thread running its call here.
#[test]
fn a_far_caller_that_dies_alerts_the_server_here() {
    let mut host = Host::start(&[]);
    let (_proxy, remote) = connect(host.addr, LinkOptions::plain());
    let far = remote.lookup("ctl").unwrap();
    let near = Peer::start("plain");
    call(&far, m::HOLD, &[], std::slice::from_ref(&near.ctl)).unwrap();
    let f = far.clone();
    let arg = [&[m::SLEEP_ALERTABLE][..], &60_000u64.to_le_bytes()].concat();
    let _in_flight = std::thread::spawn(move || call(&f, m::CALL_HELD, &arg, &[]));
    let sleeping = || {
        let r = call(&near.ctl, m::POOL_STATE, &[], &[]).unwrap();
        u64::from_le_bytes(r.data[16..24].try_into().unwrap())
    };
    eventually(
        Duration::from_secs(10),
        "the far caller's call running here",
        || sleeping() == 1,
    );
    host.kill();
    eventually(Duration::from_secs(10), "the server thread alerted", || {
        near.u64(m::ALERTED_COUNT, &[]) == 1
    });
}

/// A relay between this side and the host that can stop forwarding
/// without closing anything: only a keepalive notices.
struct Relay {
    addr: SocketAddr,
    stalled: Arc<AtomicBool>,
    /// Added to each chunk's way, in ms.
    delay_ms: Arc<AtomicU64>,
}

impl Relay {
    fn start(to: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stalled = Arc::new(AtomicBool::new(false));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let (s, delay) = (stalled.clone(), delay_ms.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(a) = conn else { return };
                let Ok(b) = TcpStream::connect(to) else { return };
                for (mut from, mut into) in [(a.try_clone().unwrap(), b.try_clone().unwrap()), (b, a)] {
                    let (s, delay) = (s.clone(), delay.clone());
                    std::thread::spawn(move || {
                        let mut buf = vec![0u8; 64 << 10];
                        loop {
                            while s.load(SeqCst) {
                                std::thread::sleep(Duration::from_millis(20));
                            }
                            match from.read(&mut buf) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => {
                                    // Read while stalled: held, never sent.
                                    while s.load(SeqCst) {
                                        std::thread::sleep(Duration::from_millis(20));
                                    }
                                    std::thread::sleep(Duration::from_millis(delay.load(SeqCst)));
                                    if into.write_all(&buf[..n]).is_err() {
                                        return;
                                    }
                                }
                            }
                        }
                    });
                }
            }
        });
        Relay {
            addr,
            stalled,
            delay_ms,
        }
    }
}

/// A link that stalls without closing is found dead by the keepalive:
/// the call in flight and later calls fail with `PeerDied` within about
/// one keepalive period.
#[test]
fn a_stalled_link_is_cut_by_the_keepalive() {
    let host = Host::start(&[("LINTEL_NET_KEEPALIVE_MS", "500")]);
    let relay = Relay::start(host.addr);
    let (_proxy, remote) = connect(
        relay.addr,
        LinkOptions::plain().keepalive(Duration::from_millis(500)),
    );
    let far = remote.lookup("ctl").unwrap();
    assert_eq!(call(&far, m::ECHO, b"up", &[]).unwrap().data, b"up");
    let f = far.clone();
    let in_flight = std::thread::spawn(move || {
        call(
            &f,
            m::ECHO_AFTER,
            &[&2_000u64.to_le_bytes()[..], b"late"].concat(),
            &[],
        )
    });
    std::thread::sleep(Duration::from_millis(100));
    let stalled = Instant::now();
    relay.stalled.store(true, SeqCst);
    assert_eq!(in_flight.join().unwrap().unwrap_err(), CallError::PeerDied);
    let took = stalled.elapsed();
    assert!(
        took < Duration::from_millis(1_900),
        "found dead after {took:?}: by the keepalive, not the reply's time"
    );
    assert_eq!(call(&far, m::ECHO, b"x", &[]).unwrap_err(), CallError::PeerDied);
}

/// A slow link (100 ms added each way by the relay): calls take their
/// time and succeed within their deadline; one whose deadline is shorter
/// than the way there and back times out, and the far server is alerted
/// (its deadline traveled with the call and passed there too).
#[test]
fn a_slow_link_keeps_deadlines() {
    let host = Host::start(&[]);
    let relay = Relay::start(host.addr);
    let (_proxy, remote) = connect(relay.addr, LinkOptions::plain().keepalive(Duration::from_secs(5)));
    let far = remote.lookup("ctl").unwrap();
    relay.delay_ms.store(100, SeqCst);
    let t = Instant::now();
    let bounded = far.with_timeout(Duration::from_secs(20));
    assert_eq!(call(&bounded, m::ECHO, b"slow", &[]).unwrap().data, b"slow");
    assert!(t.elapsed() >= Duration::from_millis(200), "{:?}", t.elapsed());
    let r = call(
        &far.with_timeout(Duration::from_millis(400)),
        m::SLEEP_ALERTABLE,
        &30_000u64.to_le_bytes(),
        &[],
    );
    assert_eq!(r.unwrap_err(), CallError::TimedOut);
    eventually(Duration::from_secs(10), "the far server alerted", || {
        u64_of(&call(&far, m::ALERTED_COUNT, &[], &[]).unwrap()) == 1
    });
}

/// Certificates for a test: an authority, the host's ("host.test") and a
/// client's, signed by it, and a client's signed by another authority.
struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn make() -> Certs {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let dir = tempfile::tempdir().unwrap();
        let authority = |name: &str| {
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.distinguished_name.push(rcgen::DnType::CommonName, name);
            let key = KeyPair::generate().unwrap();
            let cert = p.self_signed(&key).unwrap();
            (rcgen::Issuer::new(p, key), cert)
        };
        let (ca, ca_cert) = authority("lintel test authority");
        let (other, _) = authority("another authority");
        let write = |name: &str, text: String| std::fs::write(dir.path().join(name), text).unwrap();
        write("ca.pem", ca_cert.pem());
        for (who, issuer, names) in [
            ("host", &ca, vec!["host.test".to_string()]),
            ("client", &ca, vec!["client.test".to_string()]),
            ("stranger", &other, vec!["client.test".to_string()]),
        ] {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(names)
                .unwrap()
                .signed_by(&key, issuer)
                .unwrap();
            write(&format!("{who}.pem"), cert.pem());
            write(&format!("{who}.key"), key.serialize_pem());
        }
        Certs { dir }
    }

    fn tls(&self, who: &str) -> Tls {
        let p = |n: String| self.dir.path().join(n);
        Tls::from_pem_files(
            &p(format!("{who}.pem")),
            &p(format!("{who}.key")),
            &p("ca.pem".into()),
        )
        .unwrap()
        .server_name("host.test")
        .unwrap()
    }
}

/// Links are TLS with certificates checked on both ends: a client with a
/// certificate of the link's authority calls; one with another
/// authority's, or none, gets nothing.
#[test]
fn tls_links_admit_only_certified_ends() {
    let certs = Certs::make();
    let dir = certs.dir.path().to_str().unwrap().to_owned();
    let host = Host::start(&[("LINTEL_NET_TLS", &dir)]);
    let (_proxy, remote) = connect(host.addr, LinkOptions::tls(certs.tls("client")));
    let far = remote.lookup("ctl").unwrap();
    assert_eq!(call(&far, m::ECHO, b"sealed", &[]).unwrap().data, b"sealed");

    let proxy = Proxy::start().unwrap();
    let refused = |opts| {
        match proxy.connect(host.addr, opts, BTreeMap::<String, Door>::new()) {
            Err(_) => true,
            // The client's handshake may end before the server refuses
            // its certificate: then the link is dead at once.
            Ok(r) => r.lookup("ctl").is_err(),
        }
    };
    assert!(
        refused(LinkOptions::tls(certs.tls("stranger"))),
        "a certificate of another authority"
    );
    assert!(refused(LinkOptions::plain()), "no TLS at all");
    // The host still serves the certified client.
    assert_eq!(call(&far, m::ECHO, b"again", &[]).unwrap().data, b"again");
}

/// Garbage, a message claiming to be huge, a call to a capability number
/// nobody exported, and a message cut short each close the sender's
/// connection, with a reason in the host's log; the host serves others as
/// before.
#[test]
fn hostile_bytes_close_only_their_own_connection() {
    let host = Host::start(&[]);
    let (_proxy, remote) = connect(host.addr, LinkOptions::plain());
    let far = remote.lookup("ctl").unwrap();
    let closed_after = |bytes: &[u8]| {
        let mut s = TcpStream::connect(host.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(bytes);
        let mut sink = [0u8; 4096];
        loop {
            match s.read(&mut sink) {
                Ok(0) => return true,
                Ok(_) => continue, // the host's bootstrap call to us
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    };
    assert!(closed_after(&[0xff; 64]), "garbage");
    // One segment of 2^31 words: far past the link's message limit.
    assert!(closed_after(&[0, 0, 0, 0, 0, 0, 0, 0x80]), "a huge message");
    assert!(closed_after(&forged_call(4242)), "a forged capability number");
    // A message cut short: one segment of 100 words, 10 of them sent, then
    // silence (the keepalive finds the sender dead).
    let mut cut = vec![0u8, 0, 0, 0, 100, 0, 0, 0];
    cut.extend_from_slice(&[0u8; 80]);
    assert!(closed_after(&cut), "a truncated message");
    assert_eq!(call(&far, m::ECHO, b"fine", &[]).unwrap().data, b"fine");
    eventually(
        Duration::from_secs(10),
        "a reason logged for each connection closed",
        || {
            host.log()
                .iter()
                .filter(|l| l.contains("link closed") || l.contains("link cut"))
                .count()
                >= 4
        },
    );
}

/// An RPC `Call` message on import `id`, framed as on the wire.
fn forged_call(id: u32) -> Vec<u8> {
    use capnp_rpc::rpc_capnp::message;
    let mut msg = capnp::message::Builder::new_default();
    {
        let root: message::Builder = msg.init_root();
        let mut c = root.init_call();
        c.set_question_id(0);
        c.set_interface_id(0);
        c.set_method_id(0);
        c.reborrow().init_target().set_imported_cap(id);
        c.init_params();
    }
    let mut out = Vec::new();
    capnp::serialize::write_message(&mut out, &msg).unwrap();
    out
}
