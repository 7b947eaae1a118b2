//! The file service: one host directory, exported through doors. It
//! builds on `proto` (and the crate's `uffd`, and `lintel-sys`), never on
//! `client`.
//!
//! Every path a client sends is resolved by the kernel beneath the export's
//! root (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`), so `..`,
//! absolute paths and symlinks that leave the root fail with
//! [`FsError::Escapes`](crate::FsError::Escapes), and so do races that
//! rename a directory out from under a lookup: the kernel checks the whole
//! walk, not a string. Calls that act on a name in a directory (`mkdir`,
//! `unlink`, `rename`, …) resolve the parent beneath the root and then act
//! on one name in it.
//!
//! Each open is a host file description of the service's and a door of its
//! own (`OpenFileServer`), whose datum names it; the door's holders share
//! its offset. The service keeps the offset itself and reads and writes
//! with `pread` and `pwrite` under the open's lock, so concurrent `read`s
//! through one door each get their own bytes, as they would on one Unix
//! file description. Opens of one file share a node: its token and its
//! page cache for mapped windows (`session`); every copy-path call first
//! takes the token back from any client that holds it, so the host file
//! is current for the copy path.
//!
//! The modules, each using only those listed after it (a DAG):
//!
//! - `register`: the service in a `lintel_system` registry. Uses `export`.
//! - `export`: [`Service`] and the [`Export`](crate::proto::Export) door:
//!   paths, opens, the namespace, sessions started. Uses `session`,
//!   `open`, `nodes`, `node`, `splice`, `host`, `path`, `readonly`,
//!   `credentials`, `tally`.
//! - `session`: a client process's mapped windows: its shared page, its
//!   pager thread, token grants ([`Session`](crate::proto::Session)). It
//!   makes the token's holder (`session::Holder`), which the node sees
//!   only as a `node::TokenHolder`. Uses `open`, `node`, `host`,
//!   `credentials`, `tally`.
//! - `open`: one open file description and its
//!   [`OpenFile`](crate::proto::OpenFile) door (the copy path), and the
//!   export's table of them. Uses `nodes`, `node`, `splice`, `host`,
//!   `lock`, `readonly`, `credentials`, `tally`.
//! - `nodes`: the export's nodes by file, each found only while an open
//!   claims it (inode numbers are reused). Uses `node`.
//! - `node`: one file as every open of it shares it: who holds its token
//!   (behind the `TokenHolder` trait) and its page cache; taking the
//!   token back writes the holder's bytes to the host. Uses `tally`.
//! - `splice`: the pipes clients attach for spliced reads, and the splice.
//!   Uses `tally`.
//! - Leaves: `host` (host calls on a descriptor: reopen, stat, list, set
//!   attributes), `path` (checking and splitting client paths), `lock`
//!   (byte-range and `flock` locks), `readonly` (a file on a read-only
//!   mount of its own), `credentials` (the caller's ids, taken on for a
//!   call), `tally` (the counters), `weak_map` (weak references swept as
//!   the map grows).

mod credentials;
mod export;
mod host;
mod node;
mod nodes;
mod open;
mod path;
mod readonly;
mod register;
mod session;
mod splice;
mod tally;
mod weak_map;

pub use export::{LOCK_TIMEOUT, MAP_AHEAD, MAX_SESSIONS, Service};
pub use register::register;
pub use splice::{MAX_EXPORT_PIPES, MAX_PIPES};
