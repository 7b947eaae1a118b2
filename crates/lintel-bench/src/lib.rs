//! lintel-bench as a library: the [`harness`] every suite uses, and the suites themselves.
//! The binary (`main.rs`) registers suites and child roles by name and runs them.
#![forbid(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod awaited;
pub mod baseline;
pub mod bulk;
pub mod door;
pub mod echo;
pub mod fs;
pub mod grpc;
pub mod harness;
pub mod lrpc;
pub mod markdown;
pub mod net;
pub mod payload;
pub mod placement;
pub mod plot;
pub mod recovery;
pub mod scale;
pub mod unix;
