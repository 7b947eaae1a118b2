//! The `status` command: each domain as the supervisor sees it (its
//! process, state, uptime, restarts, last exit, and what its restart
//! policy does next). The supervisor serves a [`Supervision`] door bound
//! as [`STATUS_NAME`]; `status` connects to its socket, looks it up and
//! prints what it returns.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use lintel::stub::{StubError, Wire};
use serde_json::json;

use crate::names::{self, NameError, Unreachable};

/// The name the supervisor binds its status door under.
pub(crate) const STATUS_NAME: &str = "system/status";

/// One domain of a running system, as its supervisor sees it.
#[derive(Debug, Clone, PartialEq, Eq, Wire)]
pub struct DomainStatus {
    /// The domain's name.
    pub domain: String,
    /// Its current process, 0 when it has none.
    pub pid: u32,
    /// `starting` (not yet ready), `running`, `stopping`, `restarting`
    /// (waiting out its backoff), `down` or `given up`.
    pub state: String,
    /// Milliseconds since its current process started (0 without one).
    pub uptime_ms: u64,
    /// Times it was started again.
    pub restarts: u32,
    /// How its last process ended (`signal 9 (SIGKILL)`, `status 3`);
    /// empty if none has.
    pub last_exit: String,
    /// What the supervisor does next: when a waiting domain restarts, or
    /// what it does if a running one exits.
    pub next: String,
}

impl DomainStatus {
    /// The status as one JSON object.
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "domain": self.domain,
            "pid": self.pid,
            "state": self.state,
            "uptime_ms": self.uptime_ms,
            "restarts": self.restarts,
            "last_exit": if self.last_exit.is_empty() { serde_json::Value::Null } else { self.last_exit.clone().into() },
            "next": self.next,
        })
    }
}

/// What crosses the supervisor's status door.
#[lintel::interface]
pub(crate) trait Supervision {
    /// Every domain, in the manifest's order.
    fn domains(&self) -> Result<Vec<DomainStatus>, StubError>;
}

/// Why `status` could not report.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
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
    /// Looking up the supervisor's status door failed.
    #[error("{0}")]
    Names(#[from] NameError),
    /// The call on the status door failed.
    #[error("asking the supervisor failed: {0}")]
    Call(#[from] StubError),
    /// Writing to the output failed.
    #[error("writing the report failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Connect to the system whose supervisor listens at `socket` and ask for
/// every domain's status.
///
/// ```no_run
/// for d in lintel_system::collect_status("/tmp/lintel-demo.sock".as_ref()).unwrap() {
///     println!("{} (pid {}): {}, restarted {} times", d.domain, d.pid, d.state, d.restarts);
/// }
/// ```
pub fn collect_status(socket: &Path) -> Result<Vec<DomainStatus>, StatusError> {
    let names = names::from_outside(socket).map_err(|e| match e {
        Unreachable::Connect(err) => StatusError::Connect {
            path: socket.display().to_string(),
            err,
        },
        Unreachable::NoNameService => StatusError::NoNameService,
    })?;
    let door = names.lookup_within(STATUS_NAME, Duration::from_secs(5))?;
    Ok(SupervisionClient::from_door(door).domains()?)
}

/// Print [`collect_status`] for `socket` to `out`: a table, or with `json`
/// one object per domain per line ([`DomainStatus::to_json`]).
pub fn print_status(socket: &Path, json: bool, out: &mut impl Write) -> Result<(), StatusError> {
    let all = collect_status(socket)?;
    if json {
        for d in &all {
            writeln!(out, "{}", d.to_json())?;
        }
        return Ok(());
    }
    let rows: Vec<[String; 7]> = all
        .iter()
        .map(|d| {
            [
                d.domain.clone(),
                if d.pid == 0 { "-".into() } else { d.pid.to_string() },
                d.state.clone(),
                uptime(d.uptime_ms, d.pid),
                d.restarts.to_string(),
                if d.last_exit.is_empty() {
                    "-".into()
                } else {
                    d.last_exit.clone()
                },
                d.next.clone(),
            ]
        })
        .collect();
    let head = [
        "DOMAIN",
        "PID",
        "STATE",
        "UPTIME",
        "RESTARTS",
        "LAST EXIT",
        "NEXT",
    ];
    let mut width = head.map(str::len);
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    for r in std::iter::once(head.map(String::from)).chain(rows) {
        let cells: Vec<String> = r
            .iter()
            .zip(width)
            .enumerate()
            .map(|(i, (c, w))| if i == 6 { c.clone() } else { format!("{c:w$}") })
            .collect();
        writeln!(out, "{}", cells.join("  ").trim_end())?;
    }
    Ok(())
}

fn uptime(ms: u64, pid: u32) -> String {
    match (pid, ms) {
        (0, _) => "-".into(),
        (_, ms) if ms < 60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        (_, ms) if ms < 3_600_000 => format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60),
        (_, ms) => format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_one_field_per_column() {
        let d = DomainStatus {
            domain: "kv".into(),
            pid: 42,
            state: "running".into(),
            uptime_ms: 1500,
            restarts: 2,
            last_exit: "signal 9 (SIGKILL)".into(),
            next: "restart after 400ms if it fails".into(),
        };
        let v = d.to_json();
        assert_eq!(v["domain"], "kv");
        assert_eq!(v["pid"], 42);
        assert_eq!(v["restarts"], 2);
        assert_eq!(v["last_exit"], "signal 9 (SIGKILL)");
        let fresh = DomainStatus {
            last_exit: String::new(),
            ..d
        };
        assert!(fresh.to_json()["last_exit"].is_null());
        assert_eq!(uptime(1500, 1), "1.5s");
        assert_eq!(uptime(125_000, 1), "2m05s");
        assert_eq!(uptime(5, 0), "-");
    }
}
