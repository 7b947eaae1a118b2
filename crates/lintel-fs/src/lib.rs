//! lintel-fs: a file service that exports one host directory through
//! doors, and the client library that reads and writes it.
//!
//! The service ([`Service`]) is an ordinary lintel service: a manifest
//! places it in its own domain or in its clients' ([`register`] adds it to
//! a `lintel_system` registry, configured by the manifest's
//! `[service.NAME]` table), and a client holding its door ([`Fs`]) opens
//! files ([`File`]) wherever it runs. Nothing a client
//! sends reaches outside the exported root; an export can be read-only.
//! Errors are [`FsError`]s, each with the errno a Unix program expects.
//!
//! The crate is three folders and two low-level modules:
//!
//! - `proto/` ([`proto`]): what crosses between client and service: the
//!   door interfaces and their values, [`FsError`], and the page a
//!   client's session shares with the service, with the token protocol
//!   over it ([`token`]). It names neither side.
//! - `client/`: [`Fs`], [`File`], [`OpenOptions`], mapped windows
//!   ([`mapped`]) and spliced reads ([`spliced`]). Uses `proto`, never
//!   `service`.
//! - `service/`: [`Service`] and everything behind its doors (opens,
//!   nodes, sessions and their pager, locks, credentials). Uses `proto`,
//!   never `client`.
//! - `uffd` (userfaultfd), beneath all three; shared mappings and futex
//!   words are `lintel-sys`'s.
//!
//! `crates/lintel-tests/tests/layers.rs` checks that `client` and
//! `service` never name each other, and `proto` neither.
//!
//! ```
//! use std::io::{Read, Seek, SeekFrom, Write};
//! let dir = std::env::temp_dir().join(format!("lintel-fs-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let fs = lintel_fs::Fs::from_door(lintel_fs::Service::new(&dir, false).unwrap().into_door());
//!
//! let rw = lintel_fs::OpenOptions::new().read(true).write(true).create(true).clone();
//! let mut f = fs.open_with("hello.txt", &rw).unwrap();
//! f.write_all(b"hello, world").unwrap();
//! f.seek(SeekFrom::Start(7)).unwrap();
//! let mut s = String::new();
//! f.read_to_string(&mut s).unwrap();
//! assert_eq!(s, "world");
//! assert_eq!(fs.stat("hello.txt").unwrap().size, 12);
//! assert_eq!(fs.open("../x").unwrap_err().errno(), 18); // EXDEV: outside the export
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```
#![warn(missing_docs)]
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod client;
pub mod proto;
mod service;
mod uffd;

pub use client::{
    ATTACH_AFTER, ATTACH_AFTER_BYTES, ATTACH_LARGE, File, Fs, IoPath, MAPPED_MAX, MAX_RW_COUNT, OpenOptions,
    SPLICE_MIN, STREAM_MIN, mapped, past_largest_offset, spliced,
};
pub use lintel_sys::prefetch;
pub use proto::{
    Attr, DirEntry, FsError, FsStat, Kind, LockHolder, LockKind, SetTime, Stat, Timespec, Whence, token,
};
pub use service::{LOCK_TIMEOUT, MAP_AHEAD, MAX_EXPORT_PIPES, MAX_PIPES, MAX_SESSIONS, Service, register};
