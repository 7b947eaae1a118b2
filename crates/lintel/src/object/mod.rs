//! Layer 4, the objects.
pub mod buffer;
pub mod conn;
pub mod door;
pub mod transfer;
