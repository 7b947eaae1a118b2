//! A hostile domain against a victim (DESIGN.md, Semantics 1 and 8): a domain
//! can call only doors it holds, and nothing it writes into shared memory or
//! sends on its sockets crashes or hangs the server, or runs a handler for a
//! door it does not hold.
//!
//! Each test starts a victim peer, a second (honest) client that holds the
//! victim's control door, and the attacker (`lintel-attacker`), to which this
//! process passes the victim's control door (a third-party transfer: the
//! attacker gets its own connection to the victim) and a decoy door served
//! here. The attacker attacks for a bounded time and exits; then the victim
//! must still be running, answer correctly and promptly, have run no handler
//! for a door the attacker did not hold, have dropped the attacker's
//! references, and still accept new clients.
//!
//! Doors the attacker must never reach: the victim's secret door (never
//! handed out; the victim counts its calls), a door the victim made for this
//! process only (its datum must never show up in a reply the attacker sees),
//! and a bait door served here that only the victim holds.
//!
//! The attacker reports what it found and did; a test fails if it found
//! nothing to attack. Seeds are fixed per test; `HOSTILE_SEED` overrides.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use lintel::{Door, Reply, Request};
use lintel_tests::{eventually, m, Peer};

/// How long the victim may take to tear down what a dead attacker held:
/// generous, so a busy machine cannot fail a correct run (each check
/// returns as soon as it holds).
const SETTLE: Duration = Duration::from_secs(30);
/// Same value as in the attacker: the datum of our private door.
const PRIVATE_DATUM: u64 = 0x5EC2_E7D0_0B5E_C2E7;
/// How long a healthy victim may take to answer one call: generous, so a
/// busy machine cannot fail a correct run; a victim that hangs still fails.
const ANSWER: Duration = Duration::from_secs(30);

fn attacker_path() -> PathBuf {
    lintel_tests::bin_path("lintel-attacker")
}

fn seed(default: u64) -> u64 {
    std::env::var("HOSTILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Run `f` on a helper thread; `None` if it did not finish within `limit`
/// (the thread is then left behind, stuck in whatever hung).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

fn call(door: &Door, method: u8, arg: &[u8]) -> Result<Vec<u8>, lintel::CallError> {
    lintel_tests::call(door, method, arg, &[]).map(|r| r.data)
}

/// Call `method` on `door` with a deadline: `Err` says what went wrong.
fn call_within(door: &Door, method: u8, arg: &[u8], limit: Duration) -> Result<Vec<u8>, String> {
    let (d, a) = (door.clone(), arg.to_vec());
    match within(limit, move || call(&d, method, &a)) {
        None => Err(format!("no answer within {limit:?} (hang)")),
        Some(Err(e)) => Err(format!("call failed: {e}")),
        Some(Ok(v)) => Ok(v),
    }
}

fn u64_of(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().expect("8 bytes"))
}

fn counting_door(datum: u64, count: Arc<AtomicU64>) -> Door {
    Door::create(datum, move |req: Request<'_>, reply: &mut Reply| {
        count.fetch_add(1, SeqCst);
        reply.data.extend_from_slice(req.data);
        Ok(())
    })
}

/// The victim and the honest parties around it.
struct Scene {
    victim: Peer,
    /// An honest client of the victim: holds its control door (held[0]).
    client: Peer,
    /// Made by the victim for this process alone.
    private: Door,
    /// Served here, held only by the victim: nobody calls it.
    bait_calls: Arc<AtomicU64>,
    _bait: Door,
    /// Served here, offered to the attacker (its calls are allowed).
    decoy: Door,
    unrefs_before: u64,
    made_before: u64,
    conns_before: u64,
}

impl Scene {
    fn new() -> Scene {
        Scene::with_victim("plain")
    }

    /// A scene whose victim is a peer of `role`: "plain", or "trusting"
    /// (its control door reads large arguments in place).
    fn with_victim(role: &str) -> Scene {
        let victim = Peer::start(role);
        let private = victim
            .call(m::MAKE_DOOR, &PRIVATE_DATUM.to_le_bytes(), &[])
            .expect("make private door")
            .doors
            .pop()
            .expect("private door");
        let bait_calls = Arc::new(AtomicU64::new(0));
        let bait = counting_door(0xBA17, bait_calls.clone());
        victim
            .call(m::HOLD, b"", std::slice::from_ref(&bait))
            .expect("victim holds the bait");
        let client = Peer::start_with("plain", &[], std::slice::from_ref(&victim.ctl));
        let decoy = counting_door(0xDEC0, Arc::new(AtomicU64::new(0)));
        let mut s = Scene {
            unrefs_before: 0,
            made_before: 0,
            conns_before: 0,
            victim,
            client,
            private,
            bait_calls,
            _bait: bait,
            decoy,
        };
        // The client connects to the victim after its boot; once it has
        // called, the counts are settled.
        s.client_call().expect("honest client works before the attack");
        s.unrefs_before = s.victim.u64(m::UNREF_COUNT, b"");
        s.made_before = s.victim.u64(m::MADE_COUNT, b"");
        s.conns_before = s.victim.u64(m::CONNECTIONS, b"");
        s
    }

    /// The honest client calls the victim through the door it holds.
    fn client_call(&self) -> Result<(), String> {
        via_held(&self.client.ctl, b"via-client")
    }

    /// A count the victim reports (0 if it does not answer).
    fn count(&self, method: u8) -> u64 {
        call_within(&self.victim.ctl, method, b"", ANSWER)
            .map(|v| u64_of(&v))
            .unwrap_or(0)
    }

    /// Everything that must hold once the attacker is gone.
    fn assert_healthy(&mut self) {
        if let Ok(Some(status)) = self.victim.child.try_wait() {
            panic!("the victim died: {status}");
        }
        let echoed = call_within(&self.victim.ctl, m::ECHO, b"still-there", ANSWER);
        assert_eq!(
            echoed.as_deref(),
            Ok(&b"still-there"[..]),
            "the victim must still answer correctly"
        );
        let big: Vec<u8> = (0..4000u32).map(|i| (i * 13) as u8).collect();
        let echoed = call_within(&self.victim.ctl, m::ECHO, &big, ANSWER);
        assert_eq!(echoed.as_ref(), Ok(&big), "vanilla path after the attack");
        // Larger than the data region: a bulk segment (read in place by a
        // trusting victim).
        let bulk: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + i / 300) as u8).collect();
        let echoed = call_within(&self.victim.ctl, m::ECHO, &bulk, ANSWER);
        assert!(echoed.as_ref() == Ok(&bulk), "bulk path after the attack");
        let secret = call_within(&self.victim.ctl, m::SECRET_CALLS, b"", ANSWER).expect("secret count");
        assert_eq!(u64_of(&secret), 0, "a handler ran for the secret door");
        assert_eq!(self.bait_calls.load(SeqCst), 0, "the bait door was called");
        let p = call_within(&self.private, m::ECHO, b"", ANSWER).expect("private door still works");
        assert_eq!(u64_of(&p), PRIVATE_DATUM);
        self.client_call().expect("the honest client is still served");

        // The attacker's references went with it: its connection is gone
        // and every door it had the victim make for it is unreferenced,
        // once. (Its own, and any a garbled request made: a scribbled
        // flag can make the victim read a method byte that the victim's
        // own earlier reply left in the data region, and the attacker may
        // call any method of a door it holds.)
        let made = self.count(m::MADE_COUNT) - self.made_before;
        assert!(made >= 1, "the attacker had the victim make its own door");
        let (conns, unrefs) = (self.conns_before, self.unrefs_before + made);
        assert!(
            eventually(SETTLE, || self.count(m::CONNECTIONS) == conns),
            "the victim has {} connections, {conns} before the attack: one to the dead attacker \
             is left, or the attacker made it open new ones",
            self.count(m::CONNECTIONS)
        );
        assert!(
            eventually(SETTLE, || self.count(m::UNREF_COUNT) == unrefs),
            "the attacker's {made} doors were not unreferenced once each: {} unreferenced, {} before",
            self.count(m::UNREF_COUNT),
            self.unrefs_before
        );

        // A newcomer can still join and call the victim.
        newcomer(&self.victim.ctl).expect("a new client must still be able to call the victim");
    }
}

/// Start a new client offered the victim's door; it calls the victim.
fn newcomer(victim: &Door) -> Result<(), String> {
    let ctl = victim.clone();
    let r = within(Duration::from_secs(10), move || {
        let mut cmd = Command::new(lintel_tests::peer_path());
        cmd.arg("plain");
        let mut s = lintel::boot::spawn(&mut cmd, &[ctl]).map_err(|e| format!("spawn: {e}"))?;
        let r = s
            .doors
            .first()
            .ok_or("no door".to_string())
            .and_then(|d| via_held(d, b"newcomer"));
        let _ = s.child.kill();
        let _ = s.child.wait();
        r
    });
    r.unwrap_or_else(|| Err("a new client hung".into()))
}

/// Ask a peer to call the first door it was given at boot (the victim's)
/// with an echo of `what`. A peer stores its boot doors just after it joins,
/// so right after it starts it may not hold one yet (fault 4): retry then.
fn via_held(peer: &Door, what: &[u8]) -> Result<(), String> {
    let mut arg = vec![m::ECHO];
    arg.extend_from_slice(what);
    let end = Instant::now() + ANSWER;
    loop {
        match call_within(peer, m::CALL_HELD, &arg, ANSWER) {
            Ok(v) if v == what => return Ok(()),
            Ok(v) => return Err(format!("wrong answer through a held door: {v:?}")),
            Err(e) if e.contains("code 4") && Instant::now() < end => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(format!("calling the victim through a held door: {e}")),
        }
    }
}

/// A running attacker.
struct Attack {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

/// What the attacker reported.
struct Report {
    line: String,
    vals: HashMap<String, u64>,
}

impl Report {
    fn get(&self, k: &str) -> u64 {
        *self
            .vals
            .get(k)
            .unwrap_or_else(|| panic!("attacker report lacks {k}: {}", self.line))
    }

    /// The attacker found the victim's call area and socket and used them.
    fn assert_attacked(&self) {
        assert!(self.get("maps") >= 1, "no shared mapping found: {}", self.line);
        assert_eq!(
            self.get("victim_area"),
            1,
            "victim's call area not found: {}",
            self.line
        );
        assert!(self.get("sockets") >= 1, "no socket found: {}", self.line);
        assert_eq!(
            self.get("victim_socket"),
            1,
            "victim's socket not found: {}",
            self.line
        );
        assert_eq!(
            self.get("private_hits"),
            0,
            "a reply carried the private door's datum: {}",
            self.line
        );
    }
}

fn launch(scene: &Scene, mode: &str, seed: u64, ms: u64) -> Attack {
    let mut cmd = Command::new(attacker_path());
    cmd.arg(mode)
        .arg(seed.to_string())
        .env("HOSTILE_MS", ms.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // Spawned from this thread: the attacker's parent-death signal fires
    // when the spawning thread exits.
    let offer = [scene.victim.ctl.clone(), scene.decoy.clone()];
    let spawned = lintel::boot::spawn(&mut cmd, &offer).expect("spawn the attacker");
    let mut child = spawned.child;
    let stdin = child.stdin.take();
    let out = child.stdout.take().expect("attacker stdout");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    Attack { child, stdin, lines }
}

impl Attack {
    /// Wait for a line starting with `prefix`.
    fn line(&self, prefix: &str, limit: Duration) -> Option<String> {
        let end = Instant::now() + limit;
        loop {
            let left = end.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with(prefix) => return Some(l),
                Ok(l) if l.starts_with("HOSTILE_ERROR") => panic!("attacker: {l}"),
                Ok(l) => eprintln!("attacker says: {l}"),
                Err(_) => return None,
            }
        }
    }

    /// Let a holding attacker go (closes its stdin), wait for it to exit
    /// (killing it after `limit`), and return its report.
    fn finish(mut self, limit: Duration) -> Report {
        drop(self.stdin.take());
        let line = self.line("HOSTILE ", limit);
        let end = Instant::now() + Duration::from_secs(2);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(st)) => break Some(st),
                _ if Instant::now() > end => break None,
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let line = line.unwrap_or_else(|| panic!("the attacker did not finish within {limit:?}"));
        assert!(status.is_some_and(|s| s.success()), "attacker exit: {status:?}");
        let vals = line
            .split_whitespace()
            .skip(1)
            .filter_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect();
        Report { line, vals }
    }
}

/// Run one bounded attack to the end and check the victim afterwards.
fn attack_then_check(mode: &str, seed: u64, ms: u64) -> Report {
    attack_victim_then_check("plain", mode, seed, ms)
}

/// As [`attack_then_check`], on a victim of `role`.
fn attack_victim_then_check(role: &str, mode: &str, seed: u64, ms: u64) -> Report {
    let mut scene = Scene::with_victim(role);
    let attack = launch(&scene, mode, seed, ms);
    let report = attack.finish(Duration::from_millis(ms) + Duration::from_secs(10));
    eprintln!("{mode}: {}", report.line);
    report.assert_attacked();
    scene.assert_healthy();
    report
}

#[test]
fn scribbling_every_shared_mapping_hurts_nobody() {
    let r = attack_then_check("scribble", seed(11), 1500);
    assert!(r.get("words_written") > 100_000, "{}", r.line);
    assert!(
        r.get("scribble_answered") > 100,
        "the server never looked: {}",
        r.line
    );
    assert!(r.get("published") > 1000, "{}", r.line);
    assert!(r.get("kicks") > 0, "{}", r.line);
}

#[test]
fn garbage_and_forged_control_messages_hurt_nobody() {
    let r = attack_then_check("sockets", seed(22), 1500);
    assert!(r.get("msgs_sent") > 1000, "{}", r.line);
    assert!(r.get("fds_sent") > 100, "{}", r.line);
}

#[test]
fn guessed_grants_and_forged_descriptors_reach_only_held_doors() {
    let r = attack_then_check("forge", seed(33), 2500);
    assert!(
        r.get("forged_replies") > 5000,
        "the server answered few forgeries: {}",
        r.line
    );
    assert!(
        r.get("held_grants_ok") >= 1,
        "even held grants failed: {}",
        r.line
    );
    assert_eq!(
        r.get("foreign_grants_ok"),
        0,
        "a guessed grant worked: {}",
        r.line
    );
    assert_eq!(
        r.get("foreign_yours_ok"),
        0,
        "a forged WD_YOURS resolved: {}",
        r.line
    );
}

#[test]
fn everything_at_once_while_honest_clients_keep_being_served() {
    let mut scene = Scene::new();
    let attack = launch(&scene, "all", seed(44), 2000);
    // During the attack the honest client keeps calling; every call must be
    // answered promptly (the attacker may slow things down, not stop them).
    let end = Instant::now() + Duration::from_millis(1800);
    let mut worst = Duration::ZERO;
    let mut calls = 0;
    while Instant::now() < end {
        let t = Instant::now();
        if let Err(e) = scene.client_call() {
            panic!("the victim stopped serving an honest client during the attack: {e}");
        }
        worst = worst.max(t.elapsed());
        calls += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let report = attack.finish(Duration::from_secs(12));
    eprintln!("all: {} (honest calls {calls}, worst {worst:?})", report.line);
    report.assert_attacked();
    assert!(
        report.get("published") > 1000 && report.get("msgs_sent") > 1000,
        "{}",
        report.line
    );
    scene.assert_healthy();
}

// ---- Targeted attacks, one per weakness once found (see the attacker's docs). ----

/// A request carrying a `WD_THIRD` descriptor whose "ticket" is a socket
/// the attacker made (naming pid 0, or the attacker's own pid) must not
/// make the server adopt that socket and wait on it: the kernel names the
/// ticket's maker (`SO_PEERCRED`), a ticket made by its sender is refused,
/// and every ticket request is bounded in time. Otherwise 24 such requests
/// hold the whole pool and honest clients wait while the attacker lives.
#[test]
fn forged_third_party_tickets_do_not_stall_the_server() {
    let mut scene = Scene::new();
    let attack = launch(&scene, "ticket-hang", seed(55), 500);
    assert!(
        attack.line("PLANTED", Duration::from_secs(10)).is_some(),
        "attacker never planted"
    );
    std::thread::sleep(Duration::from_millis(200));
    let during = scene.client_call();
    let report = attack.finish(Duration::from_secs(5));
    eprintln!("ticket-hang: {}", report.line);
    report.assert_attacked();
    assert!(report.get("planted") >= 16, "{}", report.line);
    if let Err(e) = during {
        let after = scene.client_call();
        panic!(
            "RUNTIME BUG: forged WD_THIRD tickets (sockets the attacker made) stalled the victim's \
             server threads while the attacker lived: {e}; once it had exited: {after:?}"
        );
    }
    scene.assert_healthy();
}

/// As above, but both ends of the socket pair travel in the ticket batch:
/// were the server to adopt one end, the answer could only arrive on the
/// other, unread in the same request's ticket list, and its threads would
/// hang even after the attacker has exited.
#[test]
fn forged_ticket_pairs_do_not_hang_the_server_forever() {
    let mut scene = Scene::new();
    let attack = launch(&scene, "ticket-cycle", seed(66), 300);
    let report = attack.finish(Duration::from_secs(10));
    eprintln!("ticket-cycle: {}", report.line);
    report.assert_attacked();
    assert!(report.get("planted") >= 16, "{}", report.line);
    std::thread::sleep(Duration::from_millis(300));
    if let Err(e) = scene.client_call() {
        panic!(
            "RUNTIME BUG: after the attacker exited, the victim no longer serves anyone: forged \
             WD_THIRD tickets made of both ends of one socket pair hang its server threads for good: {e}"
        );
    }
    scene.assert_healthy();
}

/// The attacker mails its own end of its connection to the victim (a
/// `Tickets` batch for a call that never comes, a `Boot` message, an
/// unsolicited `Minted` answer). Were the victim to keep them, the socket
/// would never hang up; the victim watches the peer process itself (a pidfd,
/// with the pid the kernel vouched for), so the connection dies with it and
/// every reference the attacker held is dropped.
#[test]
fn a_connection_dies_with_its_peer_even_if_the_peer_mailed_its_own_socket() {
    attack_then_check("self-socket", seed(77), 100);
}

/// Descriptors parked for later (`Tickets` batches, unsolicited `Minted`
/// answers) must stay bounded per connection, or they exhaust the victim's
/// descriptor table while the attacker lives and no new client can join it
/// (minting a ticket needs a socket pair).
#[test]
fn parked_descriptors_do_not_lock_newcomers_out() {
    let mut scene = Scene::new();
    let attack = launch(&scene, "fd-flood", seed(88), 100);
    assert!(
        attack.line("PLANTED", Duration::from_secs(10)).is_some(),
        "attacker never planted"
    );
    let during = scene.client_call();
    let newcomer = newcomer(&scene.victim.ctl);
    let report = attack.finish(Duration::from_secs(10));
    eprintln!("fd-flood: {}", report.line);
    report.assert_attacked();
    during.expect("existing clients are served during the flood");
    if let Err(e) = newcomer {
        panic!(
            "RUNTIME BUG: while the attacker parks descriptors in the victim, a new client cannot \
             join it: {e}"
        );
    }
    scene.assert_healthy();
}

/// A third-party descriptor whose pid is 0 ("unknown server") must not make
/// the receiver open a new connection to a server it is connected to
/// already: the receiver looks the server up by the pid the kernel gives
/// for the ticket's maker, not the one the sender wrote. The attacker passes
/// a door of this process to the victim 30 times with the pid rewritten to
/// 0; the victim must not keep a connection per transfer.
#[test]
fn third_party_doors_naming_no_pid_do_not_pile_up_connections() {
    let mut scene = Scene::new();
    let attack = launch(&scene, "ticket-pid0", seed(99), 100);
    let report = attack.finish(Duration::from_secs(10));
    eprintln!("ticket-pid0: {}", report.line);
    report.assert_attacked();
    assert!(report.get("planted") >= 30, "{}", report.line);
    let before = scene.conns_before;
    if !eventually(SETTLE, || scene.count(m::CONNECTIONS) == before) {
        panic!(
            "RUNTIME BUG: the attacker made the victim open connections that outlive it: {} \
             connections, {before} before ({} of its {} transfers with pid 0 went through)",
            scene.count(m::CONNECTIONS),
            report.get("legit_ok"),
            report.get("planted")
        );
    }
    scene.assert_healthy();
}

/// Bulk segments, sealed snapshots and loans that lie about themselves get
/// the refusal each deserves, and bytes changed under the victim while it
/// copies them change only what it reads: it never faults or hangs.
#[test]
fn lying_bulk_segments_snapshots_and_loans_are_refused_and_fault_nobody() {
    let mut scene = Scene::new();
    let attack = launch(&scene, "bulk", seed(7), 100);
    let report = attack.finish(Duration::from_secs(60));
    eprintln!("bulk: {}", report.line);
    report.assert_attacked();
    assert!(report.get("bulk_cases") >= 45, "{}", report.line);
    assert_eq!(
        report.get("bulk_expected"),
        report.get("bulk_cases"),
        "a lying request got another answer than it must (see the attacker's stderr): {}",
        report.line
    );
    scene.assert_healthy();
}

/// Loans come back only from the peer they were lent to: an attacker that
/// returns every page of the victim's arena, by message and inside
/// requests, frees nothing lent to this process. Were our loan's pages
/// taken back, the loans the victim makes next would be cut from them and
/// their bytes would show through ours.
#[test]
fn forged_loan_returns_free_only_what_the_forger_was_lent() {
    let mut scene = Scene::new();
    let filled = |len: u64, byte: u8| {
        let mut arg = len.to_le_bytes().to_vec();
        arg.push(byte);
        arg
    };
    let mut held = scene
        .victim
        .call(m::RETURN_LOAN_FILLED, &filled(64 << 10, 0xAA), &[])
        .expect("a loan");
    let ours = held.buffers.pop().expect("a loan in the reply");
    assert!(
        matches!(ours, lintel::Buffer::Loaned(_)),
        "a loan of the victim's arena"
    );
    let lent = scene.victim.u64(m::LENT, b"");
    assert!(lent >= 64 << 10, "the victim counts our loan: {lent}");
    let attack = launch(&scene, "loan-return", seed(9), 100);
    let report = attack.finish(Duration::from_secs(60));
    eprintln!("loan-return: {}", report.line);
    report.assert_attacked();
    assert!(
        report.get("returns_forged") >= (lintel::abi::LOAN_ARENA_SIZE / 4096) as u64,
        "{}",
        report.line
    );
    assert_eq!(
        scene.victim.u64(m::LENT, b""),
        lent,
        "forged returns freed loans lent to others"
    );
    for _ in 0..64 {
        let r = scene
            .victim
            .call(m::RETURN_LOAN_FILLED, &filled(64 << 10, 0x55), &[])
            .expect("another loan");
        assert_eq!(lintel_tests::buffer_bytes(&r.buffers[0]), vec![0x55; 64 << 10]);
    }
    assert!(
        lintel_tests::buffer_bytes(&ours).iter().all(|&b| b == 0xAA),
        "our loan's bytes were reused for another loan"
    );
    drop(ours);
    scene.assert_healthy();
}

/// The trusted placement under the same attacks: a victim whose control
/// door trusts its callers (`Door::create_trusting`, its echo reading
/// arguments in place) survives scribbled shared memory, lying segments,
/// and everything at once, and answers honest callers correctly after: a
/// caller that breaks the trust changes only the bytes the handler reads.
#[test]
fn a_door_that_trusts_its_callers_survives_every_attack() {
    let r = attack_victim_then_check("trusting", "scribble", seed(12), 1500);
    assert!(
        r.get("scribble_answered") > 100,
        "the server never looked: {}",
        r.line
    );
    let r = attack_victim_then_check("trusting", "bulk", seed(8), 100);
    assert!(r.get("bulk_cases") >= 45, "{}", r.line);
    assert_eq!(
        r.get("bulk_expected"),
        r.get("bulk_cases"),
        "a lying request got another answer than it must (see the attacker's stderr): {}",
        r.line
    );
    let r = attack_victim_then_check("trusting", "all", seed(45), 1500);
    assert!(r.get("published") > 1000, "{}", r.line);
}

#[test]
fn a_peer_of_another_protocol_version_is_refused_with_a_typed_error() {
    let mut cmd = std::process::Command::new(attacker_path());
    cmd.arg("other-version").stdout(std::process::Stdio::null());
    match lintel::boot::spawn(&mut cmd, &[]) {
        Err(lintel::BootError::Version { ours, theirs }) => {
            assert_eq!(ours, lintel::abi::VERSION);
            assert_eq!(theirs, lintel::abi::VERSION + 1);
        }
        Err(e) => panic!("refused, but not for its version: {e}"),
        Ok(_) => panic!("a peer of another version was accepted"),
    }
}
