//! Layer 4, the objects.
pub mod async_handler;
#[allow(unsafe_code)] // views of loan and snapshot mappings
pub mod buffer;
pub mod conn;
pub mod door;
#[allow(unsafe_code)] // the room's bytes handed to the handler
pub mod in_place;
pub mod transfer;
