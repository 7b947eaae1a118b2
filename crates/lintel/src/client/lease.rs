//! One thread's lease of one slot of a connection's call area: what the
//! calling thread keeps between its calls over that connection (the
//! area's side of leases is `state::lease`).

use std::cell::Cell;
use std::sync::Arc;

use crate::context::settings::Settings;
use crate::context::shuttle::Shuttle;
use crate::context::stats::Counters;
use crate::object::conn::Conn;
use crate::state::call_area::OutArea;
use crate::state::lease::Claim;
use crate::sys::umem::Slot;

/// Where a call is made: a slot of this domain's call area on `conn`
/// (leased by a thread, or taken by an awaited call).
pub(super) struct At<'a> {
    pub conn: &'a Arc<Conn>,
    pub area: &'a OutArea,
    pub slot: &'a Slot,
    /// The slot's index in the area.
    pub index: u32,
    /// Where the caller runs ([`u32::MAX`]: unknown), for the server's spin.
    pub cpu: u32,
}

/// One thread's lease of one slot.
pub(super) struct Lease {
    pub(super) conn: Arc<Conn>,
    pub(super) area: Arc<OutArea>,
    pub(super) claim: Claim,
    pub(super) slot: Slot,
    /// The CPU this thread ran on during its last call.
    pub(super) cpu: Cell<u32>,
    /// The call on the slot was abandoned: the lease is void.
    pub(super) abandoned: Cell<bool>,
    pub(super) counters: Counters,
    /// This thread's shuttle (a lease never leaves its thread).
    pub(super) shuttle: Arc<Shuttle>,
    /// The domain's settings (spinning, forced path), read on every call.
    pub(super) settings: &'static Settings,
    /// Held in this thread's `LEASES` (so it may be `last`).
    pub(super) held: Cell<bool>,
    /// How long this thread's calls on the slot took lately (ns, a running
    /// average over those that outlasted the hot poll): how long the next
    /// one may spin before it sleeps (`spin::adaptive_budget`).
    pub(super) lately: Cell<u32>,
}

impl Lease {
    #[inline]
    pub(super) fn next_seq(&self) -> u32 {
        self.area.leases.next_seq(&self.claim)
    }

    /// The leased slot, as the call paths name it.
    #[inline]
    pub(super) fn at(&self) -> At<'_> {
        At {
            conn: &self.conn,
            area: &self.area,
            slot: &self.slot,
            index: self.claim.index,
            cpu: self.cpu.get(),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.area.leases.release(&self.claim);
    }
}
