//! What the network tests share: the test host (`lintel-net-host`) as a
//! process, started here or in a network namespace, and bounded waits.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lintel::Reply;

/// A host process; killed when dropped.
pub struct Host {
    pub child: Child,
    /// Where its proxy listens.
    pub addr: SocketAddr,
    /// The pid of the peer domain whose control door it exports as `ctl`.
    pub peer_pid: u32,
    /// What it wrote to its standard error so far (also passed on to ours).
    log: Arc<Mutex<Vec<String>>>,
}

impl Host {
    /// A host listening at `addr`, with `env`, in network namespace `ns`
    /// (`None`: this process's).
    pub fn start_in(ns: Option<&str>, addr: &str, env: &[(&str, &str)]) -> Host {
        let host = crate::bin_path("lintel-net-host");
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(host);
                c
            }
            None => Command::new(host),
        };
        cmd.arg(addr)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start the host");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("its output"))
            .read_line(&mut line)
            .expect("the host says where it listens");
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            (words.first(), words.get(2)),
            (Some(&"listening"), Some(&"peer")),
            "{line}"
        );
        let log = Arc::new(Mutex::new(Vec::new()));
        let (err, kept) = (child.stderr.take().expect("its errors"), log.clone());
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("host: {l}");
                kept.lock().unwrap_or_else(|e| e.into_inner()).push(l);
            }
        });
        Host {
            child,
            addr: words[1].parse().expect("an address"),
            peer_pid: words[3].parse().expect("a pid"),
            log,
        }
    }

    /// The lines it wrote to its standard error so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A host on loopback, port chosen by the system.
    pub fn start(env: &[(&str, &str)]) -> Host {
        Host::start_in(None, "127.0.0.1:0", env)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The first 8 bytes of a reply, as the control door's counts are.
pub fn u64_of(r: &Reply) -> u64 {
    u64::from_le_bytes(r.data[..8].try_into().expect("8 bytes"))
}

/// Poll `f` until it holds, for at most `limit`.
pub fn eventually(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < end, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
