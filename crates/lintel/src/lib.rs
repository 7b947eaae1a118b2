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
//! Dependencies point downwards through seven layers: a module uses
//! modules of lower layers, and of its own only where named below.
//!
//! 1. **Protocol**: [`abi`] (the `lintel-abi` crate): layouts, status codes,
//!    control messages, the version. No logic; everything that speaks to a
//!    domain uses it.
//! 2. **The machine**: `sys` (every system call, and the `unsafe` of mapping),
//!    `umem` (peer-writable memory, read word by word and copied out),
//!    `fence` (asymmetric fences between threads of this process) and
//!    `sync` (the atomics, locks and fences `refs` and `claim` are written
//!    over, so that `model` compiles the same files over loom's and
//!    model-checks them).
//! 3. **Plain values**, each with host tests that need no process and no
//!    runtime: `lease` (which thread uses which slot; each slot's owner
//!    and thieves meet in `claim`), `grants` (a peer's
//!    door numbers), `handshake` (post, sleep, wake, bind and alert, generic
//!    over the memory so loom model-checks the same code), `call_area` (the
//!    slots a domain calls through), `bulk` (a slot's segments), the
//!    [`deadline`] arithmetic, `settings`, `error`, [`stats`], `spin`,
//!    [`shuttle`] (a thread's call state; alerts reach a connection through
//!    a hook the domain sets), `workers` (the server-thread pool, generic
//!    over what it serves), `refs` (a served door's count of holders and
//!    calls, with fast calls counted in each worker's own word instead, and
//!    when `unreferenced` is due), `running` (the registry of those
//!    words), `unref`
//!    (the thread that runs `unreferenced` in order), `leaked` and
//!    [`Attached`] (a request's doors and buffers: a list that drops
//!    cheaply when empty).
//! 4. **Objects**: `door` (a door, and the object it serves with its
//!    reference count), [`buffer`] (loans and sealed snapshots) and `conn`
//!    (a connection: its socket, grant table, descriptors parked ahead of
//!    their call, control messages). These three name each other's types,
//!    the only cycle in the crate: a remote door and a peer's loan hold their
//!    connection, a connection's grant table holds the doors it granted, a
//!    request carries doors and buffers. A connection reaches the rest of
//!    the runtime only through its `conn::Home`, which the domain
//!    implements, so connections are tested on the host with a stand-in.
//! 5. **Moving calls**: `transfer` (doors in transit), `channel` (the
//!    caller's side), `server` (the server's side), then `call`
//!    (`Door::call`: co-located, or through a channel).
//! 6. **The domain**, `domain`: the process's connections, the call areas
//!    its peers made, tickets, the watcher thread, and the `Home` of every
//!    connection.
//! 7. **Public entry points**: this file (settings, [`introspect`],
//!    [`after_fork`]), [`boot`], [`pool`] and [`stub`]. Only these look the
//!    process-wide domain up (`domain::get`); below them it is handed down
//!    (a connection's `Home`, the worker threads' pool).
//!
//! The public API: [`Door`], [`buffer`], [`boot`], [`stub`], [`shuttle`],
//! [`deadline`], [`stats`], [`pool`] and [`introspect`].
#![forbid(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub use lintel_abi as abi;
mod attached;
pub mod boot;
pub mod buffer;
pub use umem::{copy_bytes, copy_raw};
mod bulk;
mod call;
mod call_area;
mod channel;
mod claim;
mod conn;
pub mod deadline;
mod domain;
mod door;
mod error;
mod fence;
mod grants;
mod handshake;
mod leaked;
mod lease;
#[cfg(test)]
mod model;
mod pace;
pub mod pool;
mod refs;
mod running;
mod server;
mod settings;
pub mod shuttle;
mod spin;
pub mod stats;
pub mod stub;
mod sync;
mod sys;
mod transfer;
mod umem;
mod unref;
mod workers;

pub use attached::Attached;
pub use buffer::{Buffer, Loan, Loaned, Sealed, SealedWriter};
pub use door::{Door, Handler, Reply, Request};
pub use error::{BootError, CallError, Fault};
pub use lintel_macros::interface;
pub use server::{Caller, caller};
pub use settings::{max_message, set_max_message};

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
    stats::after_fork();
    buffer::forked();
    unref::after_fork();
    running::after_fork();
    channel::forget_thread_leases();
    domain::after_fork()
}

// ---- the domain's settings ----

/// Whether this domain spins before sleeping (`LINTEL_SPIN`, [`set_spin`]).
pub fn spinning() -> bool {
    domain::get()
        .settings
        .spin
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// Turn spinning on or off for this domain (off: every wait sleeps on the futex).
pub fn set_spin(on: bool) {
    domain::get()
        .settings
        .spin
        .store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Most server threads this domain runs; calls beyond it wait for a thread.
pub fn set_max_server_threads(n: usize) {
    domain::get().pool.set_limit(n);
}

/// Make this domain's cross-domain calls take the vanilla path even when
/// they would fit the fast path (the INKS "message" configuration; for
/// measurement).
pub fn set_force_vanilla(on: bool) {
    domain::get()
        .settings
        .force_vanilla
        .store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Counts of this domain's live runtime objects, for tests and monitoring.
pub mod introspect {
    /// Connections to other domains that are alive.
    pub fn connections() -> usize {
        crate::domain::get().conn_count()
    }
    /// Whether this domain has a live connection to process `pid`.
    pub fn connected_to(pid: u32) -> bool {
        crate::conn::Home::conn_to(crate::domain::get(), pid).is_some()
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
        crate::conn::Home::conn_to(crate::domain::get(), pid).map_or(0, |c| c.releases_sent())
    }
    /// Tickets minted here and not yet redeemed or dropped.
    pub fn tickets() -> usize {
        crate::domain::get().ticket_count()
    }
}
