//! What the tests that boot systems of `lintel-system-testsys` share.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const EXE: &str = env!("CARGO_BIN_EXE_lintel-system-testsys");

/// A fresh folder for one test's manifest and socket, removed after it.
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn scratch() -> Scratch {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "lintel-system-t{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// Write a manifest whose socket is in `dir`.
pub fn manifest(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, format!("socket = \"{name}.sock\"\n{body}")).unwrap();
    path
}

/// Run to completion (bounded: a hang fails the test instead of blocking it).
pub fn run(args: &[&str], mode: &str) -> Output {
    let child = Command::new(EXE)
        .args(args)
        .env("LINTEL_TESTSYS_MODE", mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        if rx.recv_timeout(Duration::from_secs(60)).is_err() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    });
    let out = child.wait_with_output().unwrap();
    let _ = tx.send(());
    out
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; its state is Z.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

pub fn pids_in(stderr: &str) -> Vec<u32> {
    stderr
        .lines()
        .filter_map(|l| l.split("started (pid ").nth(1))
        // The digits alone: the domains write to the same stderr, and a
        // line of theirs can land inside the supervisor's.
        .map(|p| {
            let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().unwrap_or_else(|_| panic!("no pid in {p:?}"))
        })
        .collect()
}

/// A system with no root, running until signalled; its stderr as lines.
pub struct Running {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl Running {
    pub fn start(m: &Path) -> Running {
        let mut child = Command::new(EXE)
            .args(["boot", m.to_str().unwrap()])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Running {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    pub fn wait_for(&mut self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(l) = self.lines.recv_timeout(Duration::from_millis(100)) {
                let hit = l.contains(what);
                self.seen.push(l);
                if hit {
                    return;
                }
            }
        }
        let _ = self.child.kill();
        panic!("no {what:?} in {:#?}", self.seen);
    }

    pub fn pids(&self) -> Vec<u32> {
        pids_in(&self.seen.join("\n"))
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    pub fn wait(mut self) -> (Option<i32>, Vec<String>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                let rest: Vec<String> = self.lines.try_iter().collect();
                self.seen.extend(rest);
                return (st.code(), std::mem::take(&mut self.seen));
            }
            assert!(Instant::now() < deadline, "supervisor did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A test that fails midway leaves no system running: the supervisor is
/// killed, and its domains die with it.
impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
