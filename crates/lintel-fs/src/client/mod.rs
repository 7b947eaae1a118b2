//! The client library: [`Fs`] for an export's namespace, [`File`] for an
//! open file, with the `std::io` traits a Rust program expects.
//!
//! A [`File`] picks its path per call ([`IoPath`]):
//! - **mapped** (Mach's mapped files): reads, writes, seeks and `stat` of
//!   a regular file opened for reading go through a window of the file's
//!   pages mapped into this process, guarded by a token in a page shared
//!   with the service ([`mapped`]); no call while the window covers
//!   the access and the token is here. A handle takes its window at its
//!   [`ATTACH_AFTER`]th read or write, or after [`ATTACH_AFTER_BYTES`], or
//!   at its first once a `stat` through it found the file [`ATTACH_LARGE`]:
//!   one used less pays through calls;
//! - **copy** (CHORUS's `sgRead`/`sgWrite`): one call on the file's door,
//!   data above the vanilla path's size through lintel's bulk segments;
//!   for calls above [`MAPPED_MAX`] bytes, for files that cannot be
//!   mapped, and whenever the mapped path is unavailable. Reads of
//!   [`SPLICE_MIN`] bytes or more come through a pipe instead, spliced
//!   into it by the service ([`spliced`]): one copy, as a native
//!   `read` makes. A mapped file whose token is here reads ahead in its
//!   pipe at the shared offset: a call per pipeful, not per read
//!   ([`mapped`]);
//! - **direct**: a handle that writes at an offset before it takes a
//!   window asks for the open's own descriptor of the host file, and
//!   reads and writes at offsets and syncs through it, with no call,
//!   where the file has no cache (`direct`); the file then gets no
//!   window while it stays open anywhere.
//!
//! It builds on `proto` (and the crate's `uffd`, and `lintel-sys`), never on
//! `service`. The modules:
//!
//! - `fs`: [`Fs`], an export's namespace: opening files and the calls
//!   that name a path.
//! - `file`: [`File`], an open file, choosing its path per call;
//!   [`OpenOptions`] and [`IoPath`].
//! - [`mapped`]: mapped windows: this process's session with an export,
//!   its watcher, and per file the mapping of the file's cache.
//! - `direct`: a handle's own descriptor of the host file.
//! - `keeper`: what a client writes back itself when its service dies
//!   holding its window writes.
//! - [`spliced`]: the client's side of spliced reads (its pipe).
//! - `credentials`: the process's changes of credentials, which each
//!   service is told of before its next call.
//! - `reaped`: children the process reaped, whose calls each service
//!   finishes before the process's next call that names a path.
//!
//! `fs` uses `file`, `mapped`, `credentials` and `reaped`; `file` uses `mapped`,
//! `direct`, `spliced` and `credentials`; `mapped` uses `keeper`, `spliced`
//! and `direct` (its reads of the host file).

mod credentials;
mod direct;
mod file;
mod fs;
mod keeper;
pub mod mapped;
mod read_ahead;
mod reaped;
pub mod spliced;

pub use file::{
    ATTACH_AFTER, ATTACH_AFTER_BYTES, ATTACH_LARGE, File, IoPath, MAPPED_MAX, MAX_RW_COUNT, OpenOptions,
    STREAM_MIN, past_largest_offset,
};
pub use fs::Fs;
pub use spliced::SPLICE_MIN;
