//! Call statistics of a running system. Each domain serves a stats door,
//! bound as `domain/<name>/stats`; the `stats` command connects to the
//! supervisor's socket, looks every one up and prints what it returns.
//!
//! A stats reply is `[len: u32 LE][CallStats bytes][pool: 5 × u64 LE]`:
//! the runtime's call counts ([`lintel::stats::CallStats`]) and the state
//! of the domain's server-thread pool.
//!
//! `stats --json` prints one JSON object per domain per line, with paths
//! and size buckets named (see [`DomainStats::to_json`]).

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use lintel::stats::{BUCKET_NAMES, CLASS_NAMES, CallStats, PATH_NAMES, PATHS};
use serde_json::{Value, json};

use crate::names::{self, NameError, Unreachable};

/// One domain's statistics, as the stats door returns them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainStats {
    /// The domain's name.
    pub domain: String,
    /// Its process.
    pub pid: u32,
    /// Calls it made and served, per path and size.
    pub calls: CallStats,
    /// Server threads: running, idle, queued calls, limit, shortages.
    pub pool: [u64; 5],
}

/// Why `stats` could not report.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// Nothing answered at the supervisor's socket.
    #[error("cannot connect to the system at {path}: {err} (is it running?)")]
    Connect {
        /// The socket's path.
        path: String,
        /// Why the connection failed.
        err: lintel::BootError,
    },
    /// The supervisor answered but handed over no door to its name service.
    #[error("the supervisor offered no name-service door")]
    NoNameService,
    /// Listing or looking up the domains' stats doors failed.
    #[error("{0}")]
    Names(#[from] NameError),
    /// A domain's reply did not decode; the domain's name.
    #[error("domain `{0}` sent malformed statistics")]
    Malformed(String),
    /// A call on a domain's stats door failed (other than the domain having died).
    #[error("calling the stats door of domain `{domain}` failed: {err}")]
    Call {
        /// The domain called.
        domain: String,
        /// Why the call failed.
        err: lintel::CallError,
    },
    /// Writing to the output failed.
    #[error("writing the report failed: {0}")]
    Io(#[from] std::io::Error),
}

/// This domain's statistics, encoded for the stats door.
pub(crate) fn encode_local() -> Vec<u8> {
    let calls = lintel::stats::snapshot().to_bytes();
    let p = lintel::pool::stats();
    let mut out = Vec::with_capacity(4 + calls.len() + 40);
    out.extend_from_slice(&(calls.len() as u32).to_le_bytes());
    out.extend_from_slice(&calls);
    for v in [
        p.threads as u64,
        p.idle as u64,
        p.queued as u64,
        p.limit as u64,
        p.shortages,
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

fn decode(domain: &str, pid: u32, b: &[u8]) -> Option<DomainStats> {
    let len = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
    let calls = CallStats::from_bytes(b.get(4..4usize.checked_add(len)?)?)?;
    let rest = b.get(4 + len..)?;
    if rest.len() != 40 {
        return None;
    }
    let mut pool = [0u64; 5];
    for (i, v) in pool.iter_mut().enumerate() {
        *v = u64::from_le_bytes(rest[i * 8..i * 8 + 8].try_into().ok()?);
    }
    Some(DomainStats {
        domain: domain.to_string(),
        pid,
        calls,
        pool,
    })
}

/// Connect to the system whose supervisor listens at `socket` and collect
/// every domain's statistics, in name order.
///
/// ```no_run
/// for d in lintel_system::collect_stats("/tmp/lintel-demo.sock".as_ref()).unwrap() {
///     println!("{} (pid {}):\n{}", d.domain, d.pid, d.calls);
/// }
/// ```
pub fn collect_stats(socket: &Path) -> Result<Vec<DomainStats>, StatsError> {
    let names = names::from_outside(socket).map_err(|e| match e {
        Unreachable::Connect(err) => StatsError::Connect {
            path: socket.display().to_string(),
            err,
        },
        Unreachable::NoNameService => StatsError::NoNameService,
    })?;
    let mut out = Vec::new();
    for name in names.list("domain/")? {
        let Some(domain) = name
            .strip_prefix("domain/")
            .and_then(|r| r.strip_suffix("/stats"))
        else {
            continue;
        };
        let door = match names.lookup_within(&name, Duration::ZERO) {
            Ok(d) => d,
            // The domain exited between list and lookup.
            Err(NameError::Gone { .. } | NameError::NotBound { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        let bytes = match door.call_bytes(&[]) {
            Ok(b) => b,
            // It died after the lookup: it is no longer part of the system.
            Err(lintel::CallError::PeerDied) => continue,
            Err(err) => {
                return Err(StatsError::Call {
                    domain: domain.to_string(),
                    err,
                });
            }
        };
        out.push(
            decode(domain, door.server_pid(), &bytes).ok_or_else(|| StatsError::Malformed(domain.into()))?,
        );
    }
    Ok(out)
}

impl DomainStats {
    /// The statistics as one self-describing JSON object:
    ///
    /// ```json
    /// {"domain":"kv","pid":42,
    ///  "pool":{"threads":2,"idle":1,"queued":0,"limit":4,"shortages":0},
    ///  "buckets":["0-16","16-100","100-1000","1000-4000","4000+"],
    ///  "paths":{"fast":{"calls":7,"failed":0,"served":20004,"calls_with_doors":0,
    ///                   "returns_with_doors":2,"args":[7,0,0,0,0],"results":[7,0,0,0,0]},
    ///           "colocated":{...},"vanilla":{...}},
    ///  "classes":["0-4000","4000-64K","64K-1M","1M+"],
    ///  "cross_domain":{"calls":[7,0,0,0],"slept":[1,0,0,0]}}
    /// ```
    pub fn to_json(&self) -> Value {
        let [threads, idle, queued, limit, shortages] = self.pool;
        let c = &self.calls;
        let path = |p: usize| {
            json!({
                "calls": c.calls[p],
                "failed": c.failed[p],
                "served": c.served[p],
                "calls_with_doors": c.calls_with_doors[p],
                "returns_with_doors": c.returns_with_doors[p],
                "args": c.args[p],
                "results": c.results[p],
            })
        };
        let paths: serde_json::Map<String, Value> =
            (0..PATHS).map(|p| (PATH_NAMES[p].to_string(), path(p))).collect();
        json!({
            "domain": self.domain,
            "pid": self.pid,
            "pool": {"threads": threads, "idle": idle, "queued": queued, "limit": limit, "shortages": shortages},
            "buckets": BUCKET_NAMES,
            "paths": paths,
            "classes": CLASS_NAMES,
            "cross_domain": {"calls": c.sized, "slept": c.slept},
        })
    }
}

/// Print [`collect_stats`] for `socket` to `out` as JSON lines, one object
/// per domain ([`DomainStats::to_json`]); nothing if no domain runs.
pub fn print_stats_json(socket: &Path, out: &mut impl Write) -> Result<(), StatsError> {
    for d in collect_stats(socket)? {
        writeln!(out, "{}", d.to_json())?;
    }
    Ok(())
}

/// Print [`collect_stats`] for `socket` to `out`.
pub fn print_stats(socket: &Path, out: &mut impl Write) -> Result<(), StatsError> {
    let all = collect_stats(socket)?;
    for (i, d) in all.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        let [threads, idle, queued, limit, shortages] = d.pool;
        writeln!(out, "== domain {} (pid {}) ==", d.domain, d.pid)?;
        writeln!(
            out,
            "server threads: {threads} (idle {idle}, queued {queued}, limit {limit}, shortages {shortages})"
        )?;
        write!(out, "{}", d.calls)?;
    }
    if all.is_empty() {
        writeln!(out, "no domains are running")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let b = encode_local();
        let d = decode("x", 1, &b).unwrap();
        assert_eq!(d.domain, "x");
        assert!(d.pool[3] >= 1, "limit is at least 1");
        assert!(decode("x", 1, &b[..b.len() - 1]).is_none());
        assert!(decode("x", 1, &[255, 255, 255, 255]).is_none());
    }

    #[test]
    fn json_names_paths_and_buckets() {
        let mut calls = CallStats::default();
        calls.calls[1] = 7;
        calls.results[1][0] = 7;
        calls.served[2] = 3;
        calls.args[2][3] = 3;
        calls.sized[2] = 9;
        calls.slept[2] = 2;
        let d = DomainStats {
            domain: "kv".into(),
            pid: 42,
            calls,
            pool: [2, 1, 0, 4, 5],
        };
        let v = d.to_json();
        assert_eq!(v["domain"], "kv");
        assert_eq!(v["pid"], 42);
        assert_eq!(v["pool"]["limit"], 4);
        assert_eq!(v["pool"]["shortages"], 5);
        assert_eq!(v["buckets"][3], "1000-4000");
        assert_eq!(v["paths"]["fast"]["calls"], 7);
        assert_eq!(v["paths"]["fast"]["results"][0], 7);
        assert_eq!(v["paths"]["vanilla"]["served"], 3);
        assert_eq!(v["paths"]["vanilla"]["args"][3], 3);
        assert_eq!(v["paths"]["colocated"]["calls"], 0);
        assert_eq!(v["classes"][2], "64K-1M");
        assert_eq!(v["cross_domain"]["slept"][2], 2);
        assert_eq!(v["cross_domain"]["calls"][2], 9);
    }
}
