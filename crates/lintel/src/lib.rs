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

mod api;
mod client;
mod context;
mod domain;
mod object;
mod server;
mod state;
pub mod stub;
mod sys;

pub use api::process::{above_descriptor_floor, after_fork, descriptor_floor, set_descriptor_floor};
pub use api::tuning::{set_force_vanilla, set_max_server_threads, set_spin, spinning};
pub use api::{boot, introspect, pool};
pub use context::attached::Attached;
pub use context::error::{BootError, CallError, Fault};
pub use context::settings::{max_message, set_max_message};
pub use context::{deadline, shuttle, stats};
pub use lintel_macros::interface;
pub use object::buffer::{self, Buffer, Loan, Loaned, Sealed, SealedWriter};
pub use object::door::{Door, Handler, Reply, Request};
pub use server::{Caller, caller};
pub use sys::umem::{copy_bytes, copy_raw};
