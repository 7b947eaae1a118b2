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
//! The source is one folder per layer; a module uses its own folder and
//! the folders above it in this list, never one below
//! (`crates/lintel-tests/tests/layers.rs` checks every `crate::` path):
//!
//! 0. [`abi`] (the `lintel-abi` crate): what crosses a connection: layouts,
//!    status codes, control messages, the version. No logic.
//! 1. `sys/`, the machine: system calls and mappings (the `lintel-sys`
//!    crate, re-exported), `umem` (memory a
//!    peer can write, read word by word and copied out), `fence`
//!    (asymmetric fences between a process's threads), `spin`, `notices`
//!    (a call area's notice socket, registered with the async runtime's
//!    reactor).
//! 2. `state/`, plain state machines, each with host tests that need no
//!    process: `claim` and `lease` (which thread uses which slot), `refs`
//!    and `running` (a served door's holders and calls, and when
//!    `unreferenced` is due), `handshake` (post, sleep, wake, bind, alert),
//!    `grants` (a peer's door numbers), `call_area` and `bulk` (a domain's
//!    slots and their segments), `calls` and `parked` (the slots awaited
//!    calls take, and the tasks parked on them), `workers` (the server-thread pool's
//!    policy), `pace`, `unref`, `leaked`; `sync` is the seam through which
//!    `model` compiles the same files over loom and model-checks them.
//! 3. `context/`, a call's context as values: [`deadline`], [`shuttle`]
//!    (alerts and cancel), `task_alert` (the alert of a call an async
//!    handler's task serves), `caller` ([`caller()`]), `error`,
//!    `settings`, [`stats`], [`Attached`].
//! 4. `object/`: `door`, `async_handler` (doors served by `async fn`s),
//!    [`buffer`] (loans and sealed snapshots), `conn`
//!    (a connection) and `transfer` (doors in transit). Door, buffer and
//!    connection name each other's types, the one cycle, kept inside this
//!    folder; a connection reaches its domain only through `conn::Home`, so
//!    connections are tested on the host with a stand-in.
//! 5. `client/` (the caller's side: `call` picks co-located or channel;
//!    the fast path is `client/fast.rs`, entered at `fast::call`, its chain
//!    drawn at the top of the file; `awaited` is the call a task awaits)
//!    and `server/` (the server's side: the worker's loop and the fast
//!    handling in `mod.rs`, the rest in `slow`, requests handed to async
//!    handlers' tasks in `deferred`, the peer's call area in `area`). The
//!    two do not name each other.
//! 6. `domain/`: the process's connections, the call areas its peers made,
//!    tickets, the watcher thread, and the `Home` of every connection.
//! 7. `api/` ([`boot`], [`pool`], [`introspect`], the settings' setters,
//!    [`after_fork`]) and [`stub`]: the public entry points. Only these look
//!    the process-wide domain up (`domain::get`); below them it is handed
//!    down. `lib.rs` holds this map and the re-exports.
//!
//! `unsafe` is denied at the root and allowed in named modules only:
//! `sys::umem`, `sys::notices` (registering a descriptor with the reactor),
//! `state::leaked`, `client::last` and the call of it in `client::fast`,
//! `context::shuttle`'s `raw`, `object::buffer`'s mapping views, and tests
//! that fork.
//!
//! The public API: [`Door`] (with [`Door::call_async`] and
//! [`Door::create_async`]), [`buffer`], [`boot`], [`stub`], [`shuttle`],
//! [`deadline`], [`stats`], [`pool`] and [`introspect`].
#![deny(unsafe_code)]
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

pub use api::process::{
    above_descriptor_floor, after_fork, descriptor_floor, set_descriptor_floor, settle_dead,
};
pub use api::tuning::{set_force_vanilla, set_max_server_threads, set_spin, spinning};
pub use api::{boot, introspect, pool};
pub use client::AsyncCall;
pub use context::after_reply::after_reply;
pub use context::attached::Attached;
pub use context::caller::{Caller, caller};
pub use context::error::{BootError, CallError, Fault};
pub use context::settings::{max_message, set_max_message};
pub use context::{deadline, shuttle, stats};
pub use lintel_macros::interface;
pub use object::async_handler::{Alerted, AsyncHandler, AsyncRequest, HandlerFuture};
pub use object::buffer::{self, Buffer, Loan, Loaned, Sealed, SealedWriter};
pub use object::door::{Door, FarHold, Handler, Reply, Request};
pub use object::in_place::InPlace;
pub use sys::{
    PEER_COPY_MAX, PEER_COPY_MIN, PEER_SENSED_MIN, PEER_STREAM_MAX, copy_bytes, copy_part_to_peer, copy_raw,
    copy_to_peer,
};
/// The tokio runtime handle async handlers run on ([`Door::create_async_on`]).
pub use tokio::runtime::Handle as RuntimeHandle;
