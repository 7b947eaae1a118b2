//! Suite `door`: lintel door calls, served in this process or by a child domain (this binary
//! re-executed as child role [`ROLE`], started with `lintel::boot::spawn`). Every call reuses one
//! `Reply` and checks its result (length, first and last byte) inside the timed loop.
//!
//! - `null_colocated`: 0 bytes to a door served here: the direct call on the caller's thread.
//! - `null_cross_fast`: 0 bytes to a door served by the child, spinning allowed (the default);
//!   measured in rounds alternating with rounds of the spin baseline, which this suite reports
//!   as `baseline/spin_pingpong_paired` and compares it to; its note gives the ratios to
//!   `baseline/spin_pingpong` (measured alone) and `baseline/uds_pingpong`.
//! - `null_cross_blocking`: the same with spinning off in both domains, so each call sleeps on
//!   both sides; compared to `baseline/futex_pingpong`, its note counts the sleeps.
//! - `in64_cross`, `in1k_cross`, `out1k_cross`, `inout128_cross`: the INKS Table 3 shapes, bytes
//!   in → out 64 → 0, 1024 → 0, 1 → 1024 and 128 → 128; compared to `null_cross_fast`.
//! - `pass_door_cross`: 0 bytes plus one door served here, the same door on every call.
//! - `callee_death_ms`: SIGKILL a child while the caller waits in a call to it; time from the
//!   `kill` to the caller's `PeerDied`, one fresh child per round (values in ns).
//!
//! - `null_instructions`: instructions per null call on each side, counted by callgrind with
//!   spinning off (fields `client` and `server`; not a time).
//!
//! One child serves every cross case (its doors are listed in the enum `Offer`); `callee_death_ms`
//! starts a child per round.

mod calls;
mod death;
mod instructions;
mod peer;
mod serve;

use crate::harness::{Config, Report};

pub use instructions::{CLIENT_ROLE as INSTRUCTIONS_CLIENT, SERVER_ROLE as INSTRUCTIONS_SERVER};
pub use serve::child;

/// The child roles of the `instructions` module (callgrind counts).
pub fn instructions_child(role: &str, args: &[String]) -> anyhow::Result<()> {
    match role {
        INSTRUCTIONS_CLIENT => instructions::client(args),
        _ => instructions::server(args),
    }
}

pub const SUITE: &str = "door";
/// The child role of this suite, registered in `main`.
pub const ROLE: &str = "door";

/// The doors a child offers, in this order; each door's datum is its position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Offer {
    /// 0 bytes in, 0 out.
    Null,
    /// Takes [`pattern`] bytes (checks the first and last), returns nothing.
    Sink,
    /// Takes 1 byte, returns [`OUT_1K`] bytes: that byte, then [`pattern`] bytes.
    Source,
    /// Returns its arguments.
    Echo,
    /// Takes one door and keeps the first it was given; returns 1 if this one is the same door.
    Keep,
    /// Calls the parent's first door (to say it started), then sleeps [`SLEEP_SECS`].
    Sleep,
    /// One command byte: [`SPIN_OFF`], [`SPIN_ON`] or [`SWITCHES`].
    Control,
}

impl Offer {
    const ALL: [Offer; 7] = [
        Offer::Null,
        Offer::Sink,
        Offer::Source,
        Offer::Echo,
        Offer::Keep,
        Offer::Sleep,
        Offer::Control,
    ];

    fn datum(self) -> u64 {
        self as u64
    }

    fn from_datum(datum: u64) -> Option<Offer> {
        Offer::ALL.into_iter().find(|o| o.datum() == datum)
    }
}

/// [`Offer::Control`]: `lintel::set_spin(false)` in the child.
const SPIN_OFF: u8 = 0;
/// [`Offer::Control`]: `lintel::set_spin(true)` in the child.
const SPIN_ON: u8 = 1;
/// [`Offer::Control`]: reply with the serving thread's voluntary context switches (u64 LE).
const SWITCHES: u8 = 2;
/// Result size of [`Offer::Source`].
const OUT_1K: usize = 1024;
/// How long [`Offer::Sleep`] sleeps: far longer than any round of `callee_death_ms`.
const SLEEP_SECS: u64 = 10;

/// Byte `i` of the argument and result payloads.
fn pattern(i: usize) -> u8 {
    (i as u8).wrapping_mul(31) ^ 0xa5
}

/// `len` bytes of [`pattern`].
fn pattern_bytes(len: usize) -> Vec<u8> {
    (0..len).map(pattern).collect()
}

/// Runs every case; the cross cases share one child, which is killed at the end.
pub fn run(cfg: &Config, report: &mut Report) -> anyhow::Result<()> {
    report.push(calls::null_colocated(cfg)?);
    let peer = peer::Peer::spawn(cfg, &[])?;
    calls::cross_cases(cfg, &peer, report)?;
    peer.stop()?;
    report.push(death::callee_death(cfg)?);
    report.push(instructions::null_instructions(cfg)?);
    Ok(())
}
