//! Layer 7, the public entry points: the only modules that look the
//! process-wide domain up (`domain::get`).
pub mod boot;
pub mod introspect;
pub mod pool;
pub mod process;
pub mod tuning;
