//! Control messages on a connection's socket. Calls themselves go through
//! the shared call area; the socket carries setup, wake-ups for unbound
//! slots, alerts, reference releases and anything with file descriptors.
//! Encoded with postcard; a message that does not decode is dropped.
//!
//! [`Ctl::Hello`] is the first variant and its fields never change, so a
//! domain of any version can read another's version and refuse it.

use serde::{Deserialize, Serialize};

use crate::descriptor::DoorDescriptor;

/// Largest control message accepted.
pub const MAX_CTL: usize = 16 * 1024;

#[derive(Debug, Serialize, Deserialize)]
pub enum Ctl {
    /// First message on every connection: the sender's pid (as it claims
    /// it; the kernel's word is taken where it matters) and [`VERSION`](crate::VERSION).
    Hello { pid: u32, version: u32 },
    /// Carries the sender's call area (a memfd) for its calls to us, and
    /// the socket (`SOCK_DGRAM`) on which we send notices to its parked calls.
    Area,
    /// A request waits in `slot` of the sender's area and no thread is bound.
    Kick { slot: u32 },
    /// The caller using `slot` of the sender's area was alerted during its
    /// call `seq` (which may not have reached a server thread yet).
    Alert { slot: u32, seq: u32 },
    /// The sender dropped a door we granted it, received `count` times.
    Release { grant: u32, count: u32 },
    /// Make a ticket for the door the sender holds as `grant`.
    Mint { req: u64, grant: u32 },
    /// The ticket (one fd), or none if the grant was not valid.
    Minted { req: u64, ok: bool },
    /// Redeem the attached ticket (no fd: the ticket this connection grew from).
    Redeem { req: u64 },
    /// The redeemed door's grant index on this connection.
    Redeemed { req: u64, grant: Option<u32> },
    /// Ticket fds for third-party doors in a call: `request` says whether the
    /// slot is in the sender's area (a request) or the receiver's (a reply).
    Tickets { request: bool, slot: u32, seq: u32 },
    /// Initial doors at boot (tickets attached for third-party ones).
    Boot { doors: Vec<DoorDescriptor> },
    /// Several [`Ctl::Release`]s at once: `(grant, count)` pairs. Releases
    /// are batched, so dropping many doors costs a few messages.
    Releases { grants: Vec<(u32, u32)> },
    /// The sender's bulk segment (one memfd) for `slot`, generation `generation`:
    /// `request` says whether it carries arguments (the slot is in the
    /// sender's area) or results (in the receiver's). Sent before the call
    /// or reply that first uses it.
    Segment {
        request: bool,
        slot: u32,
        generation: u32,
    },
    /// The memfds of the sealed snapshots passed in a call (`request`) or
    /// reply on `slot`, in descriptor order.
    Buffers { request: bool, slot: u32, seq: u32 },
    /// The sender's loan arena (one memfd): the ranges its loans name.
    Arena,
    /// Loans of the receiver's arena that the sender held and dropped:
    /// `(offset, length)` ranges, theirs again.
    Returned { loans: Vec<(u64, u32)> },
}

/// Most `(grant, count)` pairs in one [`Ctl::Releases`] (each encodes in at
/// most 10 bytes, so a batch stays well under [`MAX_CTL`]).
pub const MAX_RELEASES: usize = 1024;

/// A message as it is sent.
pub fn encode(msg: &Ctl) -> Vec<u8> {
    postcard::to_allocvec(msg).unwrap_or_default()
}

/// A received message; `None` if it is not one.
pub fn decode(bytes: &[u8]) -> Option<Ctl> {
    postcard::from_bytes(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let m = Ctl::Boot {
            doors: vec![DoorDescriptor {
                kind: 2,
                idx: 9,
                pid: 4,
            }],
        };
        match decode(&encode(&m)) {
            Some(Ctl::Boot { doors }) => assert_eq!(
                doors[0],
                DoorDescriptor {
                    kind: 2,
                    idx: 9,
                    pid: 4
                }
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn garbage_does_not_decode_into_boot() {
        assert!(decode(&[0xff, 0xff, 0xff]).is_none());
        assert!(decode(&[]).is_none());
    }
}
