//! What a client writes back itself when its service dies.
//!
//! Bytes written through a window live in the file's cache (the service's
//! memfd, mapped here too) until the service takes the token back and
//! writes them to the host file. On Linux a finished `write` is in the
//! kernel's page cache and outlives every process; here the service's
//! death would take such bytes with it, were it not for this: for each
//! file it may write through a window, a client keeps a descriptor of the
//! host file (the service hands one out with the mapping,
//! [`crate::proto::Session::attach`]: the client opened the file
//! for writing, so the descriptor gives it nothing it did not have) and a
//! descriptor of the cache. When the client's watcher sees the service
//! die, it takes back every token the client holds and writes the range
//! the token reports dirty from the cache to the host file, then sets the
//! host size to the token's, exactly what the service's recall would have
//! done (the service's `Node::recall`), with the same function
//! (`proto::write_back`).
//!
//! Only pages the cache holds are written, within the chunks the dirty
//! map marks: a page inside them that the service never filled (a hole of the
//! memfd, found with `SEEK_DATA`) holds nothing this client wrote; its
//! zeros must not reach the host. A page the service filled but this
//! client did not write holds the host's bytes (the service keeps filled
//! pages current), so writing it again changes nothing.
//!
//! What is not covered: a token the service had already taken back and
//! was still writing out when it died (that write-back stops where the
//! service did), and a client that dies before its watcher has written
//! back. Writes made after the death fail with `EIO`.

use std::os::fd::OwnedFd;

use rustix::io::Errno;

use crate::proto::FsError;
use crate::proto::token::{self, DirtyMap, Held, Words};
use crate::proto::write_back::copy_back;

/// The two descriptors a client needs to write one file back.
pub(crate) struct Keeper {
    pub slot: usize,
    /// The host file (written at the offsets given).
    pub host: OwnedFd,
    /// The file's cache.
    pub cache: OwnedFd,
}

impl Keeper {
    /// Take this client's token for the file back from the dead service's
    /// page and write what it reports dirty to the host. Returns the bytes
    /// written (0 if the client held no token).
    pub(crate) fn write_back(&self, desc: &impl Words) -> Result<u64, FsError> {
        let Some(held) = token::salvage(desc) else {
            return Ok(0);
        };
        write_back(&self.cache, &self.host, held, token::dirty_map(desc))
    }
}

/// Write the marked chunks of `held`'s dirty range (within its size) from
/// `cache` to `host`, data pages only, then give `host` the token's size.
pub(crate) fn write_back(cache: &OwnedFd, host: &OwnedFd, held: Held, map: DirtyMap) -> Result<u64, FsError> {
    let lo = held.dirty.0.min(held.size);
    let hi = held.dirty.1.min(held.size);
    let mut runs = Vec::new();
    for (from, to) in map.runs(lo, hi) {
        runs.extend(data_runs(cache, from, to)?);
    }
    copy_back(cache, host, &runs, held.size)
}

/// The runs of `[lo, hi)` that `fd` holds data for (not holes).
fn data_runs(fd: &OwnedFd, lo: u64, hi: u64) -> Result<Vec<(u64, u64)>, FsError> {
    use rustix::fs::{SeekFrom, seek};
    let mut runs = Vec::new();
    let mut at = lo;
    while at < hi {
        let data = match seek(fd, SeekFrom::Data(at)) {
            Ok(d) => d,
            // Nothing but a hole from `at` to the end.
            Err(Errno::NXIO) => break,
            Err(e) => return Err(e.into()),
        };
        if data >= hi {
            break;
        }
        let hole = seek(fd, SeekFrom::Hole(data))?.min(hi);
        runs.push((data, hole));
        at = hole;
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn memfd(name: &str) -> OwnedFd {
        rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC).unwrap()
    }

    fn contents(fd: &OwnedFd) -> Vec<u8> {
        let len = rustix::fs::fstat(fd).unwrap().st_size as usize;
        let mut v = vec![0u8; len];
        let n = rustix::io::pread(fd, &mut v, 0).unwrap();
        v.truncate(n);
        v
    }

    #[test]
    fn only_the_cache_pages_that_hold_data_are_written_back() {
        // The host file: 300,000 bytes of 7s. The cache holds two filled
        // pages, each with a write in it; everything between is a hole.
        let host = memfd("host");
        rustix::io::pwrite(&host, &vec![7u8; 300_000], 0).unwrap();
        let cache = memfd("cache");
        rustix::fs::ftruncate(&cache, 1 << 20).unwrap();
        let mut page = vec![7u8; 4096];
        page[10..20].fill(1);
        rustix::io::pwrite(&cache, &page, 0).unwrap();
        let mut page = vec![7u8; 4096];
        page[250_000 % 4096..250_000 % 4096 + 10].fill(2);
        rustix::io::pwrite(&cache, &page, 250_000 / 4096 * 4096).unwrap();
        let held = Held {
            offset: 0,
            size: 300_000,
            dirty: (10, 250_010),
        };
        write_back(&cache, &host, held, DirtyMap::ALL).unwrap();
        let mut want = vec![7u8; 300_000];
        want[10..20].fill(1);
        want[250_000..250_010].fill(2);
        assert_eq!(contents(&host), want);
    }

    #[test]
    fn only_the_chunks_the_client_marked_are_written_back() {
        // Every page of the cache holds data (the service filled them
        // all); the client wrote at 10 and at 250,000 only.
        let host = memfd("host");
        rustix::io::pwrite(&host, &vec![7u8; 300_000], 0).unwrap();
        let cache = memfd("cache");
        rustix::io::pwrite(&cache, &vec![7u8; 300_000], 0).unwrap();
        let desc = token::Plain::new();
        token::grant(
            &desc,
            0,
            300_000,
            &[0; token::STAT_WORDS],
            Instant::now() + Duration::from_secs(5),
        )
        .unwrap();
        for (at, byte) in [(10u64, 1u8), (250_000, 2)] {
            token::client_mark(&desc, at, at + 10);
            rustix::io::pwrite(&cache, &[byte; 10], at).unwrap();
        }
        let held = Held {
            offset: 0,
            size: 300_000,
            dirty: (10, 250_010),
        };
        let written = write_back(&cache, &host, held, token::dirty_map(&desc)).unwrap();
        let mut want = vec![7u8; 300_000];
        want[10..20].fill(1);
        want[250_000..250_010].fill(2);
        assert_eq!(contents(&host), want);
        assert!(
            written <= 2 * 4096,
            "the two marked pages, not the span: {written} bytes"
        );
    }

    #[test]
    fn the_host_takes_the_tokens_size() {
        let host = memfd("host");
        rustix::io::pwrite(&host, b"0123456789", 0).unwrap();
        let cache = memfd("cache");
        rustix::io::pwrite(&cache, b"0123456789abcdef", 0).unwrap();
        // Grown by a write of "abc" at 10; the rest of the cache is past
        // the size the client reported.
        let grown = Held {
            offset: 13,
            size: 13,
            dirty: (10, 13),
        };
        write_back(&cache, &host, grown, DirtyMap::ALL).unwrap();
        assert_eq!(contents(&host), b"0123456789abc");
        // Cut to 4 with nothing written since.
        let cut = Held {
            offset: 0,
            size: 4,
            dirty: (u64::MAX, 0),
        };
        assert_eq!(write_back(&cache, &host, cut, DirtyMap::ALL).unwrap(), 0);
        assert_eq!(contents(&host), b"0123");
    }
}
