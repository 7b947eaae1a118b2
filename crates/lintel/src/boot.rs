//! Starting domains and handing them their first doors.
//!
//! [`spawn`] starts a process with a private connection to this domain
//! (one inherited socket, named in `LINTEL_BOOT_FD`); the child calls
//! [`join`]. Each side offers a list of doors and receives the other's.

use std::os::fd::{AsFd, AsRawFd};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use crate::conn::Conn;
use crate::door::Door;
use crate::error::BootError;
use crate::wire::Ctl;
use crate::{domain, sys, transfer};

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
/// it `offer`, and return the doors it offered. Call once.
pub fn join(offer: &[Door]) -> Result<Vec<Door>, BootError> {
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
    let conn = domain::get().add_conn(sock, Some(parent))?;
    exchange(&conn, offer)
}

/// Whether this process was started by [`spawn`] and has not joined yet.
pub fn is_spawned() -> bool {
    std::env::var_os(ENV_FD).is_some()
}

fn exchange(conn: &std::sync::Arc<Conn>, offer: &[Door]) -> Result<Vec<Door>, BootError> {
    let (wires, tickets) = transfer::encode_for_socket(conn, offer)?;
    let fds: Vec<_> = tickets.iter().map(|t| t.as_fd()).collect();
    if !conn.send(&Ctl::Boot { doors: wires }, &fds) {
        return Err(BootError::Protocol("peer closed the connection during boot"));
    }
    let (wires, fds) = conn
        .wait_boot(BOOT_TIMEOUT)
        .ok_or(BootError::Protocol("peer did not offer its doors"))?;
    Ok(transfer::decode_from_socket(conn, &wires, fds)?)
}
