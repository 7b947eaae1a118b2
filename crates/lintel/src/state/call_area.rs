//! The call area a domain makes for its own calls over one connection: a
//! sealed memfd of `AREA_SLOTS` slots, shared with the peer, whose first
//! slots its calling threads lease (`lease`, `client`) and whose others its
//! awaited calls take (`calls`, with the tasks parked on them in `parked`
//! and the notice socket that wakes them). The peer's view of it is
//! `server::InArea`. A plain value over the mapping: the connection holds
//! it, the caller's side uses it.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering::*;

use parking_lot::Mutex;

use crate::abi::{AREA_SIZE, AREA_SLOTS, ASYNC_SLOTS, OFF_NOTICE_LOST, SEQ_DEAD, SLOTS};
use crate::state::bulk::SlotBulk;
use crate::state::calls::CallSlots;
use crate::state::lease::Leases;
use crate::state::parked::Parked;
use crate::sys::notices::Notices;
use crate::sys::umem::{Slot, SyncWord};
use crate::sys::{self, Mapping};
use std::sync::atomic::AtomicU32;

/// The call area this domain created for its calls over one connection.
pub(crate) struct OutArea {
    map: Arc<Mapping>,
    /// Which thread uses which slot (see `lease`).
    pub leases: Leases,
    /// Each slot's bulk segments: ours for arguments, the server's for
    /// results (used by the slot's lease owner only).
    pub bulk: Vec<Mutex<SlotBulk>>,
    /// Which awaited call uses which of the other slots.
    pub calls: CallSlots,
    /// The tasks parked on them.
    pub parked: Parked,
    /// Where the server's notices to parked calls arrive.
    pub notices: Notices,
    /// The awaited calls' slots, each made on first use and lent to the
    /// calls that take it (so a call takes no reference count of its own).
    async_slots: Box<[std::sync::OnceLock<Slot>]>,
}

impl OutArea {
    /// A new area, and what to hand the peer: the sealed memfd, and the
    /// notice socket's other end.
    pub fn create() -> std::io::Result<(OutArea, OwnedFd, OwnedFd)> {
        let fd = sys::sealed_memfd("lintel-calls", AREA_SIZE)?;
        let map = Arc::new(Mapping::map(fd.as_fd(), AREA_SIZE)?);
        let (notices, theirs) = Notices::pair()?;
        let area = OutArea {
            map,
            leases: Leases::new(SLOTS),
            bulk: (0..AREA_SLOTS).map(|_| Mutex::new(SlotBulk::default())).collect(),
            calls: CallSlots::new(),
            parked: Parked::new(),
            notices,
            async_slots: (0..ASYNC_SLOTS).map(|_| std::sync::OnceLock::new()).collect(),
        };
        Ok((area, fd, theirs))
    }

    /// The area's word saying a notice was lost (see `abi`).
    pub fn notice_lost(&self) -> &AtomicU32 {
        self.map.u32(OFF_NOTICE_LOST)
    }

    pub fn slot(&self, i: u32) -> Slot {
        Slot::of_area(&self.map, i)
    }

    /// Awaited-call slot `index` (the area's slot [`SLOTS`] past it).
    #[inline]
    pub fn async_slot(&self, index: u32) -> &Slot {
        let cell = &self.async_slots[index as usize % ASYNC_SLOTS];
        cell.get_or_init(|| self.slot(SLOTS as u32 + index % ASYNC_SLOTS as u32))
    }

    /// Whether the late reply to abandoned call `seq` has landed in slot
    /// `i` (or the server died): the slot may be used again.
    pub fn settled(&self, i: u32, seq: u32) -> bool {
        let r = self.slot(i).sync(SyncWord::RepSeq).load(Acquire);
        r == seq || r == SEQ_DEAD
    }

    /// Wake every caller waiting in this area: the server died. (The
    /// awaited calls' slots never taken are left untouched.)
    pub fn peer_died(&self) {
        let used = SLOTS as u32 + self.calls.used();
        for i in 0..used {
            let s = self.slot(i);
            s.sync(SyncWord::RepSeq).store(SEQ_DEAD, SeqCst);
            sys::futex_wake(s.sync(SyncWord::RepSeq), u32::MAX);
        }
        self.leases.wake_all();
        self.calls.wake_all();
        let mut woken = Vec::new();
        self.parked.all(&mut woken);
        woken.into_iter().for_each(std::task::Waker::wake);
    }
}
