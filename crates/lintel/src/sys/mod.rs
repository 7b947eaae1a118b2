//! Layer 1, the machine: the system calls and mappings of `lintel-sys`
//! (re-exported here, so the runtime names them `sys::…`), memory a peer
//! can write (`umem`), asymmetric fences between this process's threads
//! (`fence`), bounded spinning (`spin`), and when a spinning side moves
//! off its peer's CPU (`step_off`).

pub mod fence;
#[allow(unsafe_code)] // registering a descriptor with the runtime's reactor
pub mod notices;
pub mod spin;
pub mod step_off;
#[allow(unsafe_code)]
pub mod umem;

pub use lintel_sys::*;
