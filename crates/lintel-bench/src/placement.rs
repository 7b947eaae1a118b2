//! Suite `placement`: the INKS experiment (Lepreau et al., Table 3) through the generated
//! stubs. One interface, [`Inks`], one server implementation, three bindings:
//!
//! - `message`: the server in a child domain and every call on the vanilla path
//!   (`lintel::set_force_vanilla`), the analogue of the paper's "INKS message" configuration;
//! - `isolated`: the same child, with the stub's normal path choice (fast path when the
//!   arguments fit in 16 bytes with no doors, vanilla otherwise);
//! - `colocated`: the server in this domain, so the stub calls the object directly (the
//!   paper's "INKS trap").
//!
//! Shapes: `null`, `in64` (64 bytes in), `in1k`, `out1k` (1024 bytes out), `inout128`. Each case
//! is `<shape>_<binding>`, compared to `<shape>_colocated` as the paper compares to the trap;
//! the note gives the paper's own ratio (message / trap) beside it.

use anyhow::{Context as _, bail, ensure};

use crate::harness::{CaseResult, ChildDomain, Config, Report, measure_batched, serve_forever};
use crate::payload::PayloadError;

pub const SUITE: &str = "placement";
/// The child role of this suite, registered in `main`.
pub const ROLE: &str = "placement";

/// The INKS Table 3 calls.
#[lintel::interface]
pub trait Inks {
    fn null(&self) -> Result<(), PayloadError>;
    fn in64(&self, data: &[u8]) -> Result<(), PayloadError>;
    fn in1k(&self, data: &[u8]) -> Result<(), PayloadError>;
    fn out1k(&self, out: &mut Vec<u8>) -> Result<(), PayloadError>;
    fn inout128(&self, buf: &mut [u8]) -> Result<(), PayloadError>;
}

/// The server: checks what comes in (first and last byte), fills what goes out.
struct Server;

impl Server {
    fn check(data: &[u8], len: usize) -> Result<(), PayloadError> {
        let ok =
            data.len() == len && data.first() == Some(&pattern(0)) && data.last() == Some(&pattern(len - 1));
        if ok { Ok(()) } else { Err(PayloadError::BadPayload) }
    }
}

impl Inks for Server {
    fn null(&self) -> Result<(), PayloadError> {
        Ok(())
    }
    fn in64(&self, data: &[u8]) -> Result<(), PayloadError> {
        Server::check(data, 64)
    }
    fn in1k(&self, data: &[u8]) -> Result<(), PayloadError> {
        Server::check(data, 1024)
    }
    fn out1k(&self, out: &mut Vec<u8>) -> Result<(), PayloadError> {
        out.extend((0..1024).map(pattern));
        Ok(())
    }
    fn inout128(&self, buf: &mut [u8]) -> Result<(), PayloadError> {
        Server::check(buf, 128)?;
        for b in buf.iter_mut() {
            *b = !*b;
        }
        Ok(())
    }
}

fn pattern(i: usize) -> u8 {
    (i as u8).wrapping_mul(29) ^ 0x5a
}

/// The paper's cycles for (unoptimized, INKS message, INKS trap), Table 3.
const PAPER: [(&str, [u32; 3]); 5] = [
    ("null", [2312, 2220, 656]),
    ("in64", [2555, 2462, 830]),
    ("in1k", [5843, 5890, 1791]),
    ("out1k", [8366, 7512, 2741]),
    ("inout128", [3385, 3291, 1122]),
];

const BINDINGS: [&str; 3] = ["colocated", "isolated", "message"];

/// The child side: serve an [`InksServer`] until killed.
pub fn child(_args: &[String]) -> anyhow::Result<()> {
    serve_forever(InksServer::door(Server))
}

/// Restores the normal path choice however the suite ends.
struct ForceVanilla;

impl ForceVanilla {
    fn on() -> ForceVanilla {
        lintel::set_force_vanilla(true);
        ForceVanilla
    }
}

impl Drop for ForceVanilla {
    fn drop(&mut self) {
        lintel::set_force_vanilla(false);
    }
}

/// Runs every shape under every binding.
pub fn run(cfg: &Config, report: &mut Report) -> anyhow::Result<()> {
    let local = InksServer::serve(Server);
    ensure!(local.door().is_local(), "the co-located server is not local");
    let child = ChildDomain::spawn(cfg, ROLE)?;
    let remote = InksClient::from_door(child.door());
    ensure!(!remote.door().is_local(), "the isolated server is local");
    let mut results = Vec::new();
    for binding in BINDINGS {
        let client = if binding == "colocated" { &local } else { &remote };
        let _vanilla = (binding == "message").then(ForceVanilla::on);
        for (shape, _) in PAPER {
            let iters = cfg.iters(if binding == "colocated" {
                2_000_000
            } else {
                100_000
            });
            let batch = if binding == "colocated" { 1000 } else { 100 };
            results.push(measure_shape(client, shape, binding, iters, batch)?);
        }
    }
    for (shape, cycles) in PAPER {
        for binding in BINDINGS {
            let case = format!("{shape}_{binding}");
            let r = results
                .iter()
                .find(|r| r.case == case)
                .cloned()
                .context("a case went missing")?;
            let r = if binding == "colocated" {
                r
            } else {
                let paper = format!(
                    "paper (INKS Table 3): message {:.1}×, unoptimized {:.1}× the trap",
                    cycles[1] as f64 / cycles[2] as f64,
                    cycles[0] as f64 / cycles[2] as f64
                );
                r.compare_to(SUITE, &format!("{shape}_colocated"))
                    .with_note(paper)
            };
            report.push(r);
        }
    }
    Ok(())
}

/// Times one shape through `client`, checking every result.
fn measure_shape(
    client: &InksClient,
    shape: &str,
    binding: &str,
    iters: u64,
    batch: u64,
) -> anyhow::Result<CaseResult> {
    let in64: Vec<u8> = (0..64).map(pattern).collect();
    let in1k: Vec<u8> = (0..1024).map(pattern).collect();
    let mut out = Vec::with_capacity(1024);
    let mut inout: Vec<u8> = (0..128).map(pattern).collect();
    let mut failure: Option<String> = None;
    let stats = measure_batched(iters, batch, || {
        if failure.is_some() {
            return;
        }
        let r = match shape {
            "null" => client.null(),
            "in64" => client.in64(&in64),
            "in1k" => client.in1k(&in1k),
            "out1k" => client.out1k(&mut out).and_then(|()| {
                let ok = out.len() == 1024 && out[1023] == pattern(1023);
                if ok { Ok(()) } else { Err(PayloadError::BadPayload) }
            }),
            _ => {
                // Flips every byte; the next call flips it back.
                let r = client.inout128(&mut inout);
                for b in inout.iter_mut() {
                    *b = !*b;
                }
                r.and_then(|()| Server::check(&inout, 128))
            }
        };
        if let Err(e) = r {
            failure = Some(format!("{shape}_{binding}: {e:?}"));
        }
    });
    if let Some(f) = failure {
        bail!("{f}");
    }
    Ok(CaseResult::new(SUITE, &format!("{shape}_{binding}"), &stats))
}
