//! The child domain: offers one door per [`Offer`], all served by one handler that tells them
//! apart by datum, then serves until it is killed or its parent dies (`init_child` set the
//! death signal). A malformed request fails with a [`Fault`] whose code names the check.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use lintel::{Door, Fault, Reply, Request};

use super::{OUT_1K, Offer, SLEEP_SECS, SPIN_OFF, SPIN_ON, SWITCHES, pattern, pattern_bytes};
use crate::harness::voluntary_switches;

/// Fault: the arguments do not fit the door (wrong length, pattern or door count).
const BAD_ARGUMENTS: u32 = 1;
/// Fault: [`Offer::Sleep`] was called but the parent offered no door.
const NO_PARENT_DOOR: u32 = 2;
/// Fault: the parent's door failed when [`Offer::Sleep`] called it.
const PARENT_CALL_FAILED: u32 = 3;

struct State {
    /// [`Offer::Source`]'s result (its first byte is replaced by the argument).
    source: Vec<u8>,
    /// The first door the parent offered at boot, if any: [`Offer::Sleep`] calls it.
    parent: OnceLock<Door>,
    /// The first door [`Offer::Keep`] received.
    kept: OnceLock<Door>,
}

/// The child side: `__child door` (no arguments).
pub fn child(args: &[String]) -> anyhow::Result<()> {
    ensure!(args.is_empty(), "the door child takes no arguments");
    let state = Arc::new(State {
        source: pattern_bytes(OUT_1K),
        parent: OnceLock::new(),
        kept: OnceLock::new(),
    });
    // The parent's door is stored before ours are offered: no call can
    // reach `sleep` before it is there.
    let _doors = lintel::boot::join_with(|given| {
        if let Some(first) = given.first() {
            let _ = state.parent.set(first.clone());
        }
        Offer::ALL
            .iter()
            .map(|offer| {
                let state = state.clone();
                Door::create(offer.datum(), move |req: Request<'_>, reply: &mut Reply| {
                    state.serve(req, reply)
                })
            })
            .collect()
    })
    .context("joining the parent domain")?;
    loop {
        std::thread::park();
    }
}

impl State {
    fn serve(&self, req: Request<'_>, reply: &mut Reply) -> Result<(), Fault> {
        let data = req.data;
        let bad = Err(Fault(BAD_ARGUMENTS));
        let Some(offer) = Offer::from_datum(req.datum) else {
            return bad;
        };
        if offer != Offer::Keep && !req.doors.is_empty() {
            return bad;
        }
        match offer {
            Offer::Null if data.is_empty() => Ok(()),
            Offer::Sink if is_pattern(data) => Ok(()),
            Offer::Source if data.len() == 1 => {
                reply.data.extend_from_slice(&self.source);
                reply.data[0] = data[0];
                Ok(())
            }
            Offer::Echo => {
                reply.data.extend_from_slice(data);
                Ok(())
            }
            Offer::Keep if req.doors.len() == 1 => {
                let kept = self.kept.get_or_init(|| req.doors[0].clone());
                reply.data.push(u8::from(kept.same(&req.doors[0])));
                Ok(())
            }
            Offer::Sleep => self.sleep(),
            Offer::Control => match data {
                [cmd @ (SPIN_OFF | SPIN_ON)] => {
                    lintel::set_spin(*cmd == SPIN_ON);
                    Ok(())
                }
                [SWITCHES] => {
                    let n = voluntary_switches().unwrap_or(0);
                    reply.data.extend_from_slice(&n.to_le_bytes());
                    Ok(())
                }
                _ => bad,
            },
            _ => bad,
        }
    }

    /// Tells the parent the call has started, then sleeps: only a kill ends this call early.
    fn sleep(&self) -> Result<(), Fault> {
        let parent = self.parent.get().ok_or(Fault(NO_PARENT_DOOR))?;
        parent.call_bytes(&[]).map_err(|_| Fault(PARENT_CALL_FAILED))?;
        std::thread::sleep(Duration::from_secs(SLEEP_SECS));
        Ok(())
    }
}

/// Whether `data` is non-empty [`pattern`] bytes (first and last checked).
fn is_pattern(data: &[u8]) -> bool {
    match data {
        [] => false,
        [first, .., last] => *first == pattern(0) && *last == pattern(data.len() - 1),
        [only] => *only == pattern(0),
    }
}
