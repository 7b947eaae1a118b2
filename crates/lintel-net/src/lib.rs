//! Doors across machines: Spring's network proxies, carried by Cap'n
//! Proto RPC.
//!
//! A [`Proxy`] runs links to other machines' proxies. Each link exports
//! chosen doors of this side by name ([`Exports`]) and imports the far
//! side's ([`Remote::lookup`]) as doors served here by the proxy: callers
//! cannot tell them from any other door (same calls, same typed clients,
//! same errors, [`lintel::CallError::PeerDied`] when the far side is gone).
//!
//! What crosses, and how (the schema is `schema/lintel.capnp`):
//! - a door is a Cap'n Proto capability, passed with calls and replies
//!   both ways; one that comes back to the side it was made on is the
//!   original door again. A door of a third machine passes through the
//!   proxies between (the Rust RPC system has no three-party handoff);
//! - the last remote holder's release is a `Release`, and the server
//!   hears `unreferenced` as for a local holder;
//! - the time left before the caller's deadline travels with the call; a
//!   caller alerted (cancelled, timed out, dead) cancels the far call
//!   (`Finish`), whose server thread is alerted;
//! - bytes cross as bytes, and bulk buffers (loans, sealed snapshots)
//!   arrive on the far side as sealed snapshots of their bytes; a file
//!   descriptor cannot cross ([`lintel::CallError::Unpassable`]);
//! - a lost link, or one whose keepalive goes unanswered
//!   ([`LinkOptions::keepalive`], default 1 s), fails every call on its
//!   imports with `PeerDied`.
//!
//! Links are TLS with certificates on both ends ([`Tls`]), or plain TCP
//! when the options say so ([`LinkOptions::plain`]).
#![deny(unsafe_code)]

mod crossing;
mod error;
mod exported;
mod imported;
mod link;
mod named;
/// The code the Cap'n Proto compiler generates from `schema/lintel.capnp`
/// (`tests/schema.rs` checks it is current).
#[allow(clippy::all, missing_docs, unused_qualifications)]
#[rustfmt::skip]
pub mod lintel_capnp;
mod outcome;
mod proxy;
mod tls;

pub use error::NetError;
pub use exported::Exports;
pub use link::{LinkOptions, Security};
pub use named::Endpoint;
pub use proxy::{Listener, Proxy, Remote};
pub use tls::Tls;
