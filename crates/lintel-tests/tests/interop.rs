//! Programs nobody here wrote the runtime of, on either end of a link:
//! Python with pycapnp (from PyPI; `.ci/run` installs it) calls lintel
//! doors through a proxy, and a lintel program calls doors a pycapnp
//! program serves, passing doors both ways.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use lintel::{CallError, Door, Reply, Request};
use lintel_net::{LinkOptions, Proxy};
use lintel_tests::bin_path;

fn schema() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../lintel-net/schema/lintel.capnp")
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join(name)
}

/// Python needs pycapnp: say so plainly when it is missing.
fn python() -> Command {
    let probe = Command::new("python3").args(["-c", "import capnp"]).output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "these tests need python3 with pycapnp: pip install pycapnp"
    );
    Command::new("python3")
}

/// A child killed when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// pycapnp calls the test host's doors: bytes up to 1 MiB, a handler's
/// fault, a door returned, a door of Python's passed and called back.
#[test]
fn a_python_client_calls_lintel_doors_through_a_proxy() {
    let mut host = Killed(
        Command::new(bin_path("lintel-net-host"))
            .arg("127.0.0.1:0")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(host.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: std::net::SocketAddr = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let out = python()
        .arg(script("call_lintel.py"))
        .arg(schema())
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.lines().filter(|l| l.starts_with("ok ")).count(), 9, "{text}");
}

/// A lintel program calls doors pycapnp serves: bytes, a fault that
/// arrives as lintel's `Fault`, a name not exported, and a door of this
/// process passed to Python and called back through the link.
#[test]
fn a_lintel_program_calls_a_python_service() {
    let mut server = Killed(
        python()
            .arg(script("serve_echo.py"))
            .arg(schema())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(server.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line.strip_prefix("listening ").unwrap().trim().parse().unwrap();
    let proxy = Proxy::start().unwrap();
    let remote = proxy
        .connect(
            ([127, 0, 0, 1], port).into(),
            LinkOptions::plain(),
            BTreeMap::<String, Door>::new(),
        )
        .unwrap();
    assert_eq!(remote.names().unwrap(), ["call-back", "echo", "fault"]);
    let echo = remote.lookup("echo").unwrap();
    assert_eq!(echo.call_bytes(b"to python").unwrap(), b"to python");
    let big: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    assert_eq!(echo.call_bytes(&big).unwrap(), big);
    assert_eq!(
        remote.lookup("fault").unwrap().call_bytes(b"").unwrap_err(),
        CallError::Fault(42)
    );
    assert!(remote.lookup("nothing").is_err());
    let mine = Door::create(0, |r: Request<'_>, out: &mut Reply| {
        out.data = r.data.iter().rev().copied().collect();
        Ok(())
    });
    let mut reply = Reply::new();
    remote
        .lookup("call-back")
        .unwrap()
        .call(b"abc", std::slice::from_ref(&mine), &mut reply)
        .unwrap();
    assert_eq!(reply.data, b"cba", "Python called this process's door");
}
