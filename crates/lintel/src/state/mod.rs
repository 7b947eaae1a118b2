//! Layer 2, plain state machines.
pub mod bulk;
pub mod call_area;
pub mod calls;
pub mod claim;
#[cfg(test)]
mod counting_waker;
pub mod grants;
pub mod handshake;
#[allow(unsafe_code)]
pub mod leaked;
pub mod lease;
#[cfg(test)]
#[allow(unsafe_code)]
mod model;
pub mod pace;
pub mod parked;
pub mod refs;
pub mod running;
pub mod sync;
pub mod unref;
pub mod workers;
