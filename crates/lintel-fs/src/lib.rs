//! lintel-fs: a file service that exports one host directory through
//! doors, and the client library that reads and writes it.
//!
//! The service ([`Service`]) is an ordinary lintel service: a manifest
//! places it in its own domain or in its clients' ([`register`] adds it to
//! a `lintel_boot` registry, configured by the manifest's
//! `[service.NAME]` table), and a client holding its door ([`Fs`]) opens
//! files ([`File`]) wherever it runs. Nothing a client
//! sends reaches outside the exported root; an export can be read-only.
//! Errors are [`FsError`]s, each with the errno a Unix program expects.
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
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod client;
mod credentials;
mod error;
mod keeper;
mod lock;
pub mod mapped;
mod node;
mod path;
pub mod proto;
mod readonly;
mod service;
mod session;
mod shm;
pub mod spliced;
pub mod token;
mod uffd;

pub use client::{File, Fs, IoPath, MAPPED_MAX, OpenOptions};
pub use error::FsError;
pub use proto::{Attr, DirEntry, FsStat, Kind, LockHolder, LockKind, SetTime, Stat, Timespec, Whence};
pub use service::{LOCK_TIMEOUT, MAX_EXPORT_PIPES, MAX_PIPES, MAX_SESSIONS, Service};
pub use shm::prefetch;
pub use spliced::SPLICE_MIN;

/// Register the file service as `name` in a `lintel_boot` registry. The
/// manifest configures it in `[service.NAME]`: `root`, the directory to
/// export (relative to the manifest's directory), and `read_only`
/// (default `false`).
///
/// ```toml
/// [domain.files]
/// services = ["fs"]
///
/// [service.fs]
/// root = "data"
/// read_only = false
/// ```
pub fn register(registry: &mut lintel_boot::Registry, name: &str) {
    registry.service(name, |ctx| {
        let root = ctx.setting_path("root").ok_or_else(|| {
            format!(
                "service `{}` needs a `root` setting: the directory to export",
                ctx.service()
            )
        })?;
        let read_only = match ctx.setting("read_only") {
            None | Some("false") => false,
            Some("true") => true,
            Some(v) => return Err(format!("read_only = {v}: expected true or false").into()),
        };
        let service =
            Service::new(&root, read_only).map_err(|e| format!("cannot export {}: {e}", root.display()))?;
        Ok(service.into_door())
    });
}

/// Poll `f` for up to 10 s (tests only).
#[cfg(test)]
pub(crate) fn test_eventually(mut f: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    false
}
