//! lintel-sys: the one layer of system calls and mappings every lintel
//! crate uses (the runtime, the file service, the emulation library, the
//! benchmark): futexes on shared words, memfds sealed against a peer,
//! shared mappings and copies in and out of them, sockets that carry
//! descriptors, epoll, the clock and the CPU, and the kernel's plain data.
//!
//! Thin wrappers over `rustix` (and `libc` where rustix has no call, or
//! its own does not work under valgrind), each saying what the kernel
//! guarantees that callers rely on. Most of the `unsafe` of the project
//! is here, each block with the invariant it relies on; the crates above
//! deny `unsafe_code` but for named modules.
//!
//! ```
//! use std::sync::atomic::Ordering;
//! let fd = lintel_sys::shared_memfd("doc", 4096).unwrap();
//! let a = lintel_sys::Mapping::map_shared(&fd, 4096, true).unwrap();
//! let b = lintel_sys::Mapping::map_shared(&fd, 4096, false).unwrap();
//! a.u32(64).store(7, Ordering::Release);
//! assert_eq!(b.u32(64).load(Ordering::Acquire), 7);
//! ```
#![warn(missing_docs)]
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[allow(unsafe_code)]
pub mod copy;
#[allow(unsafe_code)]
pub mod cpu;
#[allow(unsafe_code)]
pub mod dir;
pub mod distance;
#[allow(unsafe_code)]
pub mod fd;
#[allow(unsafe_code)]
pub mod futex;
#[allow(unsafe_code)]
pub mod mapping;
pub mod memfd;
#[allow(unsafe_code)]
pub mod pod;
pub mod poll;
pub mod socket;

pub use copy::{
    PEER_COPY_MAX, PEER_COPY_MIN, PEER_STREAM_MAX, copy_around, copy_bytes, copy_from_shared,
    copy_part_to_peer, copy_raw, copy_to_peer, extend_bytes, pread_append,
};
#[cfg(target_arch = "x86_64")]
pub use cpu::tsc;
pub use cpu::{current_cpu, membarrier, membarrier_register, monotonic_ns, move_off_cpu, prefetch};
pub use dir::getdents;
pub use distance::PEER_SENSED_MIN;
pub use fd::{
    above_floor, clear_cloexec, descriptor_floor, eventfd, eventfd_clear, eventfd_signal, inherit_fd, inode,
    pidfd, readable, replace_fd, set_descriptor_floor, take_inherited, take_inherited_socket,
};
pub use futex::{futex_wait, futex_wake, futex_wake_addr};
pub use mapping::{Mapping, shared_memfd};
pub use memfd::{
    check_sealed_memfd, check_segment, check_snapshot, seal_snapshot, sealed_memfd, snapshot_memfd,
};
pub use poll::Poller;
pub use socket::{
    MAX_FDS_PER_MSG, Recv, peer_pid, recv_msg, send_msg, seqpacket_accept, seqpacket_connect,
    seqpacket_listen, seqpacket_pair, set_passcred,
};
