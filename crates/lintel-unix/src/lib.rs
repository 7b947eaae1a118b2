//! lintel-unix: running unmodified programs with their file I/O served by
//! lintel's file service (Mach 3.0's trap emulation and emulation
//! library).
//!
//! `lintel-run --root DIR --prefix /PATH -- PROGRAM ARGS` (crate
//! `lintel-preload`) exports DIR and runs PROGRAM with the emulation
//! library preloaded: every system call of the
//! program's threads is trapped ([`trap`], syscall user dispatch) and
//! those that name a path under the prefix or a descriptor the library
//! serves are answered through `lintel_fs` ([`emulate`]); the rest go to
//! the kernel unchanged. The plan, and what is not built yet, are in
//! `docs/unix-emulation.md`.
#![warn(missing_docs)]
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(target_arch = "x86_64")]
pub mod emulate;
pub mod env;
pub mod fdtable;
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
pub mod image;
pub mod links;
pub mod paths;
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
pub mod trap;
pub mod user;

pub use env::{
    ENV_EXEC, ENV_FD_FLOOR, ENV_FRESH, ENV_HOST, ENV_PREFIX, ENV_REBIND, ENV_SERVICE, ENV_SOCKET, ENV_STATIC,
    choose_descriptor_floor,
};
