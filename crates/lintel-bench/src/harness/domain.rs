//! Child domains: this binary re-executed as a child role that serves doors, started with
//! `lintel::boot::spawn` (which passes its own socket, so not with `ChildProc`); killed and
//! reaped on drop.

use std::process::Child;

use anyhow::{Context as _, bail};
use lintel::Door;

use super::{Config, spawn_self};

/// A running child domain and the doors it offered.
pub struct ChildDomain {
    child: Child,
    doors: Vec<Door>,
}

impl ChildDomain {
    /// Starts child role `role`, which calls `lintel::boot::join` offering at least one door.
    pub fn spawn(cfg: &Config, role: &str) -> anyhow::Result<ChildDomain> {
        ChildDomain::spawn_with(cfg, role, &[])
    }

    /// [`ChildDomain::spawn`] with arguments for the child role.
    pub fn spawn_with(cfg: &Config, role: &str, args: &[String]) -> anyhow::Result<ChildDomain> {
        ChildDomain::spawn_offering(cfg, role, args, &[])
    }

    /// [`ChildDomain::spawn_with`], offering the child `offer` (it takes them with
    /// `lintel::boot::join_with`).
    pub fn spawn_offering(
        cfg: &Config,
        role: &str,
        args: &[String],
        offer: &[Door],
    ) -> anyhow::Result<ChildDomain> {
        let mut cmd = spawn_self(cfg, role, args)?;
        let s =
            lintel::boot::spawn(&mut cmd, offer).with_context(|| format!("starting child domain {role}"))?;
        let d = ChildDomain {
            child: s.child,
            doors: s.doors,
        };
        if d.doors.is_empty() {
            bail!("child domain {role} offered no door");
        }
        Ok(d)
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The first door the child offered.
    pub fn door(&self) -> Door {
        self.doors[0].clone()
    }

    /// Every door the child offered, in its order.
    pub fn doors(&self) -> &[Door] {
        &self.doors
    }
}

impl Drop for ChildDomain {
    fn drop(&mut self) {
        self.doors.clear();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The body of a child role that serves `door` until it is killed or its parent dies.
pub fn serve_forever(door: Door) -> anyhow::Result<()> {
    serve_all_forever(vec![door])
}

/// [`serve_forever`] offering several doors.
pub fn serve_all_forever(doors: Vec<Door>) -> anyhow::Result<()> {
    let _parent = lintel::boot::join(&doors).context("joining the benchmark domain")?;
    loop {
        std::thread::park();
    }
}
