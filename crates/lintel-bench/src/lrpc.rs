//! Suite `lrpc`: the LRPC paper's latency curves (Bershad et al. on Mach 3, Figures 7 and 8)
//! through the generated stubs, the server in a child domain.
//!
//! - Figure 7, latency against the number of arguments: `args<N>_value` passes N `u32`s by
//!   value, `args<N>_ref` passes N 4-byte referents (`&[u8]`, each with its length), N = 1, 2, 4,
//!   8. Up to 16 bytes of encoded arguments travel on the fast path, more on the vanilla path,
//!   so the curve shows where the stub crosses over.
//! - Figure 8, latency against the size of one referent: `in_<B>` (in-only `&[u8]`), `out_<B>`
//!   (out-only `&mut Vec<u8>`) and `inout_<B>` (`&mut [u8]`), B from 64 to 4096 bytes. The note
//!   of each `*_4096` case gives the least-squares slope in ns per byte beside the paper's (about
//!   125 ns/byte for LRPC and 710 ns/byte for Mach IPC, in-only).
//!
//! Every case is compared to `args1_value`, the minimal call.

use anyhow::{bail, ensure};

use crate::harness::{CaseResult, ChildDomain, Config, Report, Stats, measure_batched, serve_forever};
use crate::payload::PayloadError;

pub const SUITE: &str = "lrpc";
/// The child role of this suite, registered in `main`.
pub const ROLE: &str = "lrpc";

/// The calls of Figures 7 and 8; every one returns a checksum of what it received.
#[lintel::interface]
pub trait Lrpc {
    fn args1(&self, a: u32) -> Result<u32, PayloadError>;
    fn args2(&self, a: u32, b: u32) -> Result<u32, PayloadError>;
    fn args4(&self, a: u32, b: u32, c: u32, d: u32) -> Result<u32, PayloadError>;
    #[allow(clippy::too_many_arguments)]
    fn args8(
        &self,
        a: u32,
        b: u32,
        c: u32,
        d: u32,
        e: u32,
        f: u32,
        g: u32,
        h: u32,
    ) -> Result<u32, PayloadError>;
    fn refs1(&self, a: &[u8]) -> Result<u32, PayloadError>;
    fn refs2(&self, a: &[u8], b: &[u8]) -> Result<u32, PayloadError>;
    fn refs4(&self, a: &[u8], b: &[u8], c: &[u8], d: &[u8]) -> Result<u32, PayloadError>;
    #[allow(clippy::too_many_arguments)]
    fn refs8(
        &self,
        a: &[u8],
        b: &[u8],
        c: &[u8],
        d: &[u8],
        e: &[u8],
        f: &[u8],
        g: &[u8],
        h: &[u8],
    ) -> Result<u32, PayloadError>;
    fn take(&self, data: &[u8]) -> Result<u32, PayloadError>;
    fn give(&self, len: u32, out: &mut Vec<u8>) -> Result<u32, PayloadError>;
    fn turn(&self, buf: &mut [u8]) -> Result<u32, PayloadError>;
}

struct Server;

fn sum(xs: &[u32]) -> u32 {
    xs.iter().fold(0u32, |s, x| s.wrapping_add(*x))
}

fn word(r: &[u8]) -> Result<u32, PayloadError> {
    Ok(u32::from_le_bytes(
        r.try_into().map_err(|_| PayloadError::BadPayload)?,
    ))
}

/// First plus last byte: enough to see the payload arrived, cheap enough not to be the cost.
fn ends(data: &[u8]) -> u32 {
    data.first().map_or(0, |&b| b as u32) + data.last().map_or(0, |&b| b as u32)
}

impl Lrpc for Server {
    fn args1(&self, a: u32) -> Result<u32, PayloadError> {
        Ok(a)
    }
    fn args2(&self, a: u32, b: u32) -> Result<u32, PayloadError> {
        Ok(sum(&[a, b]))
    }
    fn args4(&self, a: u32, b: u32, c: u32, d: u32) -> Result<u32, PayloadError> {
        Ok(sum(&[a, b, c, d]))
    }
    fn args8(
        &self,
        a: u32,
        b: u32,
        c: u32,
        d: u32,
        e: u32,
        f: u32,
        g: u32,
        h: u32,
    ) -> Result<u32, PayloadError> {
        Ok(sum(&[a, b, c, d, e, f, g, h]))
    }
    fn refs1(&self, a: &[u8]) -> Result<u32, PayloadError> {
        word(a)
    }
    fn refs2(&self, a: &[u8], b: &[u8]) -> Result<u32, PayloadError> {
        Ok(sum(&[word(a)?, word(b)?]))
    }
    fn refs4(&self, a: &[u8], b: &[u8], c: &[u8], d: &[u8]) -> Result<u32, PayloadError> {
        Ok(sum(&[word(a)?, word(b)?, word(c)?, word(d)?]))
    }
    fn refs8(
        &self,
        a: &[u8],
        b: &[u8],
        c: &[u8],
        d: &[u8],
        e: &[u8],
        f: &[u8],
        g: &[u8],
        h: &[u8],
    ) -> Result<u32, PayloadError> {
        let ws = [
            word(a)?,
            word(b)?,
            word(c)?,
            word(d)?,
            word(e)?,
            word(f)?,
            word(g)?,
            word(h)?,
        ];
        Ok(sum(&ws))
    }
    fn take(&self, data: &[u8]) -> Result<u32, PayloadError> {
        Ok(ends(data))
    }
    fn give(&self, len: u32, out: &mut Vec<u8>) -> Result<u32, PayloadError> {
        out.resize(len as usize, 7);
        Ok(ends(out))
    }
    fn turn(&self, buf: &mut [u8]) -> Result<u32, PayloadError> {
        let before = ends(buf);
        if let Some(b) = buf.first_mut() {
            *b = b.wrapping_add(1);
        }
        Ok(before)
    }
}

/// The child side: serve an [`LrpcServer`] until killed.
pub fn child(_args: &[String]) -> anyhow::Result<()> {
    serve_forever(LrpcServer::door(Server))
}

const SIZES: [usize; 7] = [64, 256, 512, 1024, 2048, 3072, 4096];
const REFERENCE: &str = "args1_value";
/// LRPC on Mach 3 (Figure 8's text): ns per referent byte, LRPC and Mach IPC (in-only).
const PAPER_NS_PER_BYTE: (f64, f64) = (125.0, 710.0);

/// Runs Figure 7's and Figure 8's cases against one child domain.
pub fn run(cfg: &Config, report: &mut Report) -> anyhow::Result<()> {
    let child = ChildDomain::spawn(cfg, ROLE)?;
    let c = LrpcClient::from_door(child.door());
    ensure!(!c.door().is_local(), "the lrpc server is local");
    let iters = cfg.iters(100_000);
    let w = [1u8, 0, 0, 0];

    type Call<'a> = Box<dyn Fn() -> Result<u32, PayloadError> + 'a>;
    let fig7: [(&str, Call<'_>, u32); 8] = [
        ("args1_value", Box::new(|| c.args1(1)), 1),
        ("args2_value", Box::new(|| c.args2(1, 1)), 2),
        ("args4_value", Box::new(|| c.args4(1, 1, 1, 1)), 4),
        ("args8_value", Box::new(|| c.args8(1, 1, 1, 1, 1, 1, 1, 1)), 8),
        ("args1_ref", Box::new(|| c.refs1(&w)), 1),
        ("args2_ref", Box::new(|| c.refs2(&w, &w)), 2),
        ("args4_ref", Box::new(|| c.refs4(&w, &w, &w, &w)), 4),
        (
            "args8_ref",
            Box::new(|| c.refs8(&w, &w, &w, &w, &w, &w, &w, &w)),
            8,
        ),
    ];
    for (case, call, expect) in &fig7 {
        let stats = timed(case, iters, || match call() {
            Ok(v) if v == *expect => Ok(()),
            other => Err(format!("{other:?}, expected Ok({expect})")),
        })?;
        let r = CaseResult::new(SUITE, case, &stats);
        report.push(if *case == REFERENCE {
            r
        } else {
            r.compare_to(SUITE, REFERENCE)
        });
    }

    for dir in ["in", "out", "inout"] {
        let mut points = Vec::new();
        for &size in &SIZES {
            let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8 + 1).collect();
            let want = ends(&data);
            let mut out = Vec::with_capacity(size);
            let mut buf = data.clone();
            let case = format!("{dir}_{size}");
            let stats = timed(&case, iters, || {
                let got = match dir {
                    "in" => c.take(&data),
                    "out" => c.give(size as u32, &mut out).map(|_| ends(&out)),
                    _ => {
                        buf[0] = data[0];
                        c.turn(&mut buf)
                            .map(|v| v + u32::from(buf[0] != data[0].wrapping_add(1)))
                    }
                };
                let want = if dir == "out" { 14 } else { want };
                match got {
                    Ok(v) if v == want => Ok(()),
                    other => Err(format!("{other:?}, expected Ok({want})")),
                }
            })?;
            points.push((size as f64, stats.median_ns));
            let mut r = CaseResult::new(SUITE, &case, &stats).compare_to(SUITE, REFERENCE);
            if size == *SIZES.last().unwrap_or(&0) {
                let slope = slope(&points);
                r = r.with_note(format!(
                    "{dir}: {slope:.3} ns per byte ({:.1} GB/s) over {}-{} bytes; paper: LRPC {} ns/byte, \
                     Mach IPC {} ns/byte (in-only)",
                    1.0 / slope,
                    SIZES[0],
                    size,
                    PAPER_NS_PER_BYTE.0,
                    PAPER_NS_PER_BYTE.1
                ));
            }
            report.push(r);
        }
    }
    Ok(())
}

/// Times `call` (which checks its own result); the first failure fails the case.
fn timed(case: &str, iters: u64, mut call: impl FnMut() -> Result<(), String>) -> anyhow::Result<Stats> {
    let mut failure = None;
    let stats = measure_batched(iters, 100, || {
        if failure.is_none() {
            failure = call().err();
        }
    });
    if let Some(f) = failure {
        bail!("{SUITE}/{case}: {f}");
    }
    Ok(stats)
}

/// Least-squares slope of `(x, y)` points.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    if den == 0.0 { 0.0 } else { num / den }
}

#[cfg(test)]
mod tests {
    #[test]
    fn slope_of_a_line() {
        let pts: Vec<(f64, f64)> = (0..5)
            .map(|i| (i as f64 * 100.0, 50.0 + i as f64 * 25.0))
            .collect();
        assert!((super::slope(&pts) - 0.25).abs() < 1e-12);
    }
}
