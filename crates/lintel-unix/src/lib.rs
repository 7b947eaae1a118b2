//! lintel-unix: running unmodified programs with their file I/O served by
//! lintel (Mach 3.0's trap emulation and emulation library). This crate
//! holds its first piece so far, [`trap`]: catching a thread's system
//! calls with Linux's syscall user dispatch and answering them in the
//! process. The preload library and the launcher build on it (see
//! `docs/unix-emulation.md` for the plan).
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(target_arch = "x86_64")]
pub mod trap;
