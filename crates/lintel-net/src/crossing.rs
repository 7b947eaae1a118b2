//! Where doors and capabilities turn into each other, on the proxy's
//! thread (Cap'n Proto's clients are not `Send`).
//!
//! - A lintel door leaving through a link becomes a capability served by a
//!   [`DoorServer`] that calls it, unless it is an import of this proxy:
//!   then the capability it stands for leaves instead, so a door sent back
//!   where it came from arrives there as the original (the RPC system
//!   sends the far side its own export).
//! - A capability arriving becomes a lintel door served by this proxy (an
//!   *import*, datum = its key in the import table), unless it is one of
//!   this proxy's `DoorServer`s coming back: then it is the door that
//!   server calls, the original.
//!
//! When an import's lintel door is gone everywhere (no handle here, no
//! other domain's hold), the proxy drops the capability, and the RPC
//! system tells the far side (`Release`), whose `DoorServer` lets go of
//! its door in turn (a door of its own domain held as another domain's
//! hold, so its server hears `unreferenced`): the count crosses the link
//! both ways.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use capnp_rpc::CapabilityServerSet;
use lintel::{CallError, Door};
use tokio::sync::mpsc::UnboundedSender;

use crate::exported::DoorServer;
use crate::imported::Import;
use crate::lintel_capnp::door;
use crate::proxy::Cmd;

/// One proxy's tables of imports and exports.
pub(crate) struct Crossing {
    /// Tells this proxy's imports apart from another proxy's in this process.
    pub id: u64,
    imports: RefCell<HashMap<u64, door::Client>>,
    next: Cell<u64>,
    exported: Cell<u64>,
    servers: RefCell<CapabilityServerSet<DoorServer, door::Client>>,
    /// How import doors reach this thread.
    cmds: UnboundedSender<Cmd>,
    /// This thread's runtime, on which import doors' handlers run.
    rt: tokio::runtime::Handle,
    /// The smallest message limit of this proxy's links: a call or reply
    /// above it is refused here with `TooLarge`, since the far end would
    /// close the whole link on it.
    max_message: Cell<usize>,
}

impl Crossing {
    pub fn new(id: u64, cmds: UnboundedSender<Cmd>, rt: tokio::runtime::Handle) -> Rc<Crossing> {
        Rc::new(Crossing {
            id,
            imports: RefCell::new(HashMap::new()),
            next: Cell::new(1),
            exported: Cell::new(0),
            servers: RefCell::new(CapabilityServerSet::new()),
            cmds,
            rt,
            max_message: Cell::new(usize::MAX),
        })
    }

    /// A link of this proxy allows messages of at most `max` bytes.
    pub fn limit_messages(&self, max: usize) {
        self.max_message.set(self.max_message.get().min(max));
    }

    /// The bytes of `what` ("arguments" or "result": `data` and its
    /// `buffers`) if they may leave on a link; otherwise the `TooLarge` to
    /// answer instead.
    pub fn fits(&self, what: &'static str, data: &[u8], buffers: &[Vec<u8>]) -> Result<usize, CallError> {
        let (len, max) = (
            data.len() + buffers.iter().map(Vec::len).sum::<usize>(),
            self.max_message.get(),
        );
        if len > max {
            return Err(CallError::TooLarge { what, len, max });
        }
        Ok(len)
    }

    /// The capability that stands for `door` on a link.
    pub fn to_cap(self: &Rc<Self>, door: Door) -> door::Client {
        if let Some((import, key)) = door.served_by::<Import>()
            && import.proxy == self.id
            && let Some(cap) = self.imports.borrow().get(&key)
        {
            return cap.clone();
        }
        let mut servers = self.servers.borrow_mut();
        // Dropped servers' entries go now and then, not on every export.
        self.exported.set(self.exported.get() + 1);
        if self.exported.get().is_multiple_of(1024) {
            servers.gc();
        }
        servers.new_client(DoorServer::new(door, self.clone()))
    }

    /// The door that stands for `cap`, received from a link.
    pub fn to_door(&self, cap: door::Client) -> Door {
        if let Some(server) = self.servers.borrow().get_local_server_of_resolved(&cap) {
            return server.door.clone();
        }
        let key = self.next.get();
        self.next.set(key + 1);
        self.imports.borrow_mut().insert(key, cap);
        Door::create_async_on(self.rt.clone(), key, Import::new(self.id, key, self.cmds.clone()))
    }

    /// The capability of import `key`, if still held.
    pub fn import(&self, key: u64) -> Option<door::Client> {
        self.imports.borrow().get(&key).cloned()
    }

    /// Nobody holds import `key` any more: let go of its capability.
    pub fn release(&self, key: u64) {
        self.imports.borrow_mut().remove(&key);
    }

    /// How many imports are held (for tests and statistics).
    pub fn imports_held(&self) -> usize {
        self.imports.borrow().len()
    }
}
