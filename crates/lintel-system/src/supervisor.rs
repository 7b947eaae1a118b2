//! The supervisor: starts every domain of a checked manifest from this same
//! executable, serves the name service they share, listens for tools, and
//! watches the domains until the root driver returns, a signal arrives, or
//! (with no root) every domain is gone. A domain that dies is reported by
//! name and exit status; the others go on. Shutdown asks each domain to
//! stop through its control door, then kills whatever has not stopped in
//! time, so no process outlives the supervisor (children also carry a
//! parent-death signal in case the supervisor itself is killed).
//!
//! The supervisor polls its children every few milliseconds rather than
//! blocking in `wait`: it keeps every `Child` (and so every pid) owned by
//! one thread until it is reaped, so it never signals a recycled pid.

use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use lintel::Door;

use crate::domain::{CONTROL_SHUTDOWN, DomainArgs};
use crate::manifest::Manifest;
use crate::names::NameServer;
use crate::registry::Registry;
use crate::status::{describe, exit_code, signal_name};

/// The hidden subcommand that runs one domain.
pub(crate) const DOMAIN_COMMAND: &str = "__lintel-domain";

const POLL: Duration = Duration::from_millis(5);
/// How long all domains have to bind their services.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long domains have to stop before they are killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Server threads for the name service (lookups wait in them).
const SUPERVISOR_THREADS: usize = 256;

/// Why a system could not be booted.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error("service `{0}` is not registered in this binary")]
    Unregistered(String),
    #[error("cannot find this executable to start the domains: {0}")]
    Exe(std::io::Error),
    #[error("system `{system}` seems to be running already: something answers at {socket}")]
    Running { system: String, socket: String },
    #[error("cannot listen at {socket}: {err}")]
    Listen { socket: String, err: String },
    #[error("cannot start domain `{domain}`: {err}")]
    Spawn { domain: String, err: lintel::BootError },
    #[error("domain `{domain}` offered {got} doors at boot, not its control and stats doors")]
    Protocol { domain: String, got: usize },
}

struct Running {
    name: String,
    child: Option<Child>,
    control: Door,
}

/// Start the system `manifest` describes and supervise it until it ends.
/// Returns the exit status for the process: the root driver's (0 when it
/// returns `Ok`, 1 for `Err`, 128 + N if its domain died of signal N), 128 +
/// N when stopped by signal N, 1 when boot failed or every domain died.
///
/// Call it from the main thread, which must live until it returns: the
/// domains are set to die with the thread that started them.
///
/// ```no_run
/// # let registry = lintel_system::Registry::new();
/// let manifest = lintel_system::Manifest::load("system.toml".as_ref(), &registry).unwrap();
/// let status = lintel_system::boot(&registry, &manifest).unwrap();
/// std::process::exit(status);
/// ```
pub fn boot(registry: &Registry, manifest: &Manifest) -> Result<i32, BootError> {
    // A hand-built manifest skipped Manifest::parse: check what the domains rely on.
    for d in &manifest.domains {
        for s in &d.services {
            if registry.kind(s).is_none() {
                return Err(BootError::Unregistered(s.clone()));
            }
        }
    }
    let sys = manifest.system.as_str();
    let exe = std::env::current_exe().map_err(BootError::Exe)?;
    let signal = Arc::new(AtomicUsize::new(0));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Failing to register leaves the default action (die), still safe:
        // the children have the parent-death signal.
        let _ = signal_hook::flag::register_usize(sig, signal.clone(), sig as usize);
    }
    lintel::set_max_server_threads(SUPERVISOR_THREADS);
    let ns = NameServer::new(manifest);
    let socket = open_socket(manifest)?;
    start_listener(socket, ns.door_for_outside());

    let mut domains: Vec<Running> = Vec::new();
    for (i, d) in manifest.domains.iter().enumerate() {
        if signal.load(SeqCst) != 0 {
            break;
        }
        let args = DomainArgs {
            system: sys.to_string(),
            domain: d.name.clone(),
            services: d.services.clone(),
            max_threads: d.max_threads,
            spin: d.spin,
            max_message: d.max_message,
            root: manifest.root.clone(),
            supervisor: std::process::id(),
            settings: d
                .services
                .iter()
                .filter_map(|svc| Some((svc, manifest.settings.get(svc)?)))
                .flat_map(|(svc, kv)| kv.iter().map(move |(k, v)| format!("{svc}:{k}={v}")))
                .collect(),
            base: manifest.dir.clone(),
        };
        let mut cmd = Command::new(&exe);
        cmd.arg(DOMAIN_COMMAND).args(args.to_args());
        let spawned = match lintel::boot::spawn(&mut cmd, &[ns.door_for_domain(i)]) {
            Ok(s) => s,
            Err(err) => {
                stop_all(sys, &mut domains);
                remove_socket(manifest);
                return Err(BootError::Spawn {
                    domain: d.name.clone(),
                    err,
                });
            }
        };
        let pid = spawned.child.id();
        let mut doors = spawned.doors;
        domains.push(Running {
            name: d.name.clone(),
            child: Some(spawned.child),
            control: doors.first().cloned().unwrap_or_else(|| Door::create(0, NOOP)),
        });
        if doors.len() != 2 {
            stop_all(sys, &mut domains);
            remove_socket(manifest);
            return Err(BootError::Protocol {
                domain: d.name.clone(),
                got: doors.len(),
            });
        }
        ns.bind_as(i, &format!("domain/{}/stats", d.name), doors.remove(1));
        eprintln!("{sys}: domain {} started (pid {pid})", d.name);
    }

    let root_domain = manifest
        .root
        .as_ref()
        .and_then(|r| manifest.domains.iter().position(|d| d.services.contains(r)));
    let started = Instant::now();
    let mut ready = false;
    let status = loop {
        let sig = signal.load(SeqCst);
        if sig != 0 {
            eprintln!("{sys}: {} received, shutting down", signal_name(sig as i32));
            break 128 + sig as i32;
        }
        let mut ended = None;
        for (i, d) in domains.iter_mut().enumerate() {
            let Some(child) = d.child.as_mut() else { continue };
            let Ok(Some(st)) = child.try_wait() else { continue };
            d.child = None;
            let how = describe(st);
            ns.domain_exited(i, &format!("exited: {how}"));
            if !ready {
                eprintln!(
                    "{sys}: boot failed: domain {} exited during start-up: {how}",
                    d.name
                );
                ended = Some(1);
            } else if Some(i) == root_domain {
                eprintln!("{sys}: domain {} (root) exited: {how}", d.name);
                ended = Some(exit_code(st));
            } else {
                eprintln!("{sys}: domain {} exited: {how}", d.name);
            }
        }
        if let Some(code) = ended {
            break code;
        }
        if domains.iter().all(|d| d.child.is_none()) {
            eprintln!("{sys}: no domain is left running");
            break 1;
        }
        if !ready {
            if ns.all_ready() {
                ready = true;
                let n = domains.len();
                eprintln!("{sys}: system ready: {n} domain{}", if n == 1 { "" } else { "s" });
                ns.announce_ready();
            } else if started.elapsed() > READY_TIMEOUT {
                eprintln!(
                    "{sys}: boot failed: not ready after {} s: {}",
                    READY_TIMEOUT.as_secs(),
                    ns.not_ready().join(", ")
                );
                break 1;
            }
        }
        if let Some(code) = ns.root_exit() {
            let root = manifest.root.as_deref().unwrap_or("root");
            eprintln!("{sys}: root service {root} returned (status {code}), shutting down");
            break code;
        }
        std::thread::sleep(POLL);
    };
    stop_all(sys, &mut domains);
    remove_socket(manifest);
    Ok(status)
}

const NOOP: fn(lintel::Request<'_>, &mut lintel::Reply) -> Result<(), lintel::Fault> = |_, _| Ok(());

/// Ask every running domain to stop, wait, then kill the rest.
fn stop_all(sys: &str, domains: &mut [Running]) {
    for d in domains.iter() {
        if d.child.is_some() {
            let control = d.control.clone();
            // A hung domain must not hang the shutdown: ask from a thread.
            let _ = std::thread::Builder::new()
                .name("lintel-stop".into())
                .spawn(move || control.call_bytes(CONTROL_SHUTDOWN));
        }
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        let mut left = 0;
        for d in domains.iter_mut() {
            let Some(child) = d.child.as_mut() else { continue };
            match child.try_wait() {
                Ok(Some(st)) => {
                    if !st.success() {
                        eprintln!("{sys}: domain {} exited while stopping: {}", d.name, describe(st));
                    }
                    d.child = None;
                }
                _ => left += 1,
            }
        }
        if left == 0 {
            return;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(POLL);
    }
    for d in domains.iter_mut() {
        if let Some(mut child) = d.child.take() {
            eprintln!(
                "{sys}: domain {} did not stop within {} s; killing it",
                d.name,
                STOP_TIMEOUT.as_secs()
            );
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Bind the supervisor's socket, clearing a stale one left by a system
/// that died, but refusing to take over one that still answers.
fn open_socket(m: &Manifest) -> Result<lintel::boot::Listener, BootError> {
    let path = m.socket.as_path();
    if path.exists() {
        if answers(path) {
            return Err(BootError::Running {
                system: m.system.clone(),
                socket: path.display().to_string(),
            });
        }
        let _ = std::fs::remove_file(path);
    }
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    lintel::boot::listen(path).map_err(|e| BootError::Listen {
        socket: path.display().to_string(),
        err: e.to_string(),
    })
}

fn answers(path: &Path) -> bool {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let Ok(sock) = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    ) else {
        return false;
    };
    let Ok(addr) = SocketAddrUnix::new(path) else {
        return false;
    };
    rustix::net::connect(&sock, &addr).is_ok()
}

fn remove_socket(m: &Manifest) {
    let _ = std::fs::remove_file(&m.socket);
}

/// Accept tools (e.g. `stats`) for as long as the process lives; each gets
/// the look-up-only name-service door.
fn start_listener(listener: lintel::boot::Listener, door: Door) {
    let _ = std::thread::Builder::new()
        .name("lintel-listen".into())
        .spawn(move || {
            while let Ok(incoming) = listener.accept() {
                let door = door.clone();
                let _ = std::thread::Builder::new()
                    .name("lintel-tool".into())
                    .spawn(move || {
                        if let Err(e) = incoming.exchange(&[door]) {
                            tracing::debug!("a tool failed to connect: {e}");
                        }
                    });
            }
        });
}
