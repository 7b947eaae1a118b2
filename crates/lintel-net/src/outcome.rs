//! A call's outcome on the wire: lintel's [`CallError`] as the schema's
//! `Failure`, and the errors of the RPC system itself as lintel's.

use capnp::ErrorKind;
use lintel::CallError;

use crate::lintel_capnp::failure::{self, Kind};

/// Write `err` into a `Failure`.
pub(crate) fn write_failure(err: &CallError, mut f: failure::Builder<'_>) {
    let (kind, code) = match err {
        CallError::Fault(c) => (Kind::Fault, *c),
        CallError::PeerDied => (Kind::PeerDied, 0),
        CallError::Revoked => (Kind::Revoked, 0),
        CallError::TimedOut => (Kind::TimedOut, 0),
        CallError::Cancelled => (Kind::Cancelled, 0),
        CallError::BadDoor => (Kind::BadDoor, 0),
        CallError::Panicked => (Kind::Panicked, 0),
        CallError::TooLarge { max, .. } => (Kind::TooLarge, (*max).min(u32::MAX as usize) as u32),
        CallError::TooManyDoors { max, .. } => (Kind::TooManyDoors, (*max).min(u32::MAX as usize) as u32),
        CallError::BadMessage(_) => (Kind::BadMessage, 0),
        CallError::WouldBlock
        | CallError::Local(_)
        | CallError::NoLoanSpace { .. }
        | CallError::Unpassable(_) => (Kind::Local, 0),
    };
    f.set_kind(kind);
    f.set_code(code);
    f.set_message(err.to_string());
}

/// Whether a `Failure` says the call never reached a server (its door's
/// server was gone before it came).
pub(crate) fn undelivered(f: failure::Reader<'_>) -> bool {
    matches!(f.get_kind(), Ok(Kind::Gone))
}

/// Write the failure of a call that reached no server: its door's server
/// was gone before it came.
pub(crate) fn write_gone(mut f: failure::Builder<'_>) {
    f.set_kind(Kind::Gone);
    f.set_message("the door's server was gone before the call");
}

/// The error a `Failure` stands for (any value a peer sent).
pub(crate) fn read_failure(f: failure::Reader<'_>) -> CallError {
    let code = f.get_code();
    match f.get_kind() {
        Ok(Kind::Fault) => CallError::Fault(code),
        Ok(Kind::PeerDied) => CallError::PeerDied,
        Ok(Kind::Revoked) => CallError::Revoked,
        Ok(Kind::TimedOut) => CallError::TimedOut,
        Ok(Kind::Cancelled) => CallError::Cancelled,
        Ok(Kind::BadDoor) => CallError::BadDoor,
        Ok(Kind::Panicked) => CallError::Panicked,
        Ok(Kind::TooLarge) => CallError::TooLarge {
            what: "result",
            len: 0,
            max: code as usize,
        },
        Ok(Kind::TooManyDoors) => CallError::TooManyDoors {
            len: 0,
            max: code as usize,
        },
        Ok(Kind::BadMessage) => CallError::BadMessage("the far side refused the request"),
        Ok(Kind::Local) => CallError::Local(format!(
            "the far side failed the call: {}",
            f.get_message().ok().and_then(|m| m.to_str().ok()).unwrap_or("")
        )),
        Ok(Kind::Gone) => CallError::PeerDied,
        Err(_) => CallError::BadMessage("the far side sent an unknown failure"),
    }
}

/// What an error of the RPC system means to a lintel caller: a connection
/// lost is the far domain's death; anything else, a message the far side
/// could not take (or sent wrong).
pub(crate) fn from_rpc(e: &capnp::Error) -> CallError {
    match e.kind {
        ErrorKind::Disconnected => CallError::PeerDied,
        _ => CallError::BadMessage("the link failed the call"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_crosses_as_itself_or_as_said() {
        let errors = [
            CallError::Fault(17),
            CallError::PeerDied,
            CallError::Revoked,
            CallError::TimedOut,
            CallError::Cancelled,
            CallError::BadDoor,
            CallError::Panicked,
            CallError::TooLarge {
                what: "result",
                len: 0,
                max: 4096,
            },
            CallError::TooManyDoors { len: 0, max: 64 },
        ];
        for e in errors {
            let mut m = capnp::message::Builder::new_default();
            write_failure(&e, m.init_root());
            let back = read_failure(m.get_root_as_reader().unwrap());
            assert_eq!(back, e);
        }
        let mut m = capnp::message::Builder::new_default();
        write_failure(&CallError::Local("x".into()), m.init_root());
        assert!(matches!(
            read_failure(m.get_root_as_reader().unwrap()),
            CallError::Local(_)
        ));
    }

    #[test]
    fn a_lost_connection_is_the_peer_s_death() {
        assert_eq!(
            from_rpc(&capnp::Error::disconnected("gone".into())),
            CallError::PeerDied
        );
        assert!(matches!(
            from_rpc(&capnp::Error::failed("no".into())),
            CallError::BadMessage(_)
        ));
    }
}
