//! Layer 1, the machine: the system calls and mappings of `lintel-sys`
//! (re-exported here, so the runtime names them `sys::…`), memory a peer
//! can write (`umem`), asymmetric fences between this process's threads
//! (`fence`), and bounded spinning (`spin`).

pub mod fence;
#[allow(unsafe_code)] // registering a descriptor with the runtime's reactor
pub mod notices;
pub mod spin;
#[allow(unsafe_code)]
pub mod umem;

pub use lintel_sys::*;
