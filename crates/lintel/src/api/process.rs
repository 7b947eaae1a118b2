//! The process around the runtime: where its descriptors go, and what a
//! forked child must do before it uses lintel.

/// Keep the runtime's own descriptors (sockets, memfds, eventfds, epoll,
/// pidfds, and every descriptor a peer sends) at `floor` or above, when
/// the kernel has room there. For a process whose code chooses descriptor
/// numbers itself (a shell's `exec 3<file`, `dup2`, `closefrom`): the
/// emulation library sets it, and keeps the program below it. Affects
/// descriptors made from now on; 0 (the default) leaves them where the
/// kernel puts them.
///
/// ```
/// lintel::set_descriptor_floor(0);
/// assert_eq!(lintel::descriptor_floor(), 0);
/// ```
pub fn set_descriptor_floor(floor: i32) {
    crate::sys::set_descriptor_floor(floor)
}

/// The floor [`set_descriptor_floor`] set (0 if none).
pub fn descriptor_floor() -> i32 {
    crate::sys::descriptor_floor()
}

/// `fd` moved to the floor or above (see [`set_descriptor_floor`]), for
/// libraries that keep descriptors of their own beside the runtime's.
pub fn above_descriptor_floor(fd: std::os::fd::OwnedFd) -> std::os::fd::OwnedFd {
    crate::sys::above_floor(fd)
}

/// Call in a child made by `fork` (one that does not `exec` at once),
/// before it uses lintel: the parent's connections stay the parent's
/// (their memory is shared with it, and their threads are not in the
/// child), and the child gets a domain of its own. Doors the child held
/// from before the fork that lead to other domains fail with
/// [`CallError::PeerDied`](crate::CallError::PeerDied); doors it serves itself keep working
/// co-located; it can `boot::connect` anew. Loans cannot be made in such
/// a child (the pool is the parent's). Without this call a forked child
/// that uses lintel corrupts its parent's calls.
///
/// ```no_run
/// // SAFETY (of the fork): the child only calls async-signal-safe code
/// // and lintel::after_fork before exiting.
/// let pid = unsafe { libc::fork() };
/// if pid == 0 {
///     lintel::after_fork();
///     // ... connect again, call, then exit
///     std::process::exit(0);
/// }
/// ```
pub fn after_fork() {
    crate::context::stats::after_fork();
    crate::object::buffer::forked();
    crate::state::unref::after_fork();
    crate::state::running::after_fork();
    crate::client::forget_thread_leases();
    crate::domain::after_fork()
}

/// Wait until no call that process `pid` made into this process still
/// runs, once `pid` has died; false if `timeout` passed first. A server
/// runs a call it has begun to its end even when its caller dies
/// meanwhile (a call not yet begun is dropped), so a process that reaps a
/// killed client and then looks at what the client's calls change (files
/// a service writes, say) calls this first, as Linux guarantees of a
/// killed process's system calls once it is reaped. Returns at once for a
/// process that is alive or made no call here.
///
/// ```
/// # use std::time::Duration;
/// // A child that called nothing here: nothing to wait for.
/// let mut child = std::process::Command::new("true").spawn().unwrap();
/// child.wait().unwrap();
/// assert!(lintel::settle_dead(child.id(), Duration::from_secs(1)));
/// ```
pub fn settle_dead(pid: u32, timeout: std::time::Duration) -> bool {
    crate::domain::get().settle_dead(pid, std::time::Instant::now() + timeout)
}
