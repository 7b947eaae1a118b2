//! What both sides of a lintel connection agree on: the call area's layout,
//! the slot's state words and status codes (here), doors and buffers as
//! they cross in a slot ([`descriptor`]), and the control messages on the
//! connection's socket with their encoding ([`control`]).
//! Constants and types only, no runtime: the runtime, the hostile-peer
//! tests and anything else that speaks the protocol use this crate, so a
//! change here changes all of them at once.
//!
//! A call area is a sealed memfd created by the *calling* domain and mapped by
//! the serving one. It holds [`AREA_SLOTS`] slots of [`SLOT_SIZE`] bytes.
//! The first [`SLOTS`] are leased by calling threads, one each, kept across
//! calls (an LRPC channel), and a server thread binds to one while calls
//! keep coming; the other [`ASYNC_SLOTS`] are taken by awaited calls, one
//! per call in flight. An awaited call that stops spinning marks its slot
//! [`PARKED`]; the server then sends the slot's index, as a datagram of 4
//! bytes, on the notice socket that came with the area, and the caller's
//! runtime wakes the task. A notice the server could not send (the
//! caller's queue was full) is recorded in the area's first word,
//! [`OFF_NOTICE_LOST`], so the caller looks at every parked slot.
//!
//! Slot layout (byte offsets). The first cache line is written by the
//! client, the second by the server, so the two sides never write the same
//! line on the fast path:
//!
//! | off | field | writer |
//! |-----|-------|--------|
//! | 0   | `req_seq`: sequence of the posted request | client |
//! | 4   | `client_state`: [`RUNNING`], [`SLEEPING`] or [`PARKED`] | client |
//! | 8   | `grant`: door, as the server's grant index | client |
//! | 12  | `flags`: [`FLAG_ALERT`] | client |
//! | 16  | `in_len` | client |
//! | 20  | `in_doors` | client |
//! | 24  | inline arguments, [`INLINE`] bytes | client |
//! | 40  | `client_cpu`: where the caller last ran | client |
//! | 44  | `in_seg`: arguments in the caller's bulk segment of this generation (0: in the slot) | client |
//! | 48  | `deadline`: `CLOCK_MONOTONIC` ns (u64), read with [`FLAG_DEADLINE`] | client |
//! | 56  | `in_bufs`: buffers passed with the request (read with [`FLAG_BUFS`]) | client |
//! | 64  | `rep_seq`: equals `req_seq` when the reply is ready | server |
//! | 68  | `server_state`: [`UNBOUND`], [`SPINNING`], [`SLEEPING`], [`BUSY`] | server |
//! | 72  | `server_cpu` | server |
//! | 76  | `status` | server |
//! | 80  | `out_len` | server |
//! | 84  | `out_doors` | server |
//! | 88  | inline results, [`INLINE`] bytes | server |
//! | 104 | `out_seg`: results in the server's bulk segment of this generation (0: in the slot) | server |
//! | 108 | `out_bufs`: buffers passed with the reply (written with every reply) | server |
//! | 128 | data, [`DATA_CAP`] bytes (arguments, then results) | both |
//! | 128+DATA_CAP | door descriptors, [`MAX_DOORS`] × 16 bytes | both |
//! | [`OFF_BUFS`] | buffer descriptors, [`MAX_BUFFERS`] × 16 bytes | both |
//!
//! Arguments or results larger than [`DATA_CAP`] travel in a *bulk
//! segment*: a memfd per slot and direction, created by the side that
//! writes it (sealed against shrinking, so the reader's mapping can never
//! fault), sent once over the socket ([`control::Ctl::Segment`]) and reused by
//! later calls until a larger one replaces it under a new generation.
//!
//! Buffers travel by descriptor ([`BUF_SEALED`], [`BUF_LOAN`]): a sealed
//! snapshot's memfd goes over the socket ([`control::Ctl::Buffers`]); a loan
//! names a range of the sender's loan arena, a memfd sent once per
//! connection ([`control::Ctl::Arena`]) and mapped read-only by the receiver,
//! which gives the range back when it drops it: in its next call or reply on
//! the connection ([`BUF_RETURNED`]), or else in a message
//! ([`control::Ctl::Returned`]).
#![forbid(unsafe_code)]
#![allow(missing_docs)] // the constants are documented by the layout table

/// Version of this protocol, sent in [`control::Ctl::Hello`]; a domain refuses
/// a connection whose peer speaks another version.
pub const VERSION: u32 = 10;

pub mod control;
pub mod descriptor;

/// Slots leased by calling threads: concurrent calling threads per connection.
pub const SLOTS: usize = 64;
/// Slots for awaited calls, after the threads' ones: awaited calls in
/// flight per connection.
pub const ASYNC_SLOTS: usize = 1024;
/// Slots per call area.
pub const AREA_SLOTS: usize = SLOTS + ASYNC_SLOTS;
/// Bytes per slot.
pub const SLOT_SIZE: usize = 8192;
/// The first page holds the area's own words ([`OFF_NOTICE_LOST`]); the
/// slots after it are page-aligned.
pub const AREA_HEADER: usize = 4096;
/// Size of a call area.
pub const AREA_SIZE: usize = AREA_HEADER + AREA_SLOTS * SLOT_SIZE;
/// Area word (u32) the server sets when a parked caller's notice could not
/// be sent; the caller clears it and looks at every parked slot.
pub const OFF_NOTICE_LOST: usize = 0;

/// Largest argument or result of the vanilla path ("up to 5 KiB").
pub const DATA_CAP: usize = 5 * 1024;
/// Arguments and results up to this size travel inline in the header lines:
/// the fast path.
pub const INLINE: usize = 16;
/// Most doors one call may pass each way.
pub const MAX_DOORS: usize = 64;
/// Size of a domain's loan arena, the memfd it lends from: a peer maps at
/// most this much of the pool it is sent.
pub const LOAN_ARENA_SIZE: usize = 1 << 30;
/// Bytes per wire door descriptor.
pub const DOOR_DESCRIPTOR: usize = 16;

pub const OFF_REQ_SEQ: usize = 0;
pub const OFF_CLIENT_STATE: usize = 4;
pub const OFF_GRANT: usize = 8;
pub const OFF_FLAGS: usize = 12;
pub const OFF_IN_LEN: usize = 16;
pub const OFF_IN_DOORS: usize = 20;
pub const OFF_IN_INLINE: usize = 24;
pub const OFF_CLIENT_CPU: usize = 40;
pub const OFF_IN_SEG: usize = 44;
pub const OFF_DEADLINE: usize = 48;
pub const OFF_IN_BUFS: usize = 56;
/// Of a streamed request's arguments ([`FLAG_STREAM`]), how many bytes
/// from the segment's start the caller has written so far.
pub const OFF_IN_STREAMED: usize = 60;
pub const OFF_REP_SEQ: usize = 64;
pub const OFF_SERVER_STATE: usize = 68;
pub const OFF_SERVER_CPU: usize = 72;
/// [`OFF_SERVER_CPU`] while the server steps off its caller's CPU: its
/// caller spins on (a sleep now would have the reply's wake-up put it
/// beside the server again).
pub const CPU_MOVING: u32 = u32::MAX - 1;
pub const OFF_STATUS: usize = 76;
pub const OFF_OUT_LEN: usize = 80;
pub const OFF_OUT_DOORS: usize = 84;
pub const OFF_OUT_INLINE: usize = 88;
pub const OFF_OUT_SEG: usize = 104;
pub const OFF_OUT_BUFS: usize = 108;
pub const OFF_DATA: usize = 128;
pub const OFF_DOORS: usize = OFF_DATA + DATA_CAP;
pub const OFF_BUFS: usize = OFF_DOORS + MAX_DOORS * DOOR_DESCRIPTOR;
/// Most buffers one call may pass each way.
pub const MAX_BUFFERS: usize = 16;
/// Bytes per buffer descriptor: kind (u32), length (u32), offset (u64).
pub const BUFFER_DESCRIPTOR: usize = 16;
/// Buffer descriptor kinds.
pub const BUF_SEALED: u32 = 1;
pub const BUF_LOAN: u32 = 2;
/// A loan of the receiver's arena given back (length, offset), not a
/// buffer passed: in a reply, one the call's handler let go of; in a
/// request, ones the caller let go of since its last request.
pub const BUF_RETURNED: u32 = 3;
/// A file descriptor passed as is (length and offset 0); it travels with
/// the sealed snapshots' memfds, in descriptor order.
pub const BUF_FD: u32 = 4;

const _: () = assert!(OFF_BUFS + MAX_BUFFERS * BUFFER_DESCRIPTOR <= SLOT_SIZE);
const _: () = assert!(OFF_IN_INLINE + INLINE <= OFF_CLIENT_CPU);
const _: () = assert!(OFF_CLIENT_CPU + 4 <= OFF_IN_SEG && OFF_IN_SEG + 4 <= OFF_DEADLINE);
const _: () = assert!(OFF_OUT_INLINE + INLINE <= OFF_OUT_SEG && OFF_OUT_SEG + 4 <= OFF_OUT_BUFS);
const _: () = assert!(OFF_OUT_BUFS + 4 <= OFF_DATA && OFF_IN_BUFS + 4 <= OFF_IN_STREAMED);
const _: () = assert!(OFF_IN_STREAMED + 4 <= OFF_REP_SEQ);
// Streamed arguments are always in a bulk segment.
const _: () = assert!(STREAM_MIN > DATA_CAP);
const _: () = assert!(OFF_DEADLINE.is_multiple_of(8) && OFF_DEADLINE + 8 <= OFF_REP_SEQ);
const _: () = assert!(OFF_OUT_INLINE + INLINE <= OFF_DATA);

/// `rep_seq` value written by our own watcher when the peer died, so a
/// sleeping caller's futex wait returns. Sequences skip it.
pub const SEQ_DEAD: u32 = u32::MAX;

/// `client_state` / `server_state` values.
pub const RUNNING: u32 = 0;
pub const UNBOUND: u32 = 0;
pub const SPINNING: u32 = 1;
pub const SLEEPING: u32 = 2;
pub const BUSY: u32 = 3;
/// `client_state`: an awaited call's task waits for the reply; the server
/// sends the slot's index on the notice socket when it publishes it.
pub const PARKED: u32 = 4;

/// Request flag: the caller's shuttle was alerted when it called.
pub const FLAG_ALERT: u32 = 1;
/// Request flag: arguments and results travel in the data region even when
/// they would fit inline (the vanilla path forced).
pub const FLAG_VANILLA: u32 = 2;
/// Request flag: `in_bufs` counts buffers passed (without it, none are).
pub const FLAG_BUFS: u32 = 4;
/// Request flag: `deadline` holds the call's deadline (without it, the call
/// has none and the word is not read, so a call without one skips its store).
pub const FLAG_DEADLINE: u32 = 8;
/// Request flag: the arguments' bulk segment is still being written when
/// the request is posted; the server copies each part out once
/// [`OFF_IN_STREAMED`] covers it, so the two copies overlap.
pub const FLAG_STREAM: u32 = 16;
/// A streamed request's arguments are written (and their progress
/// published) in parts of this many bytes.
pub const STREAM_PART: usize = 32 << 10;
/// Arguments of at least this many bytes in a bulk segment are streamed.
pub const STREAM_MIN: usize = 2 * STREAM_PART;

/// Where `len` bytes of arguments or results sit in a slot: inline at
/// `inline_at` ([`OFF_IN_INLINE`] in the client's half, [`OFF_OUT_INLINE`]
/// in the server's) when small, unless `vanilla`; else in the data region.
/// Both sides derive it from the same header words, so they always agree.
#[inline]
pub const fn payload_offset(inline_at: usize, len: usize, vanilla: bool) -> usize {
    if len <= INLINE && !vanilla {
        inline_at
    } else {
        OFF_DATA
    }
}

/// Reply status codes.
pub const ST_OK: u32 = 0;
pub const ST_REVOKED: u32 = 1;
pub const ST_BAD_DOOR: u32 = 2;
pub const ST_BAD_MESSAGE: u32 = 3;
pub const ST_TOO_LARGE: u32 = 4;
pub const ST_PANICKED: u32 = 5;
/// Handler fault: its code is in `out_len`.
pub const ST_FAULT: u32 = 6;
/// The request's deadline had passed when a server thread came to it.
pub const ST_TIMED_OUT: u32 = 7;
/// Added to a status: the server refused the request before it took the
/// doors passed with it (sizes, grant or revocation checked first), so the
/// caller takes back the grants it made for them.
pub const ST_UNTAKEN: u32 = 1 << 16;

/// Smallest bulk segment: smaller data never needs one, and a segment
/// this size is reused by every bulk call on its slot that fits.
pub const SEG_MIN: usize = 64 * 1024;

/// Bulk segment size for `len` bytes: the next power of two, at least
/// [`SEG_MIN`], so a slot's segment is replaced only when calls grow by
/// half or more.
pub const fn segment_size(len: usize) -> usize {
    let n = if len < SEG_MIN { SEG_MIN } else { len };
    match n.checked_next_power_of_two() {
        Some(p) => p,
        None => n,
    }
}

/// Wire door descriptor kinds (first word of the 16-byte descriptor).
pub const WD_YOURS: u32 = 1;
pub const WD_MINE: u32 = 2;
pub const WD_THIRD: u32 = 3;
/// A door whose server died before it could be passed on (`pid` names it).
pub const WD_DEAD: u32 = 4;
