//! The protocol: everything that crosses between a client and the service,
//! and the rules both sides follow over it. Both `client` and `service`
//! build on this folder; it names neither.
//!
//! - `interfaces`: the three door interfaces, [`Export`] (an exported
//!   directory), [`OpenFile`] (one open file description) and [`Session`]
//!   (a client process's mapped windows), with their generated clients
//!   and servers.
//! - `types`: the values they carry ([`Stat`], [`DirEntry`], [`Attr`], …).
//! - `error`: [`FsError`], the one error of every call, with its errno.
//! - [`token`]: the page a session shares (descriptor layout, token
//!   states) and the token and share-lock protocol over it, as plain
//!   functions each side calls.
//! - `write_back`: what taking a token back writes to the host file
//!   (the service's recall and a client's own write-back both run it).

mod error;
mod interfaces;
pub(crate) mod lock;
pub mod token;
mod types;
pub(crate) mod write_back;

pub use error::FsError;
pub use interfaces::{
    Attached, Export, ExportClient, ExportServer, OpenFile, OpenFileClient, OpenFileServer, Session,
    SessionClient, SessionServer,
};
pub(crate) use interfaces::{MAX_WINDOW, MIN_WINDOW};
pub use types::{
    Attr, Counters, DirEntry, FsStat, Kind, LockHolder, LockKind, MAX_IO, SetTime, Stat, Timespec, Whence,
};
