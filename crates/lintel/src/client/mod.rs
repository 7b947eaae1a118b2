//! Layer 5, the caller's side of a call.
pub mod call;
mod checked;
pub mod fast;
mod held;
#[allow(unsafe_code)]
mod last;
mod wait;

pub(crate) use checked::{call_checked, call_with};
pub(crate) use held::forget_thread_leases;
