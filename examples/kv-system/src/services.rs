//! The interfaces and their implementations. Each is written once; the
//! generated client calls it directly when the service is in the caller's
//! domain and through the door otherwise.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use lintel::stub::{StubError, Wire};

/// Every service's error: its own failures and lintel's.
#[derive(Debug, Clone, PartialEq, Wire)]
pub enum SysError {
    /// No value under this key.
    NotFound(String),
    /// The call itself failed (peer died, bad message, ...).
    Stub(StubError),
}

impl From<StubError> for SysError {
    fn from(e: StubError) -> Self {
        SysError::Stub(e)
    }
}

impl std::fmt::Display for SysError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SysError::NotFound(k) => write!(f, "no key `{k}`"),
            SysError::Stub(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SysError {}

/// A logical clock: each reading is one tick later than the last.
#[lintel::interface]
pub trait Clock {
    fn now(&self) -> Result<u64, SysError>;
}

/// An append-only log of lines, numbered from 1.
#[lintel::interface]
pub trait Log {
    fn append(&self, line: &str) -> Result<u64, SysError>;
    /// The last `n` lines, oldest first.
    fn tail(&self, n: u32) -> Result<Vec<String>, SysError>;
}

/// A key-value store that stamps each change with the clock and logs it.
#[lintel::interface]
pub trait Kv {
    fn put(&self, key: &str, value: &[u8]) -> Result<(), SysError>;
    fn get(&self, key: &str, value: &mut Vec<u8>) -> Result<(), SysError>;
    /// Whether the key was there.
    fn remove(&self, key: &str) -> Result<bool, SysError>;
    fn keys(&self) -> Result<Vec<String>, SysError>;
}

#[derive(Default)]
pub struct TickClock(AtomicU64);

impl Clock for TickClock {
    fn now(&self) -> Result<u64, SysError> {
        Ok(self.0.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

#[derive(Default)]
pub struct MemoryLog(Mutex<Vec<String>>);

impl Log for MemoryLog {
    fn append(&self, line: &str) -> Result<u64, SysError> {
        let mut lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        lines.push(line.to_string());
        Ok(lines.len() as u64)
    }

    fn tail(&self, n: u32) -> Result<Vec<String>, SysError> {
        let lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let from = lines.len().saturating_sub(n as usize);
        Ok(lines[from..].to_vec())
    }
}

/// The store; its clock and log are clients of whatever domain hosts them.
pub struct Store {
    map: Mutex<BTreeMap<String, Vec<u8>>>,
    clock: ClockClient,
    log: LogClient,
}

impl Store {
    pub fn new(clock: ClockClient, log: LogClient) -> Store {
        Store {
            map: Mutex::new(BTreeMap::new()),
            clock,
            log,
        }
    }

    fn record(&self, what: &str) -> Result<(), SysError> {
        let t = self.clock.now()?;
        self.log.append(&format!("t={t} {what}"))?;
        Ok(())
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Kv for Store {
    fn put(&self, key: &str, value: &[u8]) -> Result<(), SysError> {
        self.map().insert(key.to_string(), value.to_vec());
        self.record(&format!("put {key} ({} bytes)", value.len()))
    }

    fn get(&self, key: &str, value: &mut Vec<u8>) -> Result<(), SysError> {
        let map = self.map();
        let v = map.get(key).ok_or_else(|| SysError::NotFound(key.to_string()))?;
        value.extend_from_slice(v);
        Ok(())
    }

    fn remove(&self, key: &str) -> Result<bool, SysError> {
        let was = self.map().remove(key).is_some();
        if was {
            self.record(&format!("remove {key}"))?;
        }
        Ok(was)
    }

    fn keys(&self) -> Result<Vec<String>, SysError> {
        Ok(self.map().keys().cloned().collect())
    }
}
