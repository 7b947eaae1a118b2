//! Doors across "machines" that are network namespaces joined by veth
//! pairs (made by each test, as root; CI runs as root): a chain of three
//! hosts, this process being the first (in the machine's own namespace),
//! `B` and `C` hosts (`lintel-net-host`) in namespaces of their own, B
//! importing C's control door and exporting it again as `far`:
//!
//! ```text
//! this process ──veth── B (ns) ──veth── C (ns)
//! ```
//!
//! Calls, doors passed along the chain, deadlines and alerts across both
//! links, the first link taken down and up again with `ip link`, and each
//! host's proxy and server killed mid-call. Each wait is bounded.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::time::{Duration, Instant};

use lintel::{CallError, Door};
use lintel_net::{Endpoint, LinkOptions, Proxy};
use lintel_tests::net::{eventually, u64_of, Host};
use lintel_tests::{call, m};

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

static NETS: AtomicU32 = AtomicU32::new(0);

/// Two namespaces, B and C, and the veth pairs of the chain; removed when
/// dropped.
struct Net {
    ns: [String; 2],
    /// The first link's end in this namespace.
    near: String,
    /// Addresses of B (on the first link) and C (on the second).
    b: String,
    c: String,
}

impl Net {
    fn make() -> Net {
        let n = NETS.fetch_add(1, SeqCst);
        let id = format!("{}{n}", std::process::id() % 100_000);
        let ns = [format!("lt{id}b"), format!("lt{id}c")];
        let (near, b_near, b_far, c_near) = (
            format!("lv{id}a"),
            format!("lv{id}b"),
            format!("lv{id}d"),
            format!("lv{id}c"),
        );
        // A subnet per net: 10.(100 + n).(pid % 200).0/24 and 10.(150 + n)...
        let (x, y) = (100 + n % 50, std::process::id() % 200);
        let (ab, bc) = (format!("10.{x}.{y}"), format!("10.{}.{y}", x + 50));
        let net = Net {
            ns: ns.clone(),
            near: near.clone(),
            b: format!("{ab}.2"),
            c: format!("{bc}.2"),
        };
        for n in &ns {
            ip(&["netns", "add", n]);
            ip(&["-n", n, "link", "set", "lo", "up"]);
        }
        ip(&["link", "add", &near, "type", "veth", "peer", "name", &b_near]);
        ip(&["link", "set", &b_near, "netns", &ns[0]]);
        ip(&["addr", "add", &format!("{ab}.1/24"), "dev", &near]);
        ip(&["link", "set", &near, "up"]);
        ip(&["-n", &ns[0], "addr", "add", &format!("{ab}.2/24"), "dev", &b_near]);
        ip(&["-n", &ns[0], "link", "set", &b_near, "up"]);
        ip(&[
            "-n", &ns[0], "link", "add", &b_far, "type", "veth", "peer", "name", &c_near,
        ]);
        ip(&["-n", &ns[0], "link", "set", &c_near, "netns", &ns[1]]);
        ip(&["-n", &ns[0], "addr", "add", &format!("{bc}.1/24"), "dev", &b_far]);
        ip(&["-n", &ns[0], "link", "set", &b_far, "up"]);
        ip(&["-n", &ns[1], "addr", "add", &format!("{bc}.2/24"), "dev", &c_near]);
        ip(&["-n", &ns[1], "link", "set", &c_near, "up"]);
        net
    }

    /// Start a host in namespace `which` (0: B, 1: C), listening at `addr`.
    fn host(&self, which: usize, addr: &str, env: &[(&str, &str)]) -> Host {
        Host::start_in(Some(&self.ns[which]), addr, env)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for n in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
        let _ = Command::new("ip").args(["link", "del", &self.near]).status();
    }
}

const KEEPALIVE: (&str, &str) = ("LINTEL_NET_KEEPALIVE_MS", "500");

/// The chain, up: C, then B linked to it, then this process's proxy
/// linked to B (a named link: it reconnects), with B's `far` imported.
fn chain(net: &Net) -> (Host, Host, Proxy, Door) {
    let c = net.host(1, &format!("{}:7000", net.c), &[KEEPALIVE]);
    let relay = c.addr.to_string();
    let b = net.host(
        0,
        &format!("{}:7000", net.b),
        &[KEEPALIVE, ("LINTEL_NET_RELAY", &relay)],
    );
    let proxy = Proxy::start().unwrap();
    let opts = LinkOptions::plain().keepalive(Duration::from_millis(500));
    proxy
        .link(
            "b",
            Endpoint::Connect(b.addr),
            opts,
            BTreeMap::<String, Door>::new(),
        )
        .unwrap();
    let far = proxy.import("b", "far");
    (b, c, proxy, far)
}

/// Calls cross both links; a door of this host passed to C is called
/// back through B; a door of C, received here, passed on to B, is called
/// by B (through the proxies: no three-party hand-off).
#[test]
fn calls_and_doors_cross_a_chain_of_three_hosts() {
    let net = Net::make();
    let (b, _c, proxy, far) = chain(&net);
    assert_eq!(
        call(&far, m::ECHO, b"over two links", &[]).unwrap().data,
        b"over two links"
    );
    let big = vec![9u8; 1 << 20];
    assert_eq!(call(&far, m::ECHO, &big, &[]).unwrap().data, big);

    let mine = Door::create(0, |r: lintel::Request<'_>, out: &mut lintel::Reply| {
        out.data = [b"A:", r.data].concat();
        Ok(())
    });
    call(&far, m::HOLD, &[], std::slice::from_ref(&mine)).unwrap();
    assert_eq!(call(&far, m::CALL_HELD, b"back", &[]).unwrap().data, b"A:back");

    let of_c = call(&far, m::MAKE_DOOR, &3u64.to_le_bytes(), &[])
        .unwrap()
        .doors
        .pop()
        .unwrap();
    let remote_b = proxy
        .connect(b.addr, LinkOptions::plain(), BTreeMap::<String, Door>::new())
        .unwrap();
    let b_local = remote_b.lookup("local").unwrap();
    call(&b_local, m::HOLD, &[], &[of_c]).unwrap();
    assert!(call(&b_local, m::CALL_HELD, &[&[m::ECHO][..], b"x"].concat(), &[]).is_ok());
}

/// Deadlines and cancellation travel down the chain: C's server thread is
/// alerted when this host's call times out or is dropped.
#[test]
fn deadlines_and_alerts_cross_a_chain_of_three_hosts() {
    let net = Net::make();
    let (_b, _c, _proxy, far) = chain(&net);
    let alerted = || u64_of(&call(&far, m::ALERTED_COUNT, &[], &[]).unwrap());
    let left = u64_of(
        &call(
            &far.with_timeout(Duration::from_secs(30)),
            m::REMAINING_MS,
            &[],
            &[],
        )
        .unwrap(),
    );
    assert!(left > 0 && left <= 30_000, "{left} ms left at C");
    let t = Instant::now();
    let r = call(
        &far.with_timeout(Duration::from_millis(300)),
        m::SLEEP_ALERTABLE,
        &60_000u64.to_le_bytes(),
        &[],
    );
    assert_eq!(r.unwrap_err(), CallError::TimedOut);
    assert!(t.elapsed() < Duration::from_secs(10));
    eventually(Duration::from_secs(10), "C alerted at the deadline", || {
        alerted() == 1
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let arg = [&[m::SLEEP_ALERTABLE][..], &60_000u64.to_le_bytes()].concat();
        assert!(
            tokio::time::timeout(Duration::from_millis(300), far.call_async(&arg, &[]))
                .await
                .is_err()
        );
    });
    eventually(
        Duration::from_secs(10),
        "C alerted when the call was dropped",
        || alerted() == 2,
    );
}

/// The first link taken down mid-call: the call fails with `PeerDied`
/// (the keepalive, 500 ms, notices: nothing closes); brought up again, the
/// same door calls C again.
#[test]
fn a_link_taken_down_fails_its_calls_and_comes_back_when_up() {
    let net = Net::make();
    let (_b, _c, _proxy, far) = chain(&net);
    assert!(call(&far, m::ECHO, b"up", &[]).is_ok());
    let f = far.clone();
    let in_flight = std::thread::spawn(move || call(&f, m::SLEEP_ALERTABLE, &60_000u64.to_le_bytes(), &[]));
    std::thread::sleep(Duration::from_millis(200));
    let down = Instant::now();
    ip(&["link", "set", &net.near, "down"]);
    assert_eq!(in_flight.join().unwrap().unwrap_err(), CallError::PeerDied);
    assert!(down.elapsed() < Duration::from_secs(10), "{:?}", down.elapsed());
    ip(&["link", "set", &net.near, "up"]);
    eventually(
        Duration::from_secs(30),
        "calls through the link brought up",
        || call(&far, m::ECHO, b"again", &[]).is_ok_and(|r| r.data == b"again"),
    );
}

/// The middle host's proxy killed mid-call, then C's server: each call in
/// flight fails with `PeerDied`.
#[test]
fn proxies_and_servers_killed_along_the_chain_fail_calls_with_peer_died() {
    let net = Net::make();
    let (_b, c, _proxy, far) = chain(&net);
    let f = far.clone();
    let in_flight = std::thread::spawn(move || call(&f, m::SLEEP_ALERTABLE, &60_000u64.to_le_bytes(), &[]));
    std::thread::sleep(Duration::from_millis(300));
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(c.peer_pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    assert_eq!(
        in_flight.join().unwrap().unwrap_err(),
        CallError::PeerDied,
        "C's server killed"
    );

    let net2 = Net::make();
    let (mut b2, _c2, _proxy2, far2) = chain(&net2);
    let f = far2.clone();
    let in_flight = std::thread::spawn(move || call(&f, m::SLEEP_ALERTABLE, &60_000u64.to_le_bytes(), &[]));
    std::thread::sleep(Duration::from_millis(300));
    b2.kill();
    assert_eq!(
        in_flight.join().unwrap().unwrap_err(),
        CallError::PeerDied,
        "B's proxy killed"
    );
}
