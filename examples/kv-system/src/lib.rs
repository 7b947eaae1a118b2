//! The example system's interfaces and their implementations, a library
//! so that tests (and other programs) can be its clients. Each is written
//! once; the generated client calls it directly when the service is in
//! the caller's domain and through the door otherwise.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use lintel::stub::{StubError, Wire};

/// Every service's error: its own failures and lintel's.
#[derive(Debug, Clone, PartialEq, Wire)]
pub enum SysError {
    /// No value under this key.
    NotFound(String),
    /// The store could not keep a change (its journal failed).
    Storage(String),
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
            SysError::Storage(e) => write!(f, "the change was not kept: {e}"),
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

/// The log as the system serves it: with `async fn`s, run as tasks of its
/// domain's tokio runtime (`LogAsyncServer`); its clients, blocking or
/// awaited, cannot tell.
impl LogAsync for MemoryLog {
    async fn append(&self, line: &str) -> Result<u64, SysError> {
        Log::append(self, line)
    }

    async fn tail(&self, n: u32) -> Result<Vec<String>, SysError> {
        // Let the runtime's other tasks run while a long tail is copied.
        tokio::task::yield_now().await;
        Log::tail(self, n)
    }
}

/// The store; its clock and log are clients of whatever domain hosts them.
/// Every change is in its journal, in the file service, before the call
/// that made it returns, so a restarted store answers as the old one did.
pub struct Store {
    map: Mutex<BTreeMap<String, Vec<u8>>>,
    clock: ClockClient,
    log: LogClient,
    journal: Journal,
}

impl Store {
    /// The store as its journal left it.
    pub fn open(clock: ClockClient, log: LogClient, journal: Journal) -> Store {
        let map = Mutex::new(journal.recovered.clone());
        Store {
            map,
            clock,
            log,
            journal,
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
        let mut map = self.map();
        self.journal.append(Change::Put, key, value)?;
        map.insert(key.to_string(), value.to_vec());
        drop(map);
        self.record(&format!("put {key} ({} bytes)", value.len()))
    }

    fn get(&self, key: &str, value: &mut Vec<u8>) -> Result<(), SysError> {
        let map = self.map();
        let v = map.get(key).ok_or_else(|| SysError::NotFound(key.to_string()))?;
        value.extend_from_slice(v);
        Ok(())
    }

    fn remove(&self, key: &str) -> Result<bool, SysError> {
        let mut map = self.map();
        let was = map.contains_key(key);
        if was {
            self.journal.append(Change::Remove, key, b"")?;
            map.remove(key);
        }
        drop(map);
        if was {
            self.record(&format!("remove {key}"))?;
        }
        Ok(was)
    }

    fn keys(&self) -> Result<Vec<String>, SysError> {
        Ok(self.map().keys().cloned().collect())
    }
}

/// A change as the journal records it.
#[derive(Clone, Copy)]
enum Change {
    Put = 1,
    Remove = 2,
}

/// The store's journal: a file of the file service's export, one record
/// per change (`kind: u8, key length: u32 LE, value length: u32 LE, key,
/// value`), appended and `fsync`ed before the change is made. At start-up
/// it is read back; a record cut short (the store died while writing it,
/// so its caller never heard it succeed) is cut off.
pub struct Journal {
    file: lintel_fs::File,
    /// What the journal held when opened.
    recovered: BTreeMap<String, Vec<u8>>,
}

impl Journal {
    /// Open (or create) the journal at `path` in `fs`'s export and read
    /// it back.
    pub fn open(fs: &lintel_fs::Fs, path: &str) -> Result<Journal, lintel_fs::FsError> {
        let mut o = lintel_fs::OpenOptions::new();
        o.read(true).append(true).create(true);
        let file = fs.open_with(path, &o)?;
        let bytes = fs.read(path)?;
        let (recovered, whole) = replay(&bytes);
        if whole < bytes.len() {
            file.set_len(whole as u64)?;
        }
        Ok(Journal { file, recovered })
    }

    fn append(&self, kind: Change, key: &str, value: &[u8]) -> Result<(), SysError> {
        let mut rec = Vec::with_capacity(9 + key.len() + value.len());
        rec.push(kind as u8);
        rec.extend_from_slice(&(key.len() as u32).to_le_bytes());
        rec.extend_from_slice(&(value.len() as u32).to_le_bytes());
        rec.extend_from_slice(key.as_bytes());
        rec.extend_from_slice(value);
        // The file service died under the call: a death like any other.
        let failed = |e: lintel_fs::FsError| match e {
            lintel_fs::FsError::Stub(e) => SysError::Stub(e),
            e => SysError::Storage(e.to_string()),
        };
        let n = self.file.write_shared(&rec).map_err(failed)?;
        if n != rec.len() {
            return Err(SysError::Storage(format!(
                "the journal took {n} of {} bytes",
                rec.len()
            )));
        }
        self.file.sync_data().map_err(failed)
    }
}

/// The map a journal's bytes describe, and how many of its bytes are
/// whole records.
fn replay(mut bytes: &[u8]) -> (BTreeMap<String, Vec<u8>>, usize) {
    let total = bytes.len();
    let mut map = BTreeMap::new();
    while let Some((&kind, rest)) = bytes.split_first() {
        let Some((head, rest)) = rest.split_first_chunk::<8>() else {
            break;
        };
        let klen = u32::from_le_bytes(head[..4].try_into().unwrap()) as usize;
        let vlen = u32::from_le_bytes(head[4..].try_into().unwrap()) as usize;
        if rest.len() < klen + vlen {
            break;
        }
        let key = String::from_utf8_lossy(&rest[..klen]).into_owned();
        match kind {
            1 => {
                map.insert(key, rest[klen..klen + vlen].to_vec());
            }
            _ => {
                map.remove(&key);
            }
        }
        bytes = &rest[klen + vlen..];
    }
    (map, total - bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u8, key: &str, value: &[u8]) -> Vec<u8> {
        let mut r = vec![kind];
        r.extend_from_slice(&(key.len() as u32).to_le_bytes());
        r.extend_from_slice(&(value.len() as u32).to_le_bytes());
        r.extend_from_slice(key.as_bytes());
        r.extend_from_slice(value);
        r
    }

    #[test]
    fn a_journal_replays_whole_records_and_stops_at_a_torn_one() {
        let mut j = [record(1, "a", b"1"), record(1, "b", b"two"), record(2, "a", b"")].concat();
        let whole = j.len();
        j.extend_from_slice(&record(1, "c", b"cut short")[..7]);
        let (map, n) = replay(&j);
        assert_eq!(n, whole);
        assert_eq!(map.len(), 1);
        assert_eq!(map["b"], b"two");
        assert_eq!(replay(&[]), (BTreeMap::new(), 0));
    }
}
