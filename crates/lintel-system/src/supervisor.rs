//! The supervisor: starts every domain of a checked manifest from this same
//! executable, serves the name service they share, listens for tools, and
//! watches the domains until the root driver returns, a signal arrives, or
//! (with no root) every domain is gone. A domain that dies is reported by
//! name and exit status, and restarted as its policy says (`restart`); the
//! others go on, but for those that took its doors at start-up, which are
//! stopped and started again after it. Shutdown asks each domain to
//! stop through its control door, then kills whatever has not stopped in
//! time, so no process outlives the supervisor (children also carry a
//! parent-death signal in case the supervisor itself is killed).
//!
//! The supervisor looks at its children at least every few milliseconds,
//! and at once when one exits (it waits on their pidfds), rather than
//! blocking in `wait`: it keeps every `Child` (and so every pid) owned by
//! one thread until it is reaped, so it never signals a recycled pid.

use std::path::Path;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lintel::Door;
use lintel::stub::StubError;

use crate::domain::{CONTROL_SHUTDOWN, DomainArgs, EXIT_JOIN_FAILED};
use crate::exit::{describe, exit_code, signal_name};
use crate::manifest::Manifest;
use crate::names::NameServer;
use crate::registry::Registry;
use crate::restart::{Exit, GiveUp, Next, Policy, Restart, Tracker};
use crate::status::{DomainStatus, STATUS_NAME, Supervision, SupervisionServer};

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
    /// A service the manifest places is not in the registry (the manifest was
    /// built by hand or checked against another registry); the service's name.
    #[error("service `{0}` is not registered in this binary")]
    Unregistered(String),
    /// The running executable, which every domain re-executes, could not be located.
    #[error("cannot find this executable to start the domains: {0}")]
    Exe(std::io::Error),
    /// Something already answers at the system's socket.
    #[error("system `{system}` seems to be running already: something answers at {socket}")]
    Running {
        /// The system's name.
        system: String,
        /// The socket's path.
        socket: String,
    },
    /// The supervisor's socket could not be bound.
    #[error("cannot listen at {socket}: {err}")]
    Listen {
        /// The socket's path.
        socket: String,
        /// Why it could not be bound.
        err: String,
    },
    /// A domain's process could not be started.
    #[error("cannot start domain `{domain}`: {err}")]
    Spawn {
        /// The domain's name.
        domain: String,
        /// Why it could not be started.
        err: lintel::BootError,
    },
    /// A started domain did not hand back exactly its control and stats doors.
    #[error("domain `{domain}` offered {got} doors at boot, not its control and stats doors")]
    Protocol {
        /// The domain's name.
        domain: String,
        /// How many doors it offered (2 expected).
        got: usize,
    },
}

/// One domain as the supervisor runs it: its command line (the same for
/// every instance), its restart record, and its current process.
struct Domain {
    name: String,
    args: DomainArgs,
    tracker: Tracker,
    phase: Phase,
    /// The current process, if one runs.
    process: Option<Process>,
    last_exit: Option<String>,
}

/// One running instance of a domain.
struct Process {
    child: Child,
    /// Its control door (asked to stop through it).
    control: Door,
    /// Readable once it has exited.
    pidfd: Option<std::os::fd::OwnedFd>,
    started: Instant,
}

/// Where a domain is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Its process runs but has not reported ready.
    Starting,
    Running,
    /// Asked to stop at this time, because a domain whose doors it took
    /// at start-up restarted; started again once it has stopped.
    Stopping(Instant),
    /// Waiting out its backoff: started again at this time.
    Waiting(Instant),
    /// Left down: its policy does not restart it after its last exit.
    Down,
    /// Too many restarts within the policy's period.
    GivenUp,
}

/// Start the system `manifest` describes and supervise it until it ends.
/// Returns the exit status for the process: the root driver's (0 when it
/// returns `Ok`, 1 for `Err`, 128 + N if its domain died of signal N), 128 +
/// N when stopped by signal N, 1 when boot failed, every domain is down, or
/// a domain's policy stopped the system after too many restarts.
///
/// A domain that exits once the system is up is restarted as its
/// [`Policy`](crate::restart::Policy) says; see the crate docs on restarts.
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
    let table: Table = Arc::new(Mutex::new(Vec::new()));
    ns.bind_system(STATUS_NAME, SupervisionServer::door(Published(table.clone())));
    start_listener(socket, ns.door_for_outside());

    let mut domains: Vec<Domain> = manifest
        .domains
        .iter()
        .map(|d| Domain {
            name: d.name.clone(),
            args: domain_args(manifest, d),
            tracker: Tracker::new(d.restart),
            phase: Phase::Down,
            process: None,
            last_exit: None,
        })
        .collect();
    let mut sup = Supervisor {
        sys,
        exe: &exe,
        ns: &ns,
        table: &table,
    };
    for i in 0..domains.len() {
        if signal.load(SeqCst) != 0 {
            break;
        }
        if let Err(err) = sup.start(&mut domains, i) {
            stop_all(sys, &mut domains);
            remove_socket(manifest);
            return Err(err);
        }
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
            say!("{sys}: {} received, shutting down", signal_name(sig as i32));
            break 128 + sig as i32;
        }
        if let Some(code) = sup.reap(&mut domains, ready, root_domain) {
            break code;
        }
        if domains
            .iter()
            .all(|d| matches!(d.phase, Phase::Down | Phase::GivenUp))
        {
            say!("{sys}: no domain is left running");
            break 1;
        }
        if !ready {
            if ns.all_ready() {
                ready = true;
                for d in &mut domains {
                    d.phase = Phase::Running;
                }
                let n = domains.len();
                say!("{sys}: system ready: {n} domain{}", if n == 1 { "" } else { "s" });
                ns.announce_ready();
            } else if started.elapsed() > READY_TIMEOUT {
                say!(
                    "{sys}: boot failed: not ready after {} s: {}",
                    READY_TIMEOUT.as_secs(),
                    ns.not_ready().join(", ")
                );
                break 1;
            }
        } else if let Some(code) = sup.advance(&mut domains) {
            break code;
        }
        if let Some(code) = ns.root_exit() {
            let root = manifest.root.as_deref().unwrap_or("root");
            say!("{sys}: root service {root} returned (status {code}), shutting down");
            break code;
        }
        sup.publish(&domains, root_domain);
        wait_for_exit(&domains, POLL);
    };
    stop_all(sys, &mut domains);
    remove_socket(manifest);
    Ok(status)
}

/// What a domain's instances are started with.
fn domain_args(manifest: &Manifest, d: &crate::manifest::DomainSpec) -> DomainArgs {
    DomainArgs {
        system: manifest.system.clone(),
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
        links: d
            .links
            .iter()
            .map(|l| serde_json::to_string(l).expect("a link spec serializes"))
            .collect(),
    }
}

/// The supervisor's means: where the binary is, the name service, the
/// published status.
struct Supervisor<'a> {
    sys: &'a str,
    exe: &'a Path,
    ns: &'a Arc<NameServer>,
    table: &'a Table,
}

impl Supervisor<'_> {
    /// Start an instance of domain `i`.
    fn start(&mut self, domains: &mut [Domain], i: usize) -> Result<(), BootError> {
        let d = &mut domains[i];
        let mut cmd = Command::new(self.exe);
        cmd.arg(DOMAIN_COMMAND).args(d.args.to_args());
        let spawned =
            lintel::boot::spawn(&mut cmd, &[self.ns.door_for_domain(i)]).map_err(|err| BootError::Spawn {
                domain: d.name.clone(),
                err,
            })?;
        let pid = spawned.child.id();
        let mut doors = spawned.doors;
        let control = doors.first().cloned().unwrap_or_else(|| Door::create(0, NOOP));
        let now = Instant::now();
        d.process = Some(Process {
            child: spawned.child,
            control,
            pidfd: lintel_sys::pidfd(pid).ok(),
            started: now,
        });
        d.tracker.started(now);
        d.phase = Phase::Starting;
        if doors.len() != 2 {
            return Err(BootError::Protocol {
                domain: d.name.clone(),
                got: doors.len(),
            });
        }
        self.ns
            .bind_as(i, &format!("domain/{}/stats", d.name), doors.remove(1));
        say!("{}: domain {} started (pid {pid})", self.sys, d.name);
        Ok(())
    }

    /// Reap every domain that exited and decide what follows. Returns the
    /// system's exit status if that ends it.
    fn reap(&mut self, domains: &mut [Domain], ready: bool, root: Option<usize>) -> Option<i32> {
        let sys = self.sys;
        for i in 0..domains.len() {
            let Some(Process { child, .. }) = domains[i].process.as_mut() else {
                continue;
            };
            let Ok(Some(st)) = child.try_wait() else { continue };
            let d = &mut domains[i];
            d.process = None;
            let how = describe(st);
            d.last_exit = Some(how.clone());
            let name = d.name.clone();
            if !ready {
                self.ns.domain_exited(i, &format!("exited: {how}"), false);
                say!("{sys}: boot failed: domain {name} exited during start-up: {how}");
                return Some(1);
            }
            if Some(i) == root {
                self.ns.domain_exited(i, &format!("exited: {how}"), false);
                say!("{sys}: domain {name} (root) exited: {how}");
                return Some(exit_code(st));
            }
            let exit = Exit::of(st);
            if let Some(code) = self.after_exit(domains, i, &how, exit) {
                return Some(code);
            }
        }
        None
    }

    /// Domain `i`'s instance ended (`how` says how, in words): decide what
    /// follows, say it in one line, and stop the domains that depended on
    /// the instance. Returns the system's exit status if that ends it.
    fn after_exit(&mut self, domains: &mut [Domain], i: usize, how: &str, exit: Exit) -> Option<i32> {
        let sys = self.sys;
        let now = Instant::now();
        let d = &mut domains[i];
        let name = d.name.clone();
        let next = match d.phase {
            Phase::Stopping(_) => d.tracker.provider_restarted(now),
            _ => d.tracker.exited(exit, now),
        };
        let restarting = matches!(next, Next::RestartAt(_));
        self.ns.domain_exited(i, &format!("exited: {how}"), restarting);
        let policy = *d.tracker.policy();
        match next {
            Next::RestartAt(at) => {
                d.phase = Phase::Waiting(at);
                let wait = at.saturating_duration_since(now);
                say!(
                    "{sys}: domain {name} exited: {how}; restarting it in {} (restart {})",
                    humantime::format_duration(round_ms(wait)),
                    d.tracker.restarts()
                );
            }
            Next::Down => {
                d.phase = Phase::Down;
                say!(
                    "{sys}: domain {name} exited: {how}; left down (restart = {})",
                    policy_word(&policy)
                );
            }
            Next::GiveUp(how_up) => {
                d.phase = Phase::GivenUp;
                let too_many = format!(
                    "{} restarts within {}",
                    policy.max_restarts,
                    humantime::format_duration(policy.period)
                );
                match how_up {
                    GiveUp::Leave => {
                        say!("{sys}: domain {name} exited: {how}; giving up after {too_many}: it stays down")
                    }
                    GiveUp::Stop => {
                        say!(
                            "{sys}: domain {name} exited: {how}; giving up after {too_many}: stopping the system"
                        );
                        return Some(1);
                    }
                }
            }
        }
        if restarting {
            self.stop_dependents(domains, i);
        }
        None
    }

    /// Domain `i` restarts: the domains whose instance took its doors at
    /// start-up hold doors of a dead instance, so they are stopped and
    /// started again after it (as OTP's `rest_for_one` restarts the
    /// children started after the one that died).
    fn stop_dependents(&mut self, domains: &mut [Domain], i: usize) {
        for dep in self.ns.dependents_of(i) {
            let d = &domains[dep];
            if !matches!(d.phase, Phase::Starting | Phase::Running)
                || d.tracker.policy().restart == Restart::Never
            {
                continue;
            }
            say!(
                "{}: domain {} took doors of {} when it started: restarting it too",
                self.sys,
                d.name,
                domains[i].name
            );
            let d = &mut domains[dep];
            d.phase = Phase::Stopping(Instant::now());
            if let Some(p) = &d.process {
                ask_to_stop(p.control.clone());
            }
        }
    }

    /// Move every domain on: started when its wait is over, ready when it
    /// said so, killed when it took too long to stop. Returns the system's
    /// exit status if a failed start ends it.
    fn advance(&mut self, domains: &mut [Domain]) -> Option<i32> {
        let now = Instant::now();
        for i in 0..domains.len() {
            match domains[i].phase {
                Phase::Waiting(at) if now >= at => {
                    if let Err(e) = self.start(domains, i) {
                        // It died before it joined (lintel reaps it): an
                        // exit at start-up, which the policy decides on.
                        if let Some(mut p) = domains[i].process.take() {
                            let _ = p.child.kill();
                            let _ = p.child.wait();
                        }
                        let why = match e {
                            BootError::Spawn { err, .. } => err.to_string(),
                            other => other.to_string(),
                        };
                        let how = format!("before it joined ({why})");
                        domains[i].last_exit = Some(how.clone());
                        if let Some(code) = self.after_exit(domains, i, &how, Exit::Status(EXIT_JOIN_FAILED))
                        {
                            return Some(code);
                        }
                    }
                }
                Phase::Starting if self.ns.is_ready(i) => domains[i].phase = Phase::Running,
                Phase::Stopping(since) if now.duration_since(since) > STOP_TIMEOUT => {
                    if let Some(Process { child, .. }) = domains[i].process.as_mut() {
                        say!(
                            "{}: domain {} did not stop within {} s; killing it",
                            self.sys,
                            domains[i].name,
                            STOP_TIMEOUT.as_secs()
                        );
                        let _ = child.kill();
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// Copy what `status` shows into the table its door reads.
    fn publish(&self, domains: &[Domain], root: Option<usize>) {
        let rows = domains
            .iter()
            .enumerate()
            .map(|(i, d)| Row {
                root: Some(i) == root,
                domain: d.name.clone(),
                pid: d.process.as_ref().map_or(0, |p| p.child.id()),
                phase: d.phase,
                started: d.process.as_ref().map(|p| p.started),
                restarts: d.tracker.restarts(),
                last_exit: d.last_exit.clone().unwrap_or_default(),
                policy: *d.tracker.policy(),
            })
            .collect();
        *self.table.lock().unwrap_or_else(|e| e.into_inner()) = rows;
    }
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

fn policy_word(p: &Policy) -> &'static str {
    match p.restart {
        Restart::Never => "never",
        Restart::OnFailure => "on-failure",
        Restart::Always => "always",
    }
}

/// What the status door reports, as the supervisor's loop last saw it.
type Table = Arc<Mutex<Vec<Row>>>;

struct Row {
    domain: String,
    /// It hosts the root: its exit ends the system.
    root: bool,
    pid: u32,
    phase: Phase,
    started: Option<Instant>,
    restarts: u32,
    last_exit: String,
    policy: Policy,
}

impl Row {
    fn status(&self, now: Instant) -> DomainStatus {
        let ms = |d: Duration| humantime::format_duration(round_ms(d)).to_string();
        let (state, next) = match self.phase {
            Phase::Starting | Phase::Running => (
                if self.phase == Phase::Starting {
                    "starting"
                } else {
                    "running"
                },
                match self.policy.restart {
                    _ if self.root => "end the system when it exits".to_string(),
                    Restart::Never => "none: not restarted when it exits".to_string(),
                    Restart::OnFailure => "restart if it fails".to_string(),
                    Restart::Always => "restart when it exits".to_string(),
                },
            ),
            Phase::Stopping(_) => ("stopping", "restart once stopped".to_string()),
            Phase::Waiting(at) => (
                "restarting",
                format!("start in {}", ms(at.saturating_duration_since(now))),
            ),
            Phase::Down => ("down", "none".to_string()),
            Phase::GivenUp => ("given up", "none".to_string()),
        };
        DomainStatus {
            domain: self.domain.clone(),
            pid: self.pid,
            state: state.to_string(),
            uptime_ms: self
                .started
                .map_or(0, |s| now.saturating_duration_since(s).as_millis() as u64),
            restarts: self.restarts,
            last_exit: self.last_exit.clone(),
            next,
        }
    }
}

/// The status door's implementation.
struct Published(Table);

impl Supervision for Published {
    fn domains(&self) -> Result<Vec<DomainStatus>, StubError> {
        let now = Instant::now();
        let rows = self.0.lock().unwrap_or_else(|e| e.into_inner());
        Ok(rows.iter().map(|r| r.status(now)).collect())
    }
}

/// Sleep until a domain's process exits, or `most` has passed.
fn wait_for_exit(domains: &[Domain], most: Duration) {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut fds: Vec<PollFd<'_>> = domains
        .iter()
        .filter_map(|d| d.process.as_ref()?.pidfd.as_ref())
        .map(|fd| PollFd::new(fd, PollFlags::IN))
        .collect();
    let timeout = Timespec {
        tv_sec: 0,
        tv_nsec: most.as_nanos() as i64,
    };
    // An error (EINTR from the signal handler) ends the wait early.
    let _ = rustix::event::poll(&mut fds, Some(&timeout));
}

const NOOP: fn(lintel::Request<'_>, &mut lintel::Reply) -> Result<(), lintel::Fault> = |_, _| Ok(());

/// Ask a domain to stop through its control door, from a thread of its
/// own: a hung domain must not hang the supervisor.
fn ask_to_stop(control: Door) {
    let _ = std::thread::Builder::new()
        .name("lintel-stop".into())
        .spawn(move || control.call_bytes(CONTROL_SHUTDOWN));
}

/// Ask every running domain to stop, wait, then kill the rest.
fn stop_all(sys: &str, domains: &mut [Domain]) {
    for d in domains.iter() {
        if let Some(p) = &d.process {
            ask_to_stop(p.control.clone());
        }
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        let mut left = 0;
        for d in domains.iter_mut() {
            let Some(Process { child, .. }) = d.process.as_mut() else {
                continue;
            };
            match child.try_wait() {
                Ok(Some(st)) => {
                    if !st.success() {
                        say!("{sys}: domain {} exited while stopping: {}", d.name, describe(st));
                    }
                    d.process = None;
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
        if let Some(Process { mut child, .. }) = d.process.take() {
            say!(
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
