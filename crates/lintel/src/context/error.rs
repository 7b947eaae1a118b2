//! Errors of the transport, as a caller sees them. A service's own errors
//! travel in its reply data; these say what happened to the call itself.

use crate::abi;

/// Why a door call failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The domain serving the door exited or was killed, before or during the call.
    #[error("the domain serving this door died")]
    PeerDied,
    /// The door's server revoked it.
    #[error("the door was revoked by its server")]
    Revoked,
    /// Arguments or results exceed a domain's message limit
    /// ([`crate::max_message`]): the caller's, or the server's.
    #[error("{what} of {len} bytes exceeds the {max}-byte message limit")]
    TooLarge {
        /// "arguments" or "result".
        what: &'static str,
        /// Bytes given.
        len: usize,
        /// Bytes allowed.
        max: usize,
    },
    /// More doors than one call may carry.
    #[error("{len} doors exceed the limit of {max} per call")]
    TooManyDoors {
        /// Doors given.
        len: usize,
        /// Doors allowed.
        max: usize,
    },
    /// The door is not valid in the domain that was asked to serve it.
    #[error("the server does not know this door")]
    BadDoor,
    /// The peer sent something that does not follow the protocol.
    #[error("malformed message: {0}")]
    BadMessage(&'static str),
    /// The handler reported a fault with this code.
    #[error("the handler failed with code {0}")]
    Fault(u32),
    /// The handler panicked; the server domain lives on.
    #[error("the handler panicked")]
    Panicked,
    /// The call's deadline passed before its reply came. The server thread
    /// running it (and every call it made) was alerted; its late reply is
    /// discarded.
    #[error("the call's deadline passed")]
    TimedOut,
    /// The call was cancelled (`lintel::shuttle::ShuttleHandle::cancel`);
    /// the server side was alerted as for a deadline.
    #[error("the call was cancelled")]
    Cancelled,
    /// No room in this domain's loan arena for a loan of `len` bytes:
    /// loans lent out and not yet returned hold it (or `len` exceeds it).
    #[error(
        "no room for a loan of {len} bytes in the {arena}-byte loan arena (lent loans not yet returned hold it)"
    )]
    NoLoanSpace {
        /// Bytes asked for.
        len: usize,
        /// The arena's size.
        arena: usize,
    },
    /// This buffer cannot be passed (a peer's loan: copy it into a loan of
    /// your own).
    #[error("cannot pass this buffer: {0}")]
    Unpassable(&'static str),
    /// A blocking call, made on a thread of an async runtime, of a door
    /// this domain serves with an async handler: it would block the
    /// runtime its handler may need. Await it with `Door::call_async`.
    #[error("a blocking call on a runtime's thread of a door served by an async handler: await it instead")]
    WouldBlock,
    /// The local runtime could not do its part (e.g. out of descriptors).
    #[error("local failure: {0}")]
    Local(String),
}

impl CallError {
    /// Encode as a reply status word and detail word.
    pub(crate) fn to_status(&self) -> (u32, u32) {
        match self {
            CallError::Revoked => (abi::ST_REVOKED, 0),
            CallError::BadDoor => (abi::ST_BAD_DOOR, 0),
            CallError::TooLarge { max, .. } => (abi::ST_TOO_LARGE, (*max).min(u32::MAX as usize) as u32),
            CallError::Panicked => (abi::ST_PANICKED, 0),
            CallError::Fault(c) => (abi::ST_FAULT, *c),
            CallError::TimedOut => (abi::ST_TIMED_OUT, 0),
            // Errors a server never meets itself, only a forwarder relays:
            // the reserved fault codes that stand for them.
            CallError::PeerDied | CallError::Cancelled | CallError::WouldBlock => {
                (abi::ST_FAULT, Fault::relay(self).0)
            }
            // What the server refused.
            _ => (abi::ST_BAD_MESSAGE, 0),
        }
    }

    /// Decode a reply status the server wrote (any value, possibly hostile).
    pub(crate) fn from_status(status: u32, detail: u32) -> CallError {
        match status {
            abi::ST_REVOKED => CallError::Revoked,
            abi::ST_BAD_DOOR => CallError::BadDoor,
            abi::ST_TOO_LARGE => CallError::TooLarge {
                what: "result",
                len: 0,
                max: detail as usize,
            },
            abi::ST_PANICKED => CallError::Panicked,
            abi::ST_FAULT => Fault(detail).into(),
            abi::ST_TIMED_OUT => CallError::TimedOut,
            abi::ST_BAD_MESSAGE => CallError::BadMessage("the server refused the request"),
            _ => CallError::BadMessage("unknown reply status"),
        }
    }
}

/// A handler's failure, returned to the caller as [`CallError::Fault`].
///
/// Codes from [`Fault::RESERVED`] up stand for the transport's own errors:
/// a handler that forwards calls elsewhere (a proxy) fails its caller with
/// the error its own call met, made with [`Fault::relay`], and the caller
/// sees that [`CallError`] itself, as if it had called the far door.
///
/// ```
/// use lintel::{CallError, Fault};
/// assert_eq!(CallError::from(Fault::relay(&CallError::PeerDied)), CallError::PeerDied);
/// assert_eq!(CallError::from(Fault(7)), CallError::Fault(7));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("handler fault {0}")]
pub struct Fault(pub u32);

/// The reserved codes, in order from [`Fault::RESERVED`].
const RELAYED: [CallError; 8] = [
    CallError::PeerDied,
    CallError::Revoked,
    CallError::TimedOut,
    CallError::Cancelled,
    CallError::BadDoor,
    CallError::Panicked,
    CallError::TooManyDoors {
        len: 0,
        max: abi::MAX_DOORS,
    },
    CallError::BadMessage("the far side refused the request"),
];
/// A relayed [`CallError::TooLarge`] (the far side's limit is not told).
const RELAYED_TOO_LARGE: u32 = Fault::RESERVED + 0x80;
/// A relayed failure of the far side's runtime ([`CallError::Local`] and
/// the errors of a loan: what crosses is that it failed there).
const RELAYED_LOCAL: u32 = Fault::RESERVED + 0x81;
/// A relayed [`CallError::Unpassable`]: a buffer the forwarder could not
/// pass on (a file descriptor to another machine, say).
const RELAYED_UNPASSABLE: u32 = Fault::RESERVED + 0x82;
/// A relayed [`CallError::WouldBlock`] (also the code the blocking face of
/// an async door fails with).
pub(crate) const WOULD_BLOCK: u32 = u32::MAX;

impl Fault {
    /// The first reserved code: a handler's own codes are below it.
    pub const RESERVED: u32 = 0xFFFF_FF00;

    /// The fault that reaches this handler's caller as `err`: how a
    /// handler that forwards the call passes on what happened to it.
    /// A [`CallError::Fault`] passes unchanged.
    pub fn relay(err: &CallError) -> Fault {
        match err {
            CallError::Fault(c) => Fault(*c),
            CallError::TooLarge { .. } => Fault(RELAYED_TOO_LARGE),
            CallError::WouldBlock => Fault(WOULD_BLOCK),
            CallError::Unpassable(_) => Fault(RELAYED_UNPASSABLE),
            CallError::Local(_) | CallError::NoLoanSpace { .. } => Fault(RELAYED_LOCAL),
            other => {
                let tag = std::mem::discriminant(other);
                let at = RELAYED.iter().position(|e| std::mem::discriminant(e) == tag);
                Fault(Fault::RESERVED + at.expect("every other error is listed") as u32)
            }
        }
    }
}

/// The reserved code of a relayed [`CallError::TimedOut`].
pub(crate) fn relayed_timed_out() -> u32 {
    Fault::relay(&CallError::TimedOut).0
}

impl From<Fault> for CallError {
    fn from(Fault(code): Fault) -> CallError {
        match code {
            c if c < Fault::RESERVED => CallError::Fault(c),
            WOULD_BLOCK => CallError::WouldBlock,
            RELAYED_TOO_LARGE => CallError::TooLarge {
                what: "result",
                len: 0,
                max: 0,
            },
            RELAYED_LOCAL => CallError::Local("the far side failed the call".into()),
            RELAYED_UNPASSABLE => CallError::Unpassable("a buffer the server's side could not pass on"),
            c => RELAYED
                .get((c - Fault::RESERVED) as usize)
                .cloned()
                .unwrap_or(CallError::Fault(c)),
        }
    }
}

/// Why starting or joining a domain failed.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// `join` in a process that `spawn` did not start (no boot descriptor).
    #[error("this process was not started by lintel::boot::spawn")]
    NotSpawned,
    /// A system call of the boot handshake failed.
    #[error("boot failed: {0}")]
    Io(#[from] std::io::Error),
    /// The other side speaks another version of the protocol (it runs
    /// another build of lintel); the connection was refused.
    #[error("the peer speaks protocol version {theirs}, this domain {ours}")]
    Version {
        /// This domain's version ([`crate::abi::VERSION`]).
        ours: u32,
        /// The version the peer said it speaks.
        theirs: u32,
    },
    /// The other side did not follow the boot handshake.
    #[error("boot protocol: {0}")]
    Protocol(&'static str),
    /// The handshake's call that passes the initial doors failed.
    #[error("passing the initial doors failed: {0}")]
    Call(#[from] CallError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relayed_error_reaches_the_caller_as_itself_or_its_kind() {
        for e in RELAYED
            .iter()
            .chain([&CallError::Fault(3), &CallError::WouldBlock])
        {
            assert_eq!(&CallError::from(Fault::relay(e)), e);
        }
        let kind = |e: &CallError| std::mem::discriminant(e);
        for e in [
            CallError::TooLarge {
                what: "arguments",
                len: 9,
                max: 8,
            },
            CallError::Unpassable("a descriptor"),
            CallError::Local("x".into()),
        ] {
            assert_eq!(kind(&CallError::from(Fault::relay(&e))), kind(&e), "{e:?}");
        }
        assert!(Fault::relay(&CallError::PeerDied).0 >= Fault::RESERVED);
    }
}
