//! Layer 5, the caller's side of a call.
pub mod call;
pub mod channel;
