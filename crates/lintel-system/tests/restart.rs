//! Restarts, with real processes: a killed domain comes back as its policy
//! says, names follow the new instance, dependents restart after their
//! provider, a crash loop is given up on in bounded time, and the
//! supervisor leaks nothing however often it restarts.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::*;
use lintel::{CallError, Door};
use lintel_system::{Named, Names};
use lintel_tests::holdings::Holdings;

fn kill(pid: u32) {
    let ok = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {pid}");
}

/// `status --json` of the system booted from `m`, one value per domain.
fn status(m: &Path) -> Vec<serde_json::Value> {
    let out = run(&["status", "--json", m.to_str().unwrap()], "script");
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn domain<'a>(all: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    all.iter().find(|d| d["domain"] == name).unwrap()
}

/// Wait until `status` shows domain `name` as `like` says: its status.
fn until(m: &Path, name: &str, like: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all = status(m);
        let d = domain(&all, name).clone();
        if like(&d) {
            return d;
        }
        assert!(Instant::now() < deadline, "{name} not as awaited: {all:#?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until `status` shows domain `name` running with `restarts`.
fn until_running(m: &Path, name: &str, restarts: u64) -> serde_json::Value {
    until(m, name, |d| d["state"] == "running" && d["restarts"] == restarts)
}

/// The system's name service, as a tool sees it.
fn names(m: &Path, sys: &str) -> Names {
    let socket = m.parent().unwrap().join(format!("{sys}.sock"));
    let mut doors = lintel::boot::connect(&socket, &[]).unwrap();
    Names::new(doors.remove(0))
}

/// Greet through `greeter`: the reply's count.
fn greet(greeter: &Named<Door>) -> Result<u64, String> {
    let door = greeter.get().map_err(|e| e.to_string())?;
    let r = door.call_bytes(b"gx").map_err(|e| e.to_string())?;
    let r = String::from_utf8(r).unwrap();
    Ok(r.trim_end_matches(')')
        .rsplit('#')
        .next()
        .unwrap()
        .parse()
        .unwrap())
}

const TWO: &str = "[domain.a]\nservices = [\"counter\"]\n[domain.b]\nservices = [\"greeter\"]\n";

#[test]
fn a_killed_domain_comes_back_and_names_follow_it() {
    let dir = scratch();
    let m = manifest(&dir, "back", TWO);
    let mut sys = Running::start(&m);
    sys.wait_for("system ready: 2 domains");
    let pids = sys.pids();
    let names = names(&m, "back");
    let greeter = Named::<Door>::new(&names, "greeter", Duration::from_secs(10)).unwrap();
    assert_eq!(greet(&greeter), Ok(1));

    // The greeter's domain dies: restarted after the first backoff.
    kill(pids[1]);
    sys.wait_for("back: domain b exited: signal 9 (SIGKILL); restarting it in 100ms (restart 1)");
    sys.wait_for("back: domain b started (pid");
    let b = until_running(&m, "b", 1);
    let new_b = *sys.pids().last().unwrap();
    assert_eq!(b["pid"], new_b);
    assert_ne!(new_b, pids[1]);
    assert_eq!(b["last_exit"], "signal 9 (SIGKILL)");
    // The counter's domain was not touched: the count goes on.
    assert_eq!(greet(&greeter), Ok(2), "the next call finds the new instance");
    assert_eq!(domain(&status(&m), "a")["restarts"], 0);

    // The counter's domain dies: the greeter took its door at start-up, so
    // it is restarted too, after it; the count starts again.
    kill(pids[0]);
    sys.wait_for("back: domain a exited: signal 9 (SIGKILL); restarting it in 100ms (restart 1)");
    sys.wait_for("back: domain b took doors of a when it started: restarting it too");
    until_running(&m, "a", 1);
    until_running(&m, "b", 2);
    assert_eq!(greet(&greeter), Ok(1));
    // The names service never hands out a door of a dead instance.
    let all = status(&m);
    for (name, dom) in [("counter", "a"), ("greeter", "b")] {
        let d = names.lookup(name).unwrap();
        assert!(!d.is_dead());
        assert_eq!(domain(&all, dom)["pid"], d.server_pid());
    }
    // The table a person reads says the same: a header, then a row per
    // domain with its pid, state, restarts, last exit and next action.
    let out = run(&["status", m.to_str().unwrap()], "script");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let lines: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        lines[0][..5],
        ["DOMAIN", "PID", "STATE", "UPTIME", "RESTARTS"],
        "{table}"
    );
    let row = |dom: &str| {
        lines
            .iter()
            .find(|l| l[0] == dom)
            .unwrap_or_else(|| panic!("{dom}: {table}"))
    };
    for (dom, restarts) in [("a", "1"), ("b", "2")] {
        let r = row(dom);
        assert_eq!(r[1], domain(&all, dom)["pid"].to_string(), "{table}");
        assert_eq!((r[2], r[4]), ("running", restarts), "{table}");
        assert!(table.contains("signal 9 (SIGKILL)"), "{table}");
    }

    sys.signal("-TERM");
    let (code, seen) = sys.wait();
    assert_eq!(code, Some(143));
    assert!(
        pids_in(&seen.join("\n")).iter().all(|p| !alive(*p)),
        "leftover domains"
    );
}

#[test]
fn a_domain_that_fails_every_start_is_given_up_on_in_bounded_time() {
    for give_up in ["leave", "stop"] {
        let dir = scratch();
        let m = manifest(
            &dir,
            "loop",
            &format!(
                "{TWO}[domain.f]\nservices = [\"fragile\"]\nbackoff = \"10ms\"\nmax_backoff = \"40ms\"\n\
                 max_restarts = 3\nperiod = \"1m\"\ngive_up = \"{give_up}\"\n\
                 [service.fragile]\nfail_if = \"broken\"\n"
            ),
        );
        let mut sys = Running::start(&m);
        sys.wait_for("system ready: 3 domains");
        let f = sys.pids()[2];
        std::fs::write(dir.join("broken"), b"").unwrap();
        let t0 = Instant::now();
        kill(f);
        let line = match give_up {
            "leave" => "; giving up after 3 restarts within 1m: it stays down",
            _ => "; giving up after 3 restarts within 1m: stopping the system",
        };
        sys.wait_for(line);
        assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
        let exits = sys.seen.iter().filter(|l| l.contains("domain f exited")).count();
        assert_eq!(exits, 4, "the kill and three failed starts: {:#?}", sys.seen);
        // Each try fails in the factory (the domain may die before the
        // supervisor has its doors: "exited: before it joined").
        let starts_failed = sys
            .seen
            .iter()
            .filter(|l| l.contains("service `fragile` failed to start"))
            .count();
        assert_eq!(starts_failed, 3, "{:#?}", sys.seen);
        let expected = if give_up == "leave" {
            let f = until(&m, "f", |d| d["state"] == "given up");
            assert_eq!(f["pid"], 0);
            let last = f["last_exit"].as_str().unwrap();
            assert!(
                last == "status 3" || last.starts_with("before it joined"),
                "{last}"
            );
            assert_eq!(domain(&status(&m), "a")["state"], "running");
            let e = names(&m, "loop").lookup("fragile").unwrap_err();
            assert!(e.to_string().contains("is gone: its domain `f` exited"), "{e}");
            sys.signal("-TERM");
            143
        } else {
            1
        };
        let (code, seen) = sys.wait();
        assert_eq!(code, Some(expected), "{seen:#?}");
        let all = pids_in(&seen.join("\n"));
        assert!(all.iter().all(|p| !alive(*p)), "leftover domains");
    }
}

#[test]
fn a_domain_killed_during_its_own_restart_is_restarted_again() {
    let dir = scratch();
    let m = manifest(
        &dir,
        "during",
        &format!("{TWO}[domain.f]\nservices = [\"fragile\"]\n[service.fragile]\nstart_ms = 1000\n"),
    );
    let mut sys = Running::start(&m);
    sys.wait_for("system ready: 3 domains");
    kill(sys.pids()[2]);
    sys.wait_for("during: domain f exited: signal 9 (SIGKILL); restarting it in 100ms (restart 1)");
    sys.wait_for("during: domain f started (pid");
    // Its factory takes a second: it is still starting.
    let starting = until(&m, "f", |d| d["state"] == "starting");
    let starting = starting["pid"].as_u64().unwrap() as u32;
    kill(starting);
    sys.wait_for("during: domain f exited: signal 9 (SIGKILL); restarting it in 200ms (restart 2)");
    let f = until_running(&m, "f", 2);
    assert_ne!(f["pid"], starting);
    let door = names(&m, "during").lookup("fragile").unwrap();
    assert_eq!(door.call_bytes(b"").unwrap(), [1]);
    sys.signal("-TERM");
    assert_eq!(sys.wait().0, Some(143));
}

#[test]
fn restarts_under_load_leak_nothing_in_the_supervisor() {
    let dir = scratch();
    let m = manifest(
        &dir,
        "churn",
        &TWO.replace(
            "[\"greeter\"]\n",
            "[\"greeter\"]\nbackoff = \"1ms\"\nmax_backoff = \"1ms\"\nmax_restarts = 1000\n",
        ),
    );
    let mut sys = Running::start(&m);
    sys.wait_for("system ready: 2 domains");
    let sup = sys.child.id();
    // Callers all the time, from several threads, each through its own
    // `Named` greeter.
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let callers: Vec<_> = (0..3)
        .map(|_| {
            let names = names(&m, "churn");
            let (stop, served) = (stop.clone(), served.clone());
            std::thread::spawn(move || {
                let greeter = Named::<Door>::new(&names, "greeter", Duration::from_secs(10)).unwrap();
                let mut failed = Vec::new();
                while !stop.load(SeqCst) {
                    match greeter.get().map(|d| d.call_bytes(b"gx")) {
                        Ok(Ok(_)) => {
                            served.fetch_add(1, SeqCst);
                        }
                        // The call in flight when the greeter died.
                        Ok(Err(CallError::PeerDied)) => failed.push(CallError::PeerDied.to_string()),
                        Ok(Err(e)) => failed.push(e.to_string()),
                        Err(e) => failed.push(e.to_string()),
                    }
                }
                failed
            })
        })
        .collect();
    let rounds = 25;
    let mut first = None;
    for round in 1..=rounds {
        let b = domain(&status(&m), "b")["pid"].as_u64().unwrap() as u32;
        kill(b);
        until_running(&m, "b", round);
        // Served again: calls get through after each restart.
        let before = served.load(SeqCst);
        let deadline = Instant::now() + Duration::from_secs(30);
        while served.load(SeqCst) < before + 10 {
            assert!(Instant::now() < deadline, "round {round}: no calls served");
            std::thread::sleep(Duration::from_millis(1));
        }
        if round == 5 {
            first = Some(Holdings::of(sup));
        }
    }
    stop.store(true, SeqCst);
    let failed: Vec<String> = callers.into_iter().flat_map(|c| c.join().unwrap()).collect();
    // Only calls in flight at a death fail, each with `PeerDied`.
    assert!(
        failed.iter().all(|e| e == &CallError::PeerDied.to_string()),
        "{failed:#?}"
    );
    assert!(failed.len() <= 3 * rounds as usize * 2, "{} failed", failed.len());
    let (before, after) = (first.unwrap(), Holdings::of(sup));
    assert_eq!(after.zombies, 0, "the supervisor reaps every domain it restarts");
    let seen = format!("after 5 restarts {before:?}, after {rounds} {after:?}");
    assert!(after.fds <= before.fds + 2, "descriptors: {seen}");
    assert!(after.threads <= before.threads + 4, "threads: {seen}");
    assert!(after.rss_kib <= before.rss_kib + 4096, "resident memory: {seen}");
    sys.signal("-TERM");
    assert_eq!(sys.wait().0, Some(143));
}
