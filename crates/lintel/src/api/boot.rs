//! Starting domains and handing them their first doors.
//!
//! [`spawn`] starts a process with a private connection to this domain
//! (one inherited socket, named in `LINTEL_BOOT_FD`); the child calls
//! [`join`]. Each side offers a list of doors and receives the other's.

use std::os::fd::{AsFd, AsRawFd};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use crate::abi::control::Ctl;
use crate::context::error::BootError;
use crate::object::conn::{Conn, Home};
use crate::object::door::Door;
use crate::{domain, object::transfer, sys};

const ENV_FD: &str = "LINTEL_BOOT_FD";
const BOOT_TIMEOUT: Duration = Duration::from_secs(30);

/// A domain started by [`spawn`].
pub struct Spawned {
    /// The child process; kill or wait on it as usual.
    pub child: Child,
    /// The doors the child offered in [`join`].
    pub doors: Vec<Door>,
}

/// Start `cmd` as a new domain connected to this one, offering it `offer`.
/// Returns once the child has called [`join`] and offered its own doors.
///
/// ```no_run
/// let mut cmd = std::process::Command::new("my-service");
/// let svc = lintel::boot::spawn(&mut cmd, &[]).unwrap();
/// let reply = svc.doors[0].call_bytes(b"ping").unwrap();
/// ```
pub fn spawn(cmd: &mut Command, offer: &[Door]) -> Result<Spawned, BootError> {
    let (mine, theirs) = sys::seqpacket_pair()?;
    cmd.env(ENV_FD, theirs.as_raw_fd().to_string());
    sys::inherit_fd(cmd, theirs.as_fd());
    let mut child = cmd.spawn()?;
    drop(theirs);
    let conn = domain::get().add_conn(mine, Some(child.id()))?;
    match exchange(&conn, offer) {
        Ok(doors) => Ok(Spawned { child, doors }),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// In a process started by [`spawn`]: connect to the parent domain, offer
/// it `offer`, and return the doors it offered. Call once (this or
/// [`join_with`]).
///
/// The parent may call the offered doors as soon as they arrive, before
/// `join` returns here: a handler that needs the parent's doors should be
/// made with [`join_with`].
pub fn join(offer: &[Door]) -> Result<Vec<Door>, BootError> {
    let conn = parent_conn()?;
    exchange(&conn, offer)
}

/// As [`join`], with this domain's doors made from the parent's: the
/// parent's doors arrive first, `offer` makes this domain's doors from them
/// (so their handlers hold what they need from the start), and only then
/// are they offered. Returns the parent's doors.
///
/// ```no_run
/// use lintel::{Door, Reply, Request};
/// let parent = lintel::boot::join_with(|parent: &[Door]| {
///     let log = parent[0].clone();
///     vec![Door::create(0, move |req: Request<'_>, _: &mut Reply| {
///         log.call_bytes(req.data).map(drop).map_err(|_| lintel::Fault(1))
///     })]
/// })
/// .unwrap();
/// ```
pub fn join_with(offer: impl FnOnce(&[Door]) -> Vec<Door>) -> Result<Vec<Door>, BootError> {
    let conn = parent_conn()?;
    let given = receive_offer(&conn)?;
    send_offer(&conn, &offer(&given))?;
    Ok(given)
}

/// The connection to the parent that [`spawn`] left us; only once.
fn parent_conn() -> Result<std::sync::Arc<Conn>, BootError> {
    static JOINED: AtomicBool = AtomicBool::new(false);
    let raw: i32 = std::env::var(ENV_FD)
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or(BootError::NotSpawned)?;
    if JOINED.swap(true, SeqCst) {
        return Err(BootError::Protocol("join called twice"));
    }
    let sock = sys::take_inherited_socket(raw)?;
    let parent = sys::peer_pid(sock.as_fd())?;
    Ok(domain::get().add_conn(sock, Some(parent))?)
}

/// Whether this process was started by [`spawn`] and has not joined yet.
pub fn is_spawned() -> bool {
    std::env::var_os(ENV_FD).is_some()
}

/// Offer our doors, then take the peer's. Every side but [`join_with`]
/// sends first, so no two sides wait for each other.
fn exchange(conn: &std::sync::Arc<Conn>, offer: &[Door]) -> Result<Vec<Door>, BootError> {
    send_offer(conn, offer)?;
    receive_offer(conn)
}

fn send_offer(conn: &std::sync::Arc<Conn>, offer: &[Door]) -> Result<(), BootError> {
    let (wires, grants) = transfer::encode_for_socket(conn, offer)?;
    if !conn.send(&Ctl::Boot { doors: wires }, &grants.fds()) {
        grants.roll_back(conn);
        return Err(BootError::Protocol("peer closed the connection during boot"));
    }
    Ok(())
}

fn receive_offer(conn: &std::sync::Arc<Conn>) -> Result<Vec<Door>, BootError> {
    let Some((wires, fds)) = conn.wait_boot(BOOT_TIMEOUT) else {
        return Err(match conn.other_version() {
            Some(theirs) => BootError::Version {
                ours: crate::abi::VERSION,
                theirs,
            },
            None => BootError::Protocol("peer did not offer its doors"),
        });
    };
    Ok(transfer::decode_from_socket(conn, &wires, fds)?)
}

/// A Unix socket at a path on which other domains can [`connect`] to this
/// one, for systems that are already running (e.g. an introspection tool).
///
/// The socket is `SOCK_SEQPACKET`, like every lintel connection; only
/// processes of this user are accepted (the kernel reports the peer's
/// credentials). The path is removed when the listener is dropped.
///
/// ```no_run
/// let l = lintel::boot::listen("/tmp/my-system.sock".as_ref()).unwrap();
/// let service = lintel::Door::create(0, |_: lintel::Request<'_>, _: &mut lintel::Reply| Ok(()));
/// std::thread::spawn(move || loop {
///     if let Ok(incoming) = l.accept() {
///         let _ = incoming.exchange(&[service.clone()]);
///     }
/// });
/// ```
pub struct Listener {
    sock: std::os::fd::OwnedFd,
    path: std::path::PathBuf,
}

/// A connection accepted by [`Listener::accept`], before doors are exchanged.
pub struct Incoming {
    sock: std::os::fd::OwnedFd,
    pid: u32,
}

/// Bind a listening socket at `path` (which must not exist).
///
/// Also starts this process's domain, if it has none yet: a process
/// listens before it starts threads of its own, as a rule, and a domain
/// started while the process has one thread costs microseconds, where one
/// started beside other threads waits for the kernel to register the
/// process for its barriers (`membarrier`'s registration waits an RCU
/// grace period then: 10–20 ms here, which every first caller would wait
/// for).
pub fn listen(path: &std::path::Path) -> Result<Listener, BootError> {
    let listener = bind(path)?;
    listener.start();
    Ok(listener)
}

/// Bind a listening socket at `path`, as [`listen`] does, but leave this
/// process's domain unstarted: for a process that needs its socket in
/// place before something slow that makes no lintel call, such as
/// spawning the program that will connect. Connections wait in the
/// socket's queue meanwhile. Call [`Listener::start`] before this process
/// starts threads of its own ([`listen`] says why).
///
/// ```no_run
/// # let path = std::path::Path::new("/tmp/x.sock");
/// let listener = lintel::boot::bind(path).unwrap();
/// let child = std::process::Command::new("my-client").spawn().unwrap();
/// listener.start(); // while the child starts, before any thread
/// let incoming = listener.accept().unwrap();
/// ```
pub fn bind(path: &std::path::Path) -> Result<Listener, BootError> {
    Ok(Listener {
        sock: sys::seqpacket_listen(path)?,
        path: path.to_path_buf(),
    })
}

impl Listener {
    /// Start this process's domain, if it has none yet ([`bind`]).
    pub fn start(&self) {
        let _ = domain::get();
    }

    /// Wait for the next connection from a process of this user. Other
    /// users' connections are closed and skipped.
    pub fn accept(&self) -> Result<Incoming, BootError> {
        self.accept_admitting(|_, _| false)
    }

    /// Wait for the next connection from a process of this user, or of
    /// another user whose process `admit` lets in (given its pid and user
    /// id, as the kernel names them). Others are closed and skipped. Who
    /// may connect at all is the socket file's mode: writable by its owner
    /// only, unless changed.
    ///
    /// ```no_run
    /// # let path = std::path::Path::new("/tmp/x.sock");
    /// let listener = lintel::boot::listen(path).unwrap();
    /// // Any user's process 4242, and this user's.
    /// let incoming = listener.accept_admitting(|pid, _uid| pid == 4242).unwrap();
    /// ```
    pub fn accept_admitting(&self, mut admit: impl FnMut(u32, u32) -> bool) -> Result<Incoming, BootError> {
        let me = rustix::process::geteuid().as_raw();
        loop {
            let (sock, pid, uid) = sys::seqpacket_accept(self.sock.as_fd())?;
            if uid == me || admit(pid, uid) {
                return Ok(Incoming { sock, pid });
            }
        }
    }

    /// The path the listener is bound to.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Incoming {
    /// The connecting process, as the kernel reports it.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Make the connection a lintel connection: offer `offer` and return
    /// the doors the peer offered in [`connect`]. Waits for the peer's doors
    /// up to the boot timeout (30 s); run it off the accepting thread.
    pub fn exchange(self, offer: &[Door]) -> Result<Vec<Door>, BootError> {
        let conn = domain::get().add_conn(self.sock, Some(self.pid))?;
        exchange(&conn, offer)
    }
}

/// Connect to a domain listening at `path` ([`listen`]), offer it `offer`
/// and return the doors it offered.
///
/// ```no_run
/// let doors = lintel::boot::connect("/tmp/my-system.sock".as_ref(), &[]).unwrap();
/// let reply = doors[0].call_bytes(b"ping").unwrap();
/// ```
pub fn connect(path: &std::path::Path, offer: &[Door]) -> Result<Vec<Door>, BootError> {
    let sock = sys::seqpacket_connect(path)?;
    let peer = sys::peer_pid(sock.as_fd())?;
    let conn = domain::get().add_conn(sock, Some(peer))?;
    send_offer(&conn, offer)?;
    // A process connects to call: its call area goes now, while the peer
    // answers, and the peer maps it and readies a thread for it before
    // the first call (which otherwise waits for both).
    crate::client::prepare_calls(&conn);
    receive_offer(&conn)
}
