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

use crate::abi::*;
use crate::conn::{Answer, Conn};
use crate::door::{Door, Inner};
use crate::error::CallError;
use crate::umem::Slot;
use crate::wire::{Ctl, WireDoor};
use crate::{domain, sys};

/// Encode `door` for sending over `conn`; third-party doors add a ticket.
fn encode(conn: &Arc<Conn>, door: &Door, tickets: &mut Vec<OwnedFd>) -> Result<WireDoor, CallError> {
    Ok(match &door.0 {
        Inner::Local(core) => WireDoor {
            kind: WD_MINE,
            idx: conn.grant(core),
            pid: 0,
        },
        Inner::Remote(rd) if Arc::ptr_eq(&rd.conn, conn) => WireDoor {
            kind: WD_YOURS,
            idx: rd.grant,
            pid: 0,
        },
        Inner::Remote(rd) => {
            let dead = WireDoor::dead(rd.conn.peer_pid());
            if rd.conn.is_dead() {
                return Ok(dead);
            }
            let ticket = match rd.conn.request(|req| Ctl::Mint { req, grant: rd.grant }, &[]) {
                Ok(Answer::Minted(Some(fd))) => fd,
                Err(CallError::PeerDied) => return Ok(dead),
                _ => return Err(CallError::BadDoor),
            };
            tickets.push(ticket);
            WireDoor {
                kind: WD_THIRD,
                idx: (tickets.len() - 1) as u32,
                pid: rd.conn.peer_pid(),
            }
        }
        Inner::Dead(pid) => WireDoor::dead(*pid),
    })
}

/// Resolve one received descriptor. Every one is resolved even after an
/// error so that no reference or ticket is left behind.
fn decode(conn: &Arc<Conn>, w: WireDoor, tickets: &mut [Option<OwnedFd>]) -> Result<Door, CallError> {
    let d = domain::get();
    match w.kind {
        WD_MINE => Ok(Door(Inner::Remote(d.remote_door(conn, w.idx)))),
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
    let d = domain::get();
    let maker =
        sys::peer_pid(ticket.as_fd()).map_err(|_| CallError::BadMessage("door ticket is not a socket"))?;
    if pid != 0 && maker != pid {
        return Err(CallError::BadMessage("ticket not made by the domain it names"));
    }
    if maker == d.pid {
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
/// ahead on the socket. Returns the descriptor count.
pub(crate) fn send_doors(
    conn: &Arc<Conn>,
    doors: &[Door],
    slot: &Slot,
    request: bool,
    index: u32,
    seq: u32,
) -> Result<u32, CallError> {
    let mut tickets = Vec::new();
    for (i, door) in doors.iter().enumerate() {
        let w = encode(conn, door, &mut tickets)?;
        slot.write(OFF_DOORS + i * WIRE_DOOR, &w.to_bytes());
    }
    if !tickets.is_empty() {
        let fds: Vec<BorrowedFd<'_>> = tickets.iter().map(|t| t.as_fd()).collect();
        if !conn.send(
            &Ctl::Tickets {
                request,
                slot: index,
                seq,
            },
            &fds,
        ) {
            return Err(CallError::PeerDied);
        }
    }
    Ok(doors.len() as u32)
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
    let wires: Vec<WireDoor> = (0..n.min(MAX_DOORS))
        .map(|i| {
            let mut b = [0u8; WIRE_DOOR];
            slot.read(OFF_DOORS + i * WIRE_DOOR, &mut b);
            WireDoor::from_bytes(&b)
        })
        .collect();
    let mut tickets: Vec<Option<OwnedFd>> = Vec::new();
    let mut missing = false;
    if wires.iter().any(|w| w.kind == WD_THIRD) {
        match conn.take_tickets(request, index, seq) {
            Some(fds) => tickets = fds.into_iter().map(Some).collect(),
            None => missing = true,
        }
    }
    let doors = resolve_all(conn, &wires, &mut tickets);
    if missing {
        return Err(CallError::BadMessage("door tickets missing"));
    }
    out.extend(doors?);
    Ok(())
}

/// Resolve every descriptor (even after a failure, so nothing is left
/// behind); all the doors, or the first error.
fn resolve_all(
    conn: &Arc<Conn>,
    wires: &[WireDoor],
    tickets: &mut [Option<OwnedFd>],
) -> Result<Vec<Door>, CallError> {
    let mut first_err = None;
    let mut doors = Vec::with_capacity(wires.len());
    for &w in wires {
        match decode(conn, w, tickets) {
            Ok(d) => doors.push(d),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    first_err.map_or(Ok(doors), Err)
}

/// Encode doors for a socket message (boot); tickets travel with it.
pub(crate) fn encode_for_socket(
    conn: &Arc<Conn>,
    doors: &[Door],
) -> Result<(Vec<WireDoor>, Vec<OwnedFd>), CallError> {
    let mut tickets = Vec::new();
    let wires = doors
        .iter()
        .map(|d| encode(conn, d, &mut tickets))
        .collect::<Result<_, _>>()?;
    Ok((wires, tickets))
}

/// Decode doors received in a socket message.
pub(crate) fn decode_from_socket(
    conn: &Arc<Conn>,
    wires: &[WireDoor],
    fds: Vec<OwnedFd>,
) -> Result<Vec<Door>, CallError> {
    let mut tickets: Vec<Option<OwnedFd>> = fds.into_iter().map(Some).collect();
    resolve_all(conn, &wires[..wires.len().min(MAX_DOORS)], &mut tickets)
}
