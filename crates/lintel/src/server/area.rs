//! A peer's call area as the server sees it: mapped after its seals and
//! size are checked, with the server's private state of each slot.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::*};

use parking_lot::Mutex;

use crate::abi::{AREA_SIZE, AREA_SLOTS, OFF_NOTICE_LOST};
use crate::context::shuttle::Shuttle;
use crate::object::async_handler::CallAlert;
use crate::object::door::Door;
use crate::state::bulk::SlotBulk;
use crate::state::handshake::{self, AlertBox, Binding, Shared};
use crate::sys::umem::{Slot, SyncWord};
use crate::sys::{self, Mapping};

/// Server-private state of one slot of a peer's call area.
pub(super) struct SlotServer {
    /// Who serves the slot (model-checked in `handshake`).
    pub(super) binding: Binding<AtomicU32>,
    pub(super) unbind: AtomicBool,
    /// The request being (or last) served, and the last one whose caller
    /// was alerted (model-checked in `handshake`).
    alerts: AlertBox<AtomicU32>,
    pub(super) shuttle: Mutex<Option<Arc<Shuttle>>>,
    /// The alert of the call an async handler's task serves on the slot
    /// (`deferred`), from before its first poll until it replies.
    pub(super) deferred: Mutex<Option<Arc<CallAlert>>>,
    /// Doors of the last reply, kept until the caller has read it (its next
    /// request on the slot shows that). A door the caller passed in and gets
    /// back travels as the caller's own grant: were our copy dropped now, our
    /// release could reach the caller before the reply and retire the grant
    /// the reply names.
    pub(super) pinned: Mutex<Vec<Door>>,
    pub(super) has_pinned: AtomicBool,
    /// How long the waits for the slot's next request took lately (ns, a
    /// running average over those its spinning worker timed): how long the
    /// next may spin (`spin::adaptive_budget`).
    pub(super) lately: AtomicU32,
}

impl SlotServer {
    pub(super) fn new() -> SlotServer {
        SlotServer {
            binding: Binding(AtomicU32::new(handshake::IDLE)),
            unbind: AtomicBool::new(false),
            alerts: AlertBox {
                last_seq: AtomicU32::new(0),
                alerted_seq: AtomicU32::new(0),
            },
            shuttle: Mutex::new(None),
            deferred: Mutex::new(None),
            pinned: Mutex::new(Vec::new()),
            has_pinned: AtomicBool::new(false),
            lately: AtomicU32::new(0),
        }
    }

    /// Request `seq` starts on the worker whose shuttle is `shuttle`: its
    /// alert starts as the caller's was, when it posted (`flagged`) or since
    /// (see [`InArea::alert`]).
    #[inline]
    pub(super) fn begin(&self, seq: u32, flagged: bool, shuttle: &Shuttle) {
        shuttle.clear_alert();
        if self.alerts.begin::<Shared>(seq, flagged) {
            shuttle.set_alert();
        }
    }

    /// Alert the thread serving the slot, if one is, and the task of an
    /// async handler serving it.
    fn alert_thread(&self) {
        if let Some(sh) = self.shuttle.lock().clone() {
            sh.alert();
        }
        if let Some(a) = self.deferred.lock().clone() {
            a.alert();
        }
    }

    /// The request being (or last) served.
    pub(super) fn last_seq(&self) -> u32 {
        self.alerts.last_seq.load(Relaxed)
    }
}

/// A peer's call area, mapped here.
pub(crate) struct InArea {
    pub(super) map: Arc<Mapping>,
    pub(super) slots: Vec<SlotServer>,
    /// Each slot's bulk segments: the caller's for arguments, ours for
    /// results (used by the thread serving the slot).
    pub(super) bulk: Vec<Mutex<SlotBulk>>,
    /// The caller's socket for notices to its parked calls.
    notices: OwnedFd,
    /// One past the highest slot ever kicked: the slots beyond were never
    /// used, and a caller's death need not touch their (untouched) pages.
    used: AtomicU32,
}

impl InArea {
    /// Map the caller's area (after checking its seals and size), with
    /// its notice socket (any descriptor: notices are sent without
    /// blocking, so a peer's choice cannot stall a server thread).
    pub fn map(fd: BorrowedFd<'_>, notices: OwnedFd) -> Result<InArea, &'static str> {
        sys::check_sealed_memfd(fd, AREA_SIZE)?;
        let map = Mapping::map(fd, AREA_SIZE).map_err(|_| "cannot map call area")?;
        Ok(InArea {
            map: Arc::new(map),
            slots: (0..AREA_SLOTS).map(|_| SlotServer::new()).collect(),
            bulk: (0..AREA_SLOTS).map(|_| Mutex::new(SlotBulk::default())).collect(),
            notices,
            used: AtomicU32::new(0),
        })
    }

    /// The caller's task on `slot` is parked: tell it its reply is there.
    /// Never blocks. When the caller's queue is full the notice is lost, so
    /// the area's notice-lost word says so, and a second send rings again
    /// in case the caller emptied the queue meanwhile (else the queued
    /// notices wake it, and it reads the word after them).
    #[cold]
    pub(super) fn notify(&self, slot: u32) {
        use rustix::net::{SendFlags, send};
        let flags = SendFlags::DONTWAIT | SendFlags::NOSIGNAL;
        let bytes = slot.to_le_bytes();
        if send(&self.notices, &bytes, flags).is_err() {
            self.map.u32(OFF_NOTICE_LOST).store(1, SeqCst);
            let _ = send(&self.notices, &bytes, flags);
        }
    }

    pub(super) fn slot(&self, i: u32) -> Slot {
        Slot::of_area(&self.map, i)
    }

    /// Queue `slot` for a thread unless one has it already.
    pub fn claim_for_queue(&self, slot: u32) -> bool {
        self.used.fetch_max(slot + 1, Relaxed);
        self.slots[slot as usize].binding.claim_for_queue()
    }

    pub fn unbind_requested(&self, slot: u32) -> bool {
        self.slots[slot as usize].unbind.load(Relaxed)
    }

    pub fn request_unbind(&self, slot: u32) {
        self.slots[slot as usize].unbind.store(true, SeqCst);
        sys::futex_wake(self.slot(slot).sync(SyncWord::ReqSeq), u32::MAX);
    }

    /// The caller on `slot` was alerted during request `seq`: note it for
    /// the request, and alert the thread serving it if one has started.
    ///
    /// With [`SlotServer::begin`] the alert is never lost (`handshake`,
    /// model-checked). An alert for a request that has just finished can
    /// reach the next one (an early wake-up, never a hang).
    pub fn alert(&self, slot: u32, seq: u32) {
        let Some(ss) = self.slots.get(slot as usize) else {
            return;
        };
        if ss.alerts.alert::<Shared>(seq) {
            ss.alert_thread();
        }
    }

    /// The calling domain died: alert every call it had here and release
    /// the threads bound to its slots. Their replies go nowhere.
    ///
    /// A call that has not started by now never starts: [`handle`](super::handle) reads
    /// the connection's death after [`SlotServer::begin`] publishes the
    /// call, and this reads `last_seq` after the death is published. The
    /// worker's fence there is the light one of an asymmetric pair, so this
    /// side's is the heavy one, once for every slot: each slot's running
    /// call (the one `last_seq` names) is then alerted without a fence of
    /// its own.
    pub fn caller_died(&self) {
        crate::sys::fence::heavy();
        let used = self.used.load(Relaxed) as usize;
        for (i, ss) in self.slots.iter().enumerate().take(used) {
            ss.alerts.alerted_seq.store(ss.last_seq(), Relaxed);
            ss.alert_thread();
            ss.unbind.store(true, SeqCst);
            // The slot's thread lets go now, not after a sleep: were it
            // running a call, the wake-up alone would find nobody asleep.
            handshake::caller_gone::<Shared>(&handshake::Words::of(&self.slot(i as u32)));
            ss.pinned.lock().clear();
        }
    }
}
