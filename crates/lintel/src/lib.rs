//! lintel: doors between processes on Linux.
//!
//! A *domain* is a process running this runtime. A [`Door`] is a capability
//! to one object in some domain: calling it runs that domain's handler with
//! the door's datum, the argument bytes and any doors passed, and returns
//! result bytes and doors. Doors pass freely between domains, including to
//! third parties, and are reference counted across them: the server hears
//! `unreferenced` once nobody else holds the door; it can revoke it at any
//! time; a domain that dies drops everything it held and fails every call
//! waiting on it.
//!
//! Calls take the cheapest path that is correct: a direct call when the
//! door is served in the caller's own domain; across processes, a slot in
//! shared memory per client thread with a server thread bound to it (spin,
//! then futex), carrying up to 16 bytes inline (fast path), 5 KiB and up
//! to 64 doors (vanilla path), or more through per-slot bulk segments, up
//! to the domain's message limit ([`max_message`], default 1 GiB). Data
//! that should not be copied goes by reference ([`buffer`]): shared loans
//! and sealed snapshots.
//!
//! ```
//! use lintel::{Door, Reply, Request};
//! let counter = std::sync::atomic::AtomicU64::new(0);
//! let door = Door::create(1, move |req: Request<'_>, reply: &mut Reply| {
//!     let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
//!     reply.data.extend_from_slice(&n.to_le_bytes());
//!     Ok(())
//! });
//! let mut reply = Reply::new();
//! door.call(b"", &[], &mut reply).unwrap();
//! door.call(b"", &[], &mut reply).unwrap();
//! assert_eq!(reply.data, 1u64.to_le_bytes());
//! ```
//!
//! Across processes, [`boot::spawn`] starts a child domain and exchanges
//! initial doors with it; the child calls [`boot::join`].
//!
//! # How the crate is built
//!
//! Dependencies point downwards through four layers:
//!
//! 1. **Protocol**: [`abi`] (the `lintel-abi` crate): layouts, status codes,
//!    control messages. No logic; everything that speaks to a domain uses it.
//! 2. **The machine**: `sys` (every system call, and the `unsafe` of mapping)
//!    and `umem` (peer-writable memory, read word by word and copied out).
//! 3. **Plain values**, each with host tests that need no process and no
//!    runtime: `lease` (which thread uses which slot), `grants` (a peer's
//!    door numbers), `handshake` (post, sleep, wake, bind and alert, generic
//!    over the memory so loom model-checks the same code), the reference
//!    count of `door::DoorCore`, `conn::Parked` (tickets ahead of their call),
//!    `bulk` (a slot's segments: sizing, generations, checks), the loan
//!    pool's ranges in [`buffer`], and the [`deadline`] arithmetic. They
//!    depend on layers 1 and 2 only.
//! 4. **The runtime**: `domain` (the process-wide state and its watcher and
//!    unreferenced threads), `conn`, `channel` (calling), `server` and
//!    `pool` (serving), `transfer` (doors in transit). These know each other.
//!    A connection carries the domain it belongs to, so the runtime inside
//!    never looks the process-wide domain up (`domain::get`): that happens
//!    only at the public API's entry points ([`boot`], [`introspect`], the
//!    settings, [`pool::stats`]), in the worker threads the runtime starts,
//!    and where an alert is forwarded to the call a thread is in.
//!
//! The public API sits on top: [`Door`], [`buffer`], [`boot`], [`stub`],
//! [`shuttle`], [`deadline`], [`stats`], [`pool`] and [`introspect`].
#![forbid(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub use lintel_abi as abi;
pub mod boot;
pub mod buffer;
pub use umem::{copy_bytes, copy_raw};
mod bulk;
mod channel;
mod conn;
pub mod deadline;
mod domain;
mod door;
mod error;
mod grants;
mod handshake;
mod leaked;
mod lease;
pub mod pool;
mod server;
mod settings;
pub mod shuttle;
mod spin;
pub mod stats;
pub mod stub;
mod sys;
mod transfer;
mod umem;

pub use buffer::{Buffer, Loan, Loaned, Sealed, SealedWriter};
pub use door::{Door, Handler, Reply, Request};
pub use error::{BootError, CallError, Fault};
pub use lintel_macros::interface;
pub use settings::{
    max_message, set_force_vanilla, set_max_message, set_max_server_threads, set_spin, spinning,
};

/// Keep the runtime's own descriptors (sockets, memfds, eventfds, epoll,
/// pidfds, and every descriptor a peer sends) at `floor` or above, when
/// the kernel has room there. For a process whose code chooses descriptor
/// numbers itself (a shell's `exec 3<file`, `dup2`, `closefrom`): the
/// emulation library sets it, and keeps the program below it. Affects
/// descriptors made from now on; 0 (the default) leaves them where the
/// kernel puts them.
///
/// ```
/// lintel::set_descriptor_floor(0);
/// assert_eq!(lintel::descriptor_floor(), 0);
/// ```
pub fn set_descriptor_floor(floor: i32) {
    sys::set_descriptor_floor(floor)
}

/// The floor [`set_descriptor_floor`] set (0 if none).
pub fn descriptor_floor() -> i32 {
    sys::descriptor_floor()
}

/// `fd` moved to the floor or above (see [`set_descriptor_floor`]), for
/// libraries that keep descriptors of their own beside the runtime's.
pub fn above_descriptor_floor(fd: std::os::fd::OwnedFd) -> std::os::fd::OwnedFd {
    sys::above_floor(fd)
}

/// Call in a child made by `fork` (one that does not `exec` at once),
/// before it uses lintel: the parent's connections stay the parent's
/// (their memory is shared with it, and their threads are not in the
/// child), and the child gets a domain of its own. Doors the child held
/// from before the fork that lead to other domains fail with
/// [`CallError::PeerDied`]; doors it serves itself keep working
/// co-located; it can `boot::connect` anew. Loans cannot be made in such
/// a child (the pool is the parent's). Without this call a forked child
/// that uses lintel corrupts its parent's calls.
///
/// ```no_run
/// // SAFETY (of the fork): the child only calls async-signal-safe code
/// // and lintel::after_fork before exiting.
/// let pid = unsafe { libc::fork() };
/// if pid == 0 {
///     lintel::after_fork();
///     // ... connect again, call, then exit
///     std::process::exit(0);
/// }
/// ```
pub fn after_fork() {
    domain::after_fork()
}

/// Counts of this domain's live runtime objects, for tests and monitoring.
pub mod introspect {
    /// Connections to other domains that are alive.
    pub fn connections() -> usize {
        crate::domain::get().conn_count()
    }
    /// Whether this domain has a live connection to process `pid`.
    pub fn connected_to(pid: u32) -> bool {
        crate::domain::get().conn_to(pid).is_some()
    }
    /// Doors served elsewhere that this domain holds.
    pub fn remote_doors() -> usize {
        crate::domain::get().remote_count()
    }
    /// Doors served by process `pid` that this domain holds.
    pub fn remote_doors_from(pid: u32) -> usize {
        crate::domain::get().remote_count_from(pid)
    }
    /// For a door this domain serves, how many holders it counts: other
    /// domains holding it and tickets for it in transit. `None` for a door
    /// served elsewhere.
    ///
    /// ```
    /// let d = lintel::Door::create(0, |_: lintel::Request<'_>, _: &mut lintel::Reply| Ok(()));
    /// assert_eq!(lintel::introspect::holders(&d), Some(0));
    /// ```
    pub fn holders(door: &crate::Door) -> Option<u32> {
        match &door.base().0 {
            crate::door::Inner::Local(core) => Some(core.holder_count()),
            _ => None,
        }
    }
    /// Release messages this domain has sent to process `pid` over its
    /// live connection (releases of dropped doors go in batches).
    pub fn release_messages_to(pid: u32) -> u64 {
        crate::domain::get().conn_to(pid).map_or(0, |c| c.releases_sent())
    }
    /// Tickets minted here and not yet redeemed or dropped.
    pub fn tickets() -> usize {
        crate::domain::get().ticket_count()
    }
}
