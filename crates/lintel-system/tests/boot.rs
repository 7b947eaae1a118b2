//! Boots real systems of the test binary `lintel-system-testsys` (one process
//! per domain) and checks what a user sees: answers, messages, statuses,
//! and that nothing is left running.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

const COLOCATED: &str = "root = \"driver\"\n[domain.all]\nservices = [\"driver\", \"greeter\", \"counter\"]\n\
    max_message = 65536\n";
/// `greeter` starts first and waits in its lookup of `counter`.
const ISOLATED: &str = "root = \"driver\"\n[domain.b]\nservices = [\"greeter\"]\nmax_threads = 4\nspin = \"off\"\n\
    max_message = 65536\n\
    [domain.a]\nservices = [\"counter\"]\n\
    [domain.c]\nservices = [\"driver\"]\n";

#[test]
fn manifest_errors_name_the_line() {
    let dir = scratch();
    let cases = [
        (
            "[domain.a]\nservices = [\"counter\"]\nthreads = 3\n",
            ":4:",
            "unknown field `threads`",
        ),
        (
            "[domain.a]\nservices = [\"counter\", \"kv\"]\n",
            ":3:24:",
            "unknown service `kv` (registered: counter, greeter, bomb, fragile, driver, tally, async-driver)",
        ),
        (
            "[domain.a]\nservices = [\"counter\"]\n[domain.b]\nservices = [\"greeter\", \"counter\"]\n",
            ":5:24:",
            "service `counter` is placed twice: in domain `a` (line 3) and in domain `b`",
        ),
        (
            "[domain.a]\nservices = []\n",
            ":3:12:",
            "domain `a` hosts no services",
        ),
    ];
    for (i, (body, at, msg)) in cases.iter().enumerate() {
        let m = manifest(&dir, &format!("bad{i}"), body);
        let out = run(&["boot", m.to_str().unwrap()], "script");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        let expected = format!("{}{at}", m.display());
        assert!(err.contains(&expected), "expected {expected:?} in {err}");
        assert!(err.contains(msg), "expected {msg:?} in {err}");
        assert!(!err.contains("started"), "nothing starts: {err}");
        // `check` refuses it the same way.
        let out = run(&["check", m.to_str().unwrap()], "script");
        assert_eq!(out.status.code(), Some(2));
    }
}

#[test]
fn check_prints_the_placement() {
    let dir = scratch();
    let m = manifest(&dir, "placed", ISOLATED);
    let out = run(&["check", m.to_str().unwrap()], "script");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("system placed (socket "), "{stdout}");
    assert!(
        stdout.contains(
            "domain b (max_threads 4, spin off, max_message 65536): greeter\ndomain a: counter\ndomain c: driver\nroot driver"
        ),
        "{stdout}"
    );
}

#[test]
fn colocated_and_isolated_give_the_same_answers() {
    let dir = scratch();
    let mut answers = Vec::new();
    for (name, body, local) in [("co", COLOCATED, "true"), ("iso", ISOLATED, "false")] {
        let m = manifest(&dir, name, body);
        let out = run(&["boot", m.to_str().unwrap()], "script");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
        assert!(stdout.contains("greet bob -> hello, bob (#2)"), "{stdout}");
        // The greeter's domain allows 64 KiB (the manifest's max_message).
        assert!(
            stdout.contains(
                "measure a long name -> arguments of 100001 bytes exceeds the 65536-byte message limit"
            ),
            "{stdout}"
        );
        assert!(stdout.contains("measure a 60000-byte name -> 60000"), "{stdout}");
        assert!(
            stdout.contains(&format!("local: driver->counter {local}")),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("local: greeter->counter {local}")),
            "{stdout}"
        );
        assert!(
            stdout.contains("lookup missing -> no service `missing` was bound"),
            "{stdout}"
        );
        assert!(
            stderr.contains("root service driver returned (status 0)"),
            "{stderr}"
        );
        let pids = pids_in(&stderr);
        assert_eq!(pids.len(), if local == "true" { 1 } else { 3 }, "{stderr}");
        assert!(pids.iter().all(|p| !alive(*p)), "a domain outlived the system");
        assert!(!dir.join(format!("{name}.sock")).exists(), "socket removed");
        answers.push(answers_of(&stdout));
    }
    assert_eq!(answers[0], answers[1]);
}

/// A driver's answers, less the lines that say where services run.
fn answers_of(stdout: &str) -> String {
    stdout
        .lines()
        .filter(|l| !l.starts_with("local:"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Async services and drivers: an async driver awaits a hundred calls at
/// once of an async service, and a call of a blocking one, with the same
/// answers whether they share a domain or not.
#[test]
fn async_services_and_drivers_answer_in_every_placement() {
    let dir = scratch();
    let mut answers = Vec::new();
    for (name, body) in [
        (
            "aco",
            "root = \"async-driver\"\n[domain.all]\nservices = [\"async-driver\", \"tally\", \"greeter\", \"counter\"]\n",
        ),
        (
            "aiso",
            "root = \"async-driver\"\n[domain.a]\nservices = [\"tally\"]\n[domain.b]\nservices = [\"greeter\", \"counter\"]\n\
             [domain.c]\nservices = [\"async-driver\"]\n",
        ),
    ] {
        let m = manifest(&dir, name, body);
        let out = run(&["boot", m.to_str().unwrap()], "script");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
        assert!(stdout.contains("tally after 100 -> 100"), "{stdout}");
        assert!(stdout.contains("greet carol -> hello, carol (#1)"), "{stdout}");
        answers.push(answers_of(&stdout));
        let local = stdout.contains("local: async-driver->tally true");
        assert_eq!(local, name == "aco", "{stdout}");
    }
    assert_eq!(answers[0], answers[1]);
}

#[test]
fn a_crashed_domain_is_reported_and_the_rest_go_on() {
    let dir = scratch();
    let m = manifest(
        &dir,
        "crash",
        &ISOLATED.replace(
            "[domain.c]",
            "[domain.d]\nservices = [\"bomb\"]\nrestart = \"never\"\n[domain.c]",
        ),
    );
    let out = run(&["boot", m.to_str().unwrap()], "crash");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("crash: domain d exited: signal 6 (SIGABRT); left down (restart = never)"),
        "{stderr}"
    );
    assert!(
        stdout.contains("bomb -> the domain serving this door died"),
        "{stdout}"
    );
    assert!(stdout.contains("count +1 -> 8"), "others go on: {stdout}");
    assert!(
        stdout.contains("lookup bomb -> service `bomb` is gone: its domain `d` exited"),
        "{stdout}"
    );
    assert!(pids_in(&stderr).iter().all(|p| !alive(*p)));
}

#[test]
fn the_root_drivers_failure_is_the_exit_status() {
    let dir = scratch();
    let m = manifest(&dir, "fail", ISOLATED);
    let out = run(&["boot", m.to_str().unwrap()], "fail");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("root service `driver` failed: the driver failed on purpose"),
        "{stderr}"
    );
    assert!(pids_in(&stderr).iter().all(|p| !alive(*p)));
    let out = run(&["boot", m.to_str().unwrap()], "panic");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(101), "{stderr}");
    assert!(stderr.contains("root service `driver` panicked"), "{stderr}");
    assert!(pids_in(&stderr).iter().all(|p| !alive(*p)));
}

const NO_ROOT: &str =
    "[domain.a]\nservices = [\"counter\"]\nmax_threads = 3\n[domain.b]\nservices = [\"greeter\", \"bomb\"]\n";

#[test]
fn stats_then_clean_shutdown_on_sigterm() {
    let dir = scratch();
    let m = manifest(&dir, "stats", NO_ROOT);
    let mut sys = Running::start(&m);
    sys.wait_for("system ready: 2 domains");
    let pids = sys.pids();
    assert_eq!(pids.len(), 2);

    for args in [
        vec!["stats", m.to_str().unwrap()],
        vec!["stats", "--socket", dir.join("stats.sock").to_str().unwrap()],
    ] {
        let out = run(&args, "script");
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
        assert!(
            stdout.contains(&format!("== domain a (pid {}) ==", pids[0])),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("== domain b (pid {}) ==", pids[1])),
            "{stdout}"
        );
        assert!(stdout.contains("server threads: "), "{stdout}");
        assert!(
            stdout.contains("limit 3,"),
            "the manifest's max_threads applies: {stdout}"
        );
        for path in ["colocated", "fast", "vanilla"] {
            assert!(
                stdout.lines().any(|l| l.starts_with(path)),
                "{path} row in {stdout}"
            );
        }
    }

    let out = run(&["stats", "--json", m.to_str().unwrap()], "script");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let domains: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(domains.len(), 2, "{stdout}");
    for (d, (name, pid)) in domains.iter().zip([("a", pids[0]), ("b", pids[1])]) {
        assert_eq!(d["domain"], name, "{stdout}");
        assert_eq!(d["pid"], pid, "{stdout}");
        for path in ["colocated", "fast", "vanilla"] {
            assert_eq!(
                d["paths"][path]["args"].as_array().map(Vec::len),
                Some(5),
                "{stdout}"
            );
        }
    }
    assert_eq!(
        domains[0]["pool"]["limit"], 3,
        "the manifest's max_threads: {stdout}"
    );
    // Each domain served at least the stats call just made to it.
    let served = |d: &serde_json::Value| -> u64 {
        ["fast", "vanilla"]
            .iter()
            .map(|p| d["paths"][p]["served"].as_u64().unwrap())
            .sum()
    };
    assert!(domains.iter().all(|d| served(d) >= 1), "{stdout}");

    sys.signal("-TERM");
    let (code, lines) = sys.wait();
    assert_eq!(code, Some(128 + 15), "{lines:#?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("SIGTERM received, shutting down")),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("exited")),
        "stopping is not a crash: {lines:#?}"
    );
    assert!(pids.iter().all(|p| !alive(*p)), "leftover domains");
    assert!(!dir.join("stats.sock").exists(), "socket removed");

    let out = run(&["stats", m.to_str().unwrap()], "script");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is it running?"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn sigint_stops_everything_and_a_second_boot_is_refused_meanwhile() {
    let dir = scratch();
    let m = manifest(&dir, "twice", NO_ROOT);
    let mut sys = Running::start(&m);
    sys.wait_for("system ready");
    let out = run(&["boot", m.to_str().unwrap()], "script");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("seems to be running already"),
        "{}",
        text(&out.stderr)
    );
    let pids = sys.pids();
    sys.signal("-INT");
    let (code, lines) = sys.wait();
    assert_eq!(code, Some(130), "{lines:#?}");
    assert!(pids.iter().all(|p| !alive(*p)), "leftover domains");
}

#[test]
fn domains_die_with_a_killed_supervisor() {
    let dir = scratch();
    let m = manifest(&dir, "orphan", NO_ROOT);
    let mut sys = Running::start(&m);
    sys.wait_for("system ready");
    let pids = sys.pids();
    sys.signal("-KILL");
    let _ = sys.wait();
    // (A generous bound: it only ends a run that would otherwise hang.)
    let deadline = Instant::now() + Duration::from_secs(30);
    while pids.iter().any(|p| alive(*p)) {
        assert!(Instant::now() < deadline, "domains outlived a killed supervisor");
        std::thread::sleep(Duration::from_millis(10));
    }
    // A stale socket is cleared by the next boot.
    let mut again = Running::start(&m);
    again.wait_for("system ready");
    again.signal("-TERM");
    assert_eq!(again.wait().0, Some(143));
}

#[test]
fn a_killed_domain_is_reported_with_its_signal() {
    let dir = scratch();
    let m = manifest(
        &dir,
        "kill9",
        &NO_ROOT.replace(
            "[\"greeter\", \"bomb\"]\n",
            "[\"greeter\", \"bomb\"]\nrestart = \"never\"\n",
        ),
    );
    let mut sys = Running::start(&m);
    sys.wait_for("system ready");
    let pids = sys.pids();
    assert!(
        Command::new("kill")
            .args(["-9", &pids[1].to_string()])
            .status()
            .unwrap()
            .success()
    );
    sys.wait_for("kill9: domain b exited: signal 9 (SIGKILL)");
    assert!(alive(pids[0]), "the other domain goes on");
    let out = run(&["stats", m.to_str().unwrap()], "script");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("== domain a") && !stdout.contains("== domain b"),
        "{stdout}"
    );
    sys.signal("-TERM");
    assert_eq!(sys.wait().0, Some(143));
    assert!(!alive(pids[0]));
}
