//! The call area a domain makes for its own calls over one connection: a
//! sealed memfd of `SLOTS` slots, shared with the peer, whose slots its
//! calling threads lease (`lease`, `client`). The peer's view of it is
//! `server::InArea`. A plain value over the mapping: the connection holds
//! it, the caller's side uses it.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering::*;

use parking_lot::Mutex;

use crate::abi::{AREA_SIZE, SEQ_DEAD, SLOTS};
use crate::state::bulk::SlotBulk;
use crate::state::lease::Leases;
use crate::sys::umem::{Slot, SyncWord};
use crate::sys::{self, Mapping};

/// The call area this domain created for its calls over one connection.
pub(crate) struct OutArea {
    map: Arc<Mapping>,
    /// Which thread uses which slot (see `lease`).
    pub leases: Leases,
    /// Each slot's bulk segments: ours for arguments, the server's for
    /// results (used by the slot's lease owner only).
    pub bulk: Vec<Mutex<SlotBulk>>,
}

impl OutArea {
    /// A new area, and the sealed memfd to hand the peer.
    pub fn create() -> std::io::Result<(OutArea, OwnedFd)> {
        let fd = sys::sealed_memfd("lintel-calls", AREA_SIZE)?;
        let map = Arc::new(Mapping::map(fd.as_fd(), AREA_SIZE)?);
        let area = OutArea {
            map,
            leases: Leases::new(SLOTS),
            bulk: (0..SLOTS).map(|_| Mutex::new(SlotBulk::default())).collect(),
        };
        Ok((area, fd))
    }

    pub fn slot(&self, i: u32) -> Slot {
        Slot::of_area(&self.map, i)
    }

    /// Whether the late reply to abandoned call `seq` has landed in slot
    /// `i` (or the server died): the slot may be used again.
    pub fn settled(&self, i: u32, seq: u32) -> bool {
        let r = self.slot(i).sync(SyncWord::RepSeq).load(Acquire);
        r == seq || r == SEQ_DEAD
    }

    /// Wake every caller waiting in this area: the server died.
    pub fn peer_died(&self) {
        for i in 0..SLOTS as u32 {
            let s = self.slot(i);
            s.sync(SyncWord::RepSeq).store(SEQ_DEAD, SeqCst);
            sys::futex_wake(s.sync(SyncWord::RepSeq), u32::MAX);
        }
        self.leases.wake_all();
    }
}
