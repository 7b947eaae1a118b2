//! Who made the call a handler runs: the process the kernel names as the
//! connection's peer, published per server thread while it serves.

/// Another process whose call a server thread is serving: the peer of the
/// connection the call came in on, as the kernel named it when the
/// connection was made (`SO_PEERCRED`), never as the peer claims.
///
/// A server that acts on a caller's behalf (a file service checking
/// permissions with the caller's credentials, say) asks [`caller`] which
/// process that is. A thread binds to one caller's slot at a time, so this
/// costs a call nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    pub(crate) connection: u64,
    pub(crate) pid: u32,
}

impl Caller {
    /// The calling process, if the kernel vouched for it when the
    /// connection was made (a connection made any other way names none).
    pub fn pid(&self) -> Option<u32> {
        (self.pid != 0).then_some(self.pid)
    }

    /// The connection the call came in on: one per peer process and
    /// domain, never reused while this domain lives (what a server keys
    /// per-caller state by; a pid may be reused after its process dies).
    pub fn connection(&self) -> u64 {
        self.connection
    }
}

thread_local! {
    static CALLER: std::cell::Cell<Option<Caller>> = const { std::cell::Cell::new(None) };
}

/// The process whose call this thread is serving, or `None` when it serves
/// none from another process: a co-located call runs on its caller's own
/// thread, so it is this process's (a co-located call made from a handler
/// of a remote call is still on that remote caller's behalf: identity
/// follows the thread, as the call does).
///
/// ```
/// let door = lintel::Door::create(0, |_req: lintel::Request<'_>, reply: &mut lintel::Reply| {
///     // Called from this process: no other caller.
///     assert!(lintel::caller().is_none());
///     reply.data.push(1);
///     Ok(())
/// });
/// assert_eq!(door.call_bytes(b"").unwrap(), [1]);
/// ```
pub fn caller() -> Option<Caller> {
    CALLER.get()
}

/// This thread serves `who`'s calls until the guard drops.
pub(crate) fn serving_for(who: Caller) -> impl Drop {
    struct Serving;
    impl Drop for Serving {
        fn drop(&mut self) {
            CALLER.set(None);
        }
    }
    CALLER.set(Some(who));
    Serving
}
