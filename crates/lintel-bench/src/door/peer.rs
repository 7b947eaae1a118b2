//! The parent's handle on a child domain: started with `lintel::boot::spawn` (which passes the
//! child its own socket, so not with `ChildProc`), killed and reaped on every exit path.

use std::process::Child;

use anyhow::{Context as _, bail, ensure};
use lintel::Door;

use super::{Offer, ROLE};
use crate::harness::{Config, spawn_self};

/// A running child domain and the doors it offered; killed and reaped on drop.
pub struct Peer {
    child: Child,
    doors: Vec<Door>,
    reaped: bool,
}

impl Peer {
    /// Starts a child domain serving the [`Offer`] doors and offers it `offer`.
    pub fn spawn(cfg: &Config, offer: &[Door]) -> anyhow::Result<Peer> {
        let mut cmd = spawn_self(cfg, ROLE, &[])?;
        let spawned = lintel::boot::spawn(&mut cmd, offer).context("starting a door child domain")?;
        let peer = Peer {
            child: spawned.child,
            doors: spawned.doors,
            reaped: false,
        };
        ensure!(
            peer.doors.len() == Offer::ALL.len(),
            "the door child offered {} doors, expected {}",
            peer.doors.len(),
            Offer::ALL.len()
        );
        Ok(peer)
    }

    /// The child's door `which`.
    pub fn door(&self, which: Offer) -> &Door {
        &self.doors[which.datum() as usize]
    }

    /// Sends SIGKILL (one `kill` system call; the child is reaped later).
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill().context("killing the door child")
    }

    /// Ends a child that should still be serving: fails if it exited on its own meanwhile.
    pub fn stop(mut self) -> anyhow::Result<()> {
        let early = self.child.try_wait().context("polling the door child")?;
        self.reap();
        if let Some(status) = early {
            bail!("the door child exited during the suite: {status}");
        }
        Ok(())
    }

    fn reap(&mut self) {
        if !self.reaped {
            self.reaped = true;
            self.doors.clear();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.reap();
    }
}
