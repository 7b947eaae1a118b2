//! Layer 5, the caller's side of a call: LRPC channels.
//!
//! [`call`] picks the path: a door served here runs its handler on the
//! caller's thread; one served by another domain goes through that
//! connection's channel. There each client thread leases one slot of the
//! connection's call area the first time it calls over that connection and
//! keeps it while it keeps calling, so a server thread bound to the slot is
//! ready for it: direct hand-off with no queue in between. A thread that
//! stops calling loses its slot to any newcomer that needs one
//! (`state::lease`).
//!
//! - [`fast`]: the fast path, entered at [`fast::call`] (its chain is drawn
//!   at the top of the file);
//! - `checked`: every other call, and the vanilla path;
//! - `wait`: posting the request and waiting for the reply (spin, then
//!   futex), abandoning a call whose deadline passed;
//! - `lease`, `held` and `last`: one lease of a slot, this thread's
//!   leases, and the last call's, which the fast path borrows without a
//!   count (the `unsafe` is in `last`).
mod awaited;
pub mod call;
mod checked;
#[allow(unsafe_code)] // the borrow of the last call's lease (see `last`)
pub mod fast;
mod held;
#[allow(unsafe_code)]
mod last;
mod lease;
mod wait;

pub use awaited::AsyncCall;
pub(crate) use checked::{call_checked, call_in_place, call_with};
pub(crate) use held::{forget_thread_leases, prepare_calls};
