//! Doors in transit. A door crosses a connection as a 16-byte descriptor
//! that the receiver resolves against state the sender cannot write:
//!
//! - *mine* (sender serves it): the sender's grant index on this connection;
//!   the receiver can only ever use it to call the sender.
//! - *yours* (receiver serves it): the receiver's own grant index for the
//!   sender, checked in the receiver's private grant table.
//! - *third* (a third domain C serves it): the sender asks C for a ticket, a
//!   socket end whose twin C keeps, and passes the ticket with SCM_RIGHTS.
//!   The receiver redeems it with C over its own connection (C recognises
//!   the ticket by inode, which only a holder of the real end can show), or,
//!   with no connection to C yet, adopts the ticket socket as that
//!   connection. A ticket lost with a dying receiver closes, C sees hang-up
//!   and drops the reference it held. Calls then go straight to C.
//! - *dead* (C died before the sender could pass its door on): the receiver
//!   gets a door whose calls fail with `PeerDied`, as the sender's would.
//!
//! Tickets make the server the only keeper of its door's references, with no
//! nucleus process in between; the price is one round trip to C per
//! third-party transfer, which is rare next to calls.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use crate::abi::control::Ctl;
use crate::abi::descriptor::DoorDescriptor;
use crate::abi::{DOOR_DESCRIPTOR, MAX_DOORS, OFF_DOORS, WD_DEAD, WD_MINE, WD_THIRD, WD_YOURS};
use crate::context::error::CallError;
use crate::object::conn::{Answer, Conn};
use crate::object::door::{Door, Inner};
use crate::sys;
use crate::sys::umem::Slot;

/// What encoding doors for one message took: ticket fds that travel with
/// it, and the grants made for it, taken back if the peer never takes the
/// doors (the call fails before it does).
#[derive(Default)]
pub(crate) struct Outgoing {
    tickets: Vec<OwnedFd>,
    granted: Vec<u32>,
}

impl Outgoing {
    /// The peer did not take the doors: undo the grants (the tickets close
    /// when `self` drops, which releases them at their servers).
    pub fn roll_back(self, conn: &Conn) {
        take_back(conn, &self.granted);
    }

    /// The ticket fds to attach to the message.
    pub fn fds(&self) -> Vec<BorrowedFd<'_>> {
        self.tickets.iter().map(|t| t.as_fd()).collect()
    }
}

/// Undo grants made for a message the peer did not take.
pub(crate) fn take_back(conn: &Conn, granted: &[u32]) {
    for &g in granted {
        conn.take_back(g, 1);
    }
}

/// Encode `door` for sending over `conn`; third-party doors add a ticket.
/// Nothing is granted to a peer that is gone.
fn encode(conn: &Arc<Conn>, door: &Door, out: &mut Outgoing) -> Result<DoorDescriptor, CallError> {
    Ok(match &door.base().0 {
        Inner::Local(core) => {
            let idx = conn.grant(core).ok_or(CallError::PeerDied)?;
            out.granted.push(idx);
            DoorDescriptor {
                kind: WD_MINE,
                idx,
                pid: 0,
            }
        }
        Inner::Remote(rd) if Arc::ptr_eq(&rd.conn, conn) => DoorDescriptor {
            kind: WD_YOURS,
            idx: rd.grant,
            pid: 0,
        },
        Inner::Remote(rd) => {
            let dead = DoorDescriptor::dead(rd.conn.peer_pid());
            if rd.conn.is_dead() {
                return Ok(dead);
            }
            let ticket = match rd.conn.request(|req| Ctl::Mint { req, grant: rd.grant }, &[]) {
                Ok(Answer::Minted(Some(fd))) => fd,
                Err(CallError::PeerDied) => return Ok(dead),
                Err(CallError::TimedOut) => return Err(CallError::TimedOut),
                _ => return Err(CallError::BadDoor),
            };
            out.tickets.push(ticket);
            DoorDescriptor {
                kind: WD_THIRD,
                idx: (out.tickets.len() - 1) as u32,
                pid: rd.conn.peer_pid(),
            }
        }
        Inner::Dead(pid) => DoorDescriptor::dead(*pid),
        Inner::Timed(_) => unreachable!("base() unwraps timeouts"),
    })
}

/// Resolve one received descriptor. Every one is resolved even after an
/// error so that no reference or ticket is left behind.
fn decode(conn: &Arc<Conn>, w: DoorDescriptor, tickets: &mut [Option<OwnedFd>]) -> Result<Door, CallError> {
    match w.kind {
        WD_MINE => Ok(Door(Inner::Remote(conn.home.remote_door(conn, w.idx)))),
        WD_DEAD => Ok(Door(Inner::Dead(w.pid))),
        WD_YOURS => conn
            .lookup(w.idx)
            .map(|c| Door(Inner::Local(c)))
            .ok_or(CallError::BadDoor),
        WD_THIRD => {
            let fd = tickets
                .get_mut(w.idx as usize)
                .and_then(Option::take)
                .ok_or(CallError::BadMessage("door ticket missing"))?;
            redeem(conn, fd, w.pid)
        }
        _ => Err(CallError::BadMessage("unknown door descriptor")),
    }
}

/// Turn a ticket received from `from` into a door. The kernel, not the
/// sender, says which domain made the ticket (`SO_PEERCRED` of a socket
/// pair names its creator); `pid`, the server the sender names, must agree.
fn redeem(from: &Arc<Conn>, ticket: OwnedFd, pid: u32) -> Result<Door, CallError> {
    let d = from.home;
    let maker =
        sys::peer_pid(ticket.as_fd()).map_err(|_| CallError::BadMessage("door ticket is not a socket"))?;
    if pid != 0 && maker != pid {
        return Err(CallError::BadMessage("ticket not made by the domain it names"));
    }
    if maker == d.pid() {
        // One of ours came back through other domains.
        let t = d.take_ticket(ticket.as_fd()).ok_or(CallError::BadDoor)?;
        return Ok(Door(Inner::Local(t.core.clone())));
    }
    if maker == from.peer_pid() {
        // A sender passes its own doors by grant, never by ticket: this one
        // it made itself, and would have us wait on it.
        return Err(CallError::BadMessage("door ticket forged by its sender"));
    }
    let redeemed = |c: &Arc<Conn>, fds: &[BorrowedFd<'_>]| match c.request(|req| Ctl::Redeem { req }, fds)? {
        Answer::Redeemed(Some(g)) => Ok(Door(Inner::Remote(d.remote_door(c, g)))),
        _ => Err(CallError::BadDoor),
    };
    if let Some(c) = d.conn_to(maker) {
        return redeemed(&c, &[ticket.as_fd()]);
    }
    // No connection to the server yet: the ticket becomes one.
    let c = d
        .add_conn(ticket, Some(maker))
        .map_err(|e| CallError::Local(e.to_string()))?;
    redeemed(&c, &[])
}

/// Write `doors` into a slot for a call (`request`) or reply; ticket fds go
/// ahead on the socket. Returns the grants made, to take back if the peer
/// refuses the call ([`take_back`]); on failure they are taken back here.
pub(crate) fn send_doors(
    conn: &Arc<Conn>,
    doors: &[Door],
    slot: &Slot,
    request: bool,
    index: u32,
    seq: u32,
) -> Result<Vec<u32>, CallError> {
    let mut out = Outgoing::default();
    let mut write = || {
        for (i, door) in doors.iter().enumerate() {
            let w = encode(conn, door, &mut out)?;
            slot.write(OFF_DOORS + i * DOOR_DESCRIPTOR, &w.to_bytes());
        }
        if !out.tickets.is_empty() {
            let batch = Ctl::Tickets {
                request,
                slot: index,
                seq,
            };
            if !conn.send(&batch, &out.fds()) {
                return Err(CallError::PeerDied);
            }
        }
        Ok(())
    };
    match write() {
        Ok(()) => Ok(out.granted),
        Err(e) => {
            out.roll_back(conn);
            Err(e)
        }
    }
}

/// Read `n` descriptors from a slot and resolve them into `out`.
pub(crate) fn receive_doors(
    conn: &Arc<Conn>,
    slot: &Slot,
    n: usize,
    request: bool,
    index: u32,
    seq: u32,
    out: &mut Vec<Door>,
) -> Result<(), CallError> {
    // Read once each: the peer may rewrite the slot meanwhile, and what
    // was checked for tickets must be what is resolved. (A few on the
    // stack: most calls pass one door, or none.)
    let n = n.min(MAX_DOORS);
    let (mut few, mut many) = ([DoorDescriptor::dead(0); 4], Vec::new());
    let wires = if n <= few.len() {
        &mut few[..n]
    } else {
        many.resize(n, DoorDescriptor::dead(0));
        &mut many[..]
    };
    for (i, w) in wires.iter_mut().enumerate() {
        *w = wire_at(slot, i);
    }
    let mut tickets: Vec<Option<OwnedFd>> = Vec::new();
    let mut missing = false;
    if wires.iter().any(|w| w.kind == WD_THIRD) {
        match conn.take_tickets(request, index, seq) {
            Some(fds) => tickets = fds.into_iter().map(Some).collect(),
            None => missing = true,
        }
    }
    let resolved = resolve_all(conn, wires, &mut tickets, out);
    if missing {
        // An honest peer sends the tickets before it publishes the call or
        // reply; they are gone only if its connection was torn down since.
        return Err(match conn.is_dead() {
            true => CallError::PeerDied,
            false => CallError::BadMessage("door tickets missing"),
        });
    }
    resolved
}

/// A request with `n` doors was refused before they were taken: drop any
/// tickets that came for it, so their servers release them. (Grants of the
/// caller's own doors are the caller's to take back.)
pub(crate) fn discard_doors(conn: &Arc<Conn>, slot: &Slot, n: usize, request: bool, index: u32, seq: u32) {
    let third = (0..n.min(MAX_DOORS)).any(|i| wire_at(slot, i).kind == WD_THIRD);
    if third {
        drop(conn.take_tickets(request, index, seq));
    }
}

/// Door descriptor `i` of a slot, as it reads now.
fn wire_at(slot: &Slot, i: usize) -> DoorDescriptor {
    let mut b = [0u8; DOOR_DESCRIPTOR];
    slot.read(OFF_DOORS + i * DOOR_DESCRIPTOR, &mut b);
    DoorDescriptor::from_bytes(&b)
}

/// Resolve every descriptor (even after a failure, so nothing is left
/// behind) onto `out`: all the doors, or none of them and the first error.
fn resolve_all(
    conn: &Arc<Conn>,
    wires: &[DoorDescriptor],
    tickets: &mut [Option<OwnedFd>],
    out: &mut Vec<Door>,
) -> Result<(), CallError> {
    let start = out.len();
    let mut first_err = None;
    for &w in wires {
        match decode(conn, w, tickets) {
            Ok(d) => out.push(d),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        None => Ok(()),
        Some(e) => {
            out.truncate(start);
            Err(e)
        }
    }
}

/// Encode doors for a socket message (boot); tickets travel with it. On
/// failure every grant made is taken back.
pub(crate) fn encode_for_socket(
    conn: &Arc<Conn>,
    doors: &[Door],
) -> Result<(Vec<DoorDescriptor>, Outgoing), CallError> {
    let mut out = Outgoing::default();
    let wires = doors.iter().map(|d| encode(conn, d, &mut out)).collect();
    match wires {
        Ok(w) => Ok((w, out)),
        Err(e) => {
            out.roll_back(conn);
            Err(e)
        }
    }
}

/// Decode doors received in a socket message.
pub(crate) fn decode_from_socket(
    conn: &Arc<Conn>,
    wires: &[DoorDescriptor],
    fds: Vec<OwnedFd>,
) -> Result<Vec<Door>, CallError> {
    let wires = &wires[..wires.len().min(MAX_DOORS)];
    let mut tickets: Vec<Option<OwnedFd>> = fds.into_iter().map(Some).collect();
    let mut doors = Vec::with_capacity(wires.len());
    resolve_all(conn, wires, &mut tickets, &mut doors)?;
    Ok(doors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::SLOT_SIZE;
    use crate::sys::Mapping;

    fn slot_with(doors: &[DoorDescriptor]) -> Slot {
        let fd = sys::sealed_memfd("t", SLOT_SIZE).unwrap();
        let slot = Slot::new(Arc::new(Mapping::map(fd.as_fd(), SLOT_SIZE).unwrap()), 0).unwrap();
        for (i, w) in doors.iter().enumerate() {
            slot.write(OFF_DOORS + i * DOOR_DESCRIPTOR, &w.to_bytes());
        }
        slot
    }

    fn third() -> DoorDescriptor {
        DoorDescriptor {
            kind: WD_THIRD,
            idx: 0,
            pid: 1,
        }
    }

    #[test]
    fn tickets_missing_on_a_torn_down_connection_mean_the_peer_died() {
        let (mine, _theirs) = sys::seqpacket_pair().unwrap();
        let conn = crate::object::conn::alone::conn(mine);
        conn.dead.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut out = Vec::new();
        let r = receive_doors(&conn, &slot_with(&[third()]), 1, false, 0, 1, &mut out);
        assert_eq!(r.unwrap_err(), CallError::PeerDied);
    }

    #[test]
    fn tickets_missing_from_a_live_peer_are_a_protocol_error() {
        let (mine, _theirs) = sys::seqpacket_pair().unwrap();
        let conn = crate::object::conn::alone::conn(mine);
        let mut out = Vec::new();
        let r = receive_doors(&conn, &slot_with(&[third()]), 1, false, 0, 1, &mut out);
        assert_eq!(r.unwrap_err(), CallError::BadMessage("door tickets missing"));
        assert!(out.is_empty());
    }

    /// Every descriptor is resolved, the good ones before and after a bad
    /// one too, but the message takes none of them: what the caller's
    /// vector held before stays, and nothing is added. Past the few kept
    /// on the stack as well.
    #[test]
    fn one_bad_descriptor_takes_none_of_the_message_s_doors() {
        let (mine, _theirs) = sys::seqpacket_pair().unwrap();
        let conn = crate::object::conn::alone::conn(mine);
        let bad = DoorDescriptor {
            kind: 0xee,
            idx: 0,
            pid: 0,
        };
        for n in [3, 9] {
            let mut wires = vec![DoorDescriptor::dead(7); n];
            wires[n / 2] = bad;
            let mut out = vec![Door(Inner::Dead(1))];
            let r = receive_doors(&conn, &slot_with(&wires), n, false, 0, 1, &mut out);
            assert_eq!(r.unwrap_err(), CallError::BadMessage("unknown door descriptor"));
            assert_eq!(out.len(), 1, "{n} descriptors: the one held before, no more");
            let ok = vec![DoorDescriptor::dead(7); n];
            receive_doors(&conn, &slot_with(&ok), n, false, 0, 1, &mut out).unwrap();
            assert_eq!(out.len(), 1 + n);
            assert!(out[1..].iter().all(|d| matches!(d.0, Inner::Dead(7))));
        }
    }
}
