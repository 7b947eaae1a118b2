//! Recovery, as a user of the example sees it: each domain killed, the
//! supervisor restarts it (and the store after the services it took at
//! start-up), the shell and other clients go on with the next call, and
//! the store answers what was written before the crash.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kv_system::{Kv, KvClient, SysError};
use lintel::CallError;
use lintel::stub::StubError;
use lintel_system::{Named, Names};
use lintel_tests::holdings::Holdings;

const EXE: &str = env!("CARGO_BIN_EXE_kv-system");

/// The example's isolated placement, and one with the store, clock and
/// log in one domain, each with a unique name and its socket in `dir`.
fn placements() -> Vec<(&'static str, String)> {
    let example = Path::new(env!("CARGO_MANIFEST_DIR"));
    let isolated = std::fs::read_to_string(example.join("isolated.toml")).unwrap();
    let shared = "root = \"shell\"\n[domain.shell]\nservices = [\"shell\"]\n\
                  [domain.rest]\nservices = [\"kv\", \"clock\", \"log\"]\n\
                  [domain.files]\nservices = [\"fs\"]\n[service.fs]\nroot = \"files\"\n";
    vec![("isolated", isolated), ("shared", shared.to_string())]
}

/// Write manifest `body` as `name` in `dir` (with a `files/` export),
/// named and socketed apart from any other system.
fn manifest(dir: &Path, name: &str, body: &str) -> PathBuf {
    let _ = std::fs::create_dir(dir.join("files"));
    let path = dir.join(format!("{name}.toml"));
    let head = format!(
        "system = \"{name}-{}\"\nsocket = \"{name}.sock\"\n",
        std::process::id()
    );
    std::fs::write(&path, head + body).unwrap();
    path
}

/// A booted system whose shell this test types into.
struct System {
    child: Child,
    stdin: Option<ChildStdin>,
    out: mpsc::Receiver<String>,
    err: mpsc::Receiver<String>,
    manifest: PathBuf,
}

impl System {
    fn boot(manifest: &Path) -> System {
        let mut s = System::start(manifest);
        s.wait_for("system ready");
        s
    }

    /// Start booting, without waiting for the system to be ready.
    fn start(manifest: &Path) -> System {
        let mut child = Command::new(EXE)
            .args(["boot", manifest.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = |r: Box<dyn std::io::Read + Send>| {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                for l in BufReader::new(r).lines().map_while(Result::ok) {
                    let _ = tx.send(l);
                }
            });
            rx
        };
        let out = lines(Box::new(child.stdout.take().unwrap()));
        let err = lines(Box::new(child.stderr.take().unwrap()));
        System {
            stdin: child.stdin.take(),
            child,
            out,
            err,
            manifest: manifest.to_path_buf(),
        }
    }

    fn wait_for(&mut self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            if let Ok(l) = self.err.recv_timeout(Duration::from_millis(50)) {
                if l.contains(what) {
                    return;
                }
                seen.push(l);
            }
        }
        panic!("no {what:?} from the supervisor: {seen:#?}");
    }

    /// The shell's one-line answer to `cmd`.
    fn ask(&mut self, cmd: &str) -> String {
        writeln!(self.stdin.as_mut().unwrap(), "{cmd}").unwrap();
        self.out
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no answer to {cmd:?}"))
    }

    fn status(&self) -> Vec<serde_json::Value> {
        let out = Command::new(EXE)
            .args(["status", "--json", self.manifest.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn domain(&self, name: &str) -> serde_json::Value {
        self.status()
            .into_iter()
            .find(|d| d["domain"] == name)
            .unwrap_or_else(|| panic!("no domain {name}"))
    }

    /// Kill domain `name` and wait until it and every other domain run
    /// again, its restarts one more than before.
    /// SIGKILL domain `name`; its restarts before.
    fn kill(&self, name: &str) -> u64 {
        let d = self.domain(name);
        let (pid, restarts) = (d["pid"].as_u64().unwrap(), d["restarts"].as_u64().unwrap());
        let ok = Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        restarts
    }

    fn kill_and_await(&mut self, name: &str) {
        let restarts = self.kill(name);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let all = self.status();
            let back = all
                .iter()
                .any(|d| d["domain"] == name && d["restarts"].as_u64() == Some(restarts + 1));
            if back && all.iter().all(|d| d["state"] == "running") {
                return;
            }
            assert!(Instant::now() < deadline, "{name} not back: {all:#?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn names(&self) -> Names {
        let socket = self.manifest.with_extension("sock");
        let mut doors = lintel::boot::connect(&socket, &[]).unwrap();
        Names::new(doors.remove(0))
    }

    /// End the shell's input: the system stops; its status.
    fn end(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        self.child.wait().unwrap()
    }
}

impl Drop for System {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The walk-through: `put a 1`, the store's domain killed, and the
/// next commands succeed against the restarted store, which still has `a`.
#[test]
fn the_shell_goes_on_after_each_domain_dies_and_the_store_keeps_its_data() {
    let dir = tempfile::tempdir().unwrap();
    for (name, body) in placements() {
        let m = manifest(dir.path(), name, &body);
        let _ = std::fs::remove_file(dir.path().join("files/kv.journal"));
        std::fs::write(dir.path().join("files/hello.txt"), "hello\n").unwrap();
        let mut sys = System::boot(&m);
        assert_eq!(sys.ask("put a 1"), "ok");
        let domains: Vec<&str> = match name {
            "isolated" => vec!["kv", "clock", "log", "files"],
            _ => vec!["rest", "files"],
        };
        for (i, d) in domains.iter().enumerate() {
            sys.kill_and_await(d);
            assert_eq!(sys.ask(&format!("put k{i} {d}")), "ok", "{name}: after {d} died");
            assert_eq!(sys.ask("get a"), "a = 1", "{name}: after {d} died");
            assert_eq!(sys.ask(&format!("get k{i}")), format!("k{i} = {d}"));
            assert_eq!(sys.ask("cat hello.txt"), "hello", "{name}: after {d} died");
        }
        let keys: Vec<String> = (0..domains.len()).map(|i| format!("k{i}")).collect();
        assert_eq!(sys.ask("keys"), format!("a {}", keys.join(" ")));
        assert!(sys.end().success());
    }
}

/// Commands typed at once after the store's domain is killed, without
/// waiting for its restart: at most the first fails (it may have reached
/// the dead instance, and is never made again behind the user's back), and
/// the ones after it succeed against the restarted domain.
#[test]
fn commands_right_after_a_kill_fail_at_most_once() {
    let dir = tempfile::tempdir().unwrap();
    let (name, body) = placements().into_iter().next().unwrap();
    let m = manifest(dir.path(), name, &body);
    let mut sys = System::boot(&m);
    assert_eq!(sys.ask("put a 1"), "ok");
    for round in 0..5 {
        sys.kill("kv");
        let first = sys.ask(&format!("put r{round} x"));
        assert!(
            first == "ok" || first.starts_with("error: "),
            "round {round}: {first}"
        );
        assert_eq!(
            sys.ask(&format!("put r{round} {round}")),
            "ok",
            "round {round}, after {first:?}"
        );
        assert_eq!(sys.ask(&format!("get r{round}")), format!("r{round} = {round}"));
        assert_eq!(sys.ask("get a"), "a = 1", "round {round}");
    }
    assert!(sys.end().success());
}

/// The store placed on another host (the example's two-hosts manifests,
/// on a free port): the shell answers as with the store here, and goes on
/// with its next command after the store's domain on host B, host A's
/// proxy, or host B's proxy is killed; the store keeps what was written
/// (its journal is in host A's files, reached over the link).
#[test]
fn a_store_on_another_host_goes_on_after_crashes_on_either_side() {
    let dir = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let body = |f: &str| {
        std::fs::read_to_string(example.join(f))
            .unwrap()
            .replace("127.0.0.1:7701", &format!("127.0.0.1:{port}"))
    };
    let b = manifest(dir.path(), "hostb", &body("two-hosts-b.toml"));
    let a = manifest(dir.path(), "hosta", &body("two-hosts-a.toml"));
    std::fs::write(dir.path().join("files/hello.txt"), "hello\n").unwrap();
    // Each host's services need the other's: they boot together.
    let mut host_b = System::start(&b);
    let mut host_a = System::start(&a);
    host_b.wait_for("system ready");
    host_a.wait_for("system ready");
    assert_eq!(host_a.ask("put a 1"), "ok");
    assert_eq!(host_a.ask("get a"), "a = 1");
    host_b.kill_and_await("kv");
    assert_eq!(host_a.ask("put b 2"), "ok", "after the store on B died");
    assert_eq!(host_a.ask("get a"), "a = 1");
    host_a.kill_and_await("link-b");
    assert_eq!(host_a.ask("get b"), "b = 2", "after A's proxy died");
    host_b.kill_and_await("link-a");
    assert_eq!(host_a.ask("put c 3"), "ok", "after B's proxy died");
    assert_eq!(host_a.ask("keys"), "a b c");
    assert_eq!(host_a.ask("cat hello.txt"), "hello");
    assert!(host_a.end().success());
}

/// Whether `e` is a call that failed because a server died under it (the
/// store's own or one it called): the change may or may not have been
/// made.
fn died(e: &SysError) -> bool {
    matches!(e, SysError::Stub(StubError::Call(CallError::PeerDied)))
}

/// Every domain killed, in turn and again, while three clients put and
/// get all the time: each kill fails only calls in flight, every put that
/// succeeded is there at the end, and the supervisor leaks nothing.
#[test]
fn every_domain_killed_under_load_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    for (name, body) in placements() {
        let m = manifest(dir.path(), &format!("load-{name}"), &body);
        let _ = std::fs::remove_file(dir.path().join("files/kv.journal"));
        let mut sys = System::boot(&m);
        let sup = sys.child.id();
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicU64::new(0));
        let drivers: Vec<_> = (0..3)
            .map(|t| {
                let names = sys.names();
                let (stop, served) = (stop.clone(), served.clone());
                std::thread::spawn(move || {
                    let kv = Named::<KvClient>::new(&names, "kv", Duration::from_secs(30)).unwrap();
                    let mut acked = Vec::new();
                    let mut odd = Vec::new();
                    let mut n = 0u64;
                    while !stop.load(SeqCst) {
                        n += 1;
                        let key = format!("t{t}-{n}");
                        let r = kv.get().map_err(|e| e.to_string()).and_then(|c| {
                            c.put(&key, &n.to_le_bytes())
                                .map_err(|e| if died(&e) { String::new() } else { e.to_string() })
                        });
                        match r {
                            Ok(()) => {
                                acked.push((key, n));
                                served.fetch_add(1, SeqCst);
                            }
                            Err(e) if e.is_empty() => {}
                            Err(e) => odd.push(e),
                        }
                    }
                    (kv, acked, odd)
                })
            })
            .collect();
        let domains: Vec<&str> = match name {
            "isolated" => vec!["kv", "clock", "log", "files"],
            _ => vec!["rest", "files"],
        };
        let mut baseline = None;
        for round in 0..3 {
            for d in &domains {
                sys.kill_and_await(d);
                let before = served.load(SeqCst);
                let deadline = Instant::now() + Duration::from_secs(60);
                while served.load(SeqCst) < before + 20 {
                    assert!(Instant::now() < deadline, "{name}: nothing served after {d} died");
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            if round == 0 {
                baseline = Some(Holdings::of(sup));
            }
        }
        stop.store(true, SeqCst);
        for d in drivers {
            let (kv, acked, odd) = d.join().unwrap();
            assert!(
                odd.is_empty(),
                "{name}: calls failed other than by a death: {odd:#?}"
            );
            let kv = kv.get().unwrap();
            for (key, n) in &acked {
                let mut v = Vec::new();
                kv.get(key, &mut v).unwrap();
                assert_eq!(v, n.to_le_bytes(), "{name}: {key}");
            }
        }
        let (before, after) = (baseline.unwrap(), Holdings::of(sup));
        let seen = format!("{name}: after a round {before:?}, after three {after:?}");
        assert_eq!(after.zombies, 0, "unreaped domains: {seen}");
        assert!(after.fds <= before.fds + 2, "descriptors: {seen}");
        assert!(after.threads <= before.threads + 4, "threads: {seen}");
        // Two more rounds of every domain's death leave the supervisor's memory as it was
        // (4 MiB of slack for the allocator's own growth).
        assert!(after.rss_kib <= before.rss_kib + 4096, "resident memory: {seen}");
        assert!(sys.end().success());
    }
}
