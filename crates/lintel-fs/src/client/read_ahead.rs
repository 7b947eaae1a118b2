//! Bytes of the host file read ahead, for a mapped handle's reads that
//! take the host file itself ([`Mapped::read_host`]).
//!
//! A program that reads a file through a 16 KiB buffer (`wc`, `grep`, C
//! stdio) makes one `pread` of the host file per read while its handle
//! holds the token. Each costs a system call's entry and, in a process
//! with threads (a served one has the library's), the kernel's reference
//! on the descriptor: most of what a served read costs beyond a native
//! one. A read that goes on where the last one ended fills a buffer of
//! [`AHEAD`] bytes with one `pread` instead, and the reads that follow
//! copy from it: one system call for eight 16 KiB reads. The buffer is
//! made at a handle's first such read and goes with its window: at most
//! 64 of them, 8 MiB, per session (a process's windows on one export).
//!
//! **Why the bytes are the file's.** The buffer holds the host file as one
//! grant of the token found it (`grant`, the handle's count of grants).
//! While the token is here nobody else writes the file: a write anywhere
//! else, a copy-path call of this handle's own included, takes the token
//! back first, and the next operation asks for a new grant. This handle's
//! writes through its window go to the cache, not the host, and forget
//! the buffer ([`ReadAhead::forget`]). So a held byte is the byte a `pread`
//! would read now. A file changed on the host behind the service (not
//! through it) is outside what the service keeps coherent, for windows
//! and this buffer alike.
//!
//! [`Mapped::read_host`]: crate::client::mapped::Mapped::read_host

use crate::proto::FsError;

/// Bytes one fill reads: 128 KiB, which stays in a core's L2 cache
/// between the fill and the reads that copy from it. Measured here, a C
/// loop of 16 KiB reads of a 110 MB file in the page cache, with a
/// second thread (ns per read, two runs each): `pread` each, 2,030 and
/// 2,083; through a 64 KiB buffer, 1,769 and 1,759; 128 KiB, 1,708 (and
/// an outlier); 256 KiB, 1,661 and 1,720.
pub(crate) const AHEAD: usize = 128 << 10;

/// A handle's read-ahead buffer: what it holds and where reads go on.
#[derive(Default)]
pub(crate) struct ReadAhead {
    /// [`AHEAD`] bytes once a read went on from the last; empty before.
    buf: Vec<u8>,
    /// The file offset of `buf[0]`.
    start: u64,
    /// Bytes held; 0: none.
    len: usize,
    /// The token grant they were read under.
    grant: u64,
    /// Where the last read ended: a read from there goes on from it.
    next: u64,
}

impl ReadAhead {
    /// This handle wrote the file: what is held may be stale.
    pub(crate) fn forget(&mut self) {
        self.len = 0;
    }

    /// Read `out.len()` bytes of the file at `at` under token grant
    /// `grant`, where `avail` bytes of the file lie from `at` on (at least
    /// `out.len()`, which the caller cut to the file's size): from what is
    /// held; else, for a read that goes on from the last, by filling the
    /// buffer from `at` through `read` (a `pread` of the host file that
    /// fills what it is given, short only at the file's end); else
    /// through `read` into `out`. The bytes read, as `pread` counts them.
    pub(crate) fn read(
        &mut self,
        at: u64,
        out: &mut [u8],
        avail: u64,
        grant: u64,
        mut read: impl FnMut(&mut [u8], u64) -> Result<usize, FsError>,
    ) -> Result<usize, FsError> {
        let n = out.len();
        if n > 0
            && let Some(held) = self.held(at, n, grant)
        {
            out.copy_from_slice(held);
            self.next = at + n as u64;
            return Ok(n);
        }
        // A read of nothing, a long one, or one elsewhere: the host's
        // `pread` (which answers a read of nothing as Linux does).
        if n == 0 || n > AHEAD / 2 || at != self.next {
            let got = read(out, at)?;
            self.next = at + got as u64;
            return Ok(got);
        }
        if self.buf.is_empty() {
            self.buf = vec![0; AHEAD];
        }
        self.len = 0;
        let want = avail.clamp(n as u64, AHEAD as u64) as usize;
        let got = read(&mut self.buf[..want], at)?;
        (self.start, self.len, self.grant) = (at, got, grant);
        let k = got.min(n);
        out[..k].copy_from_slice(&self.buf[..k]);
        self.next = at + k as u64;
        Ok(k)
    }

    /// The `n` bytes at `at`, if held under `grant`.
    fn held(&self, at: u64, n: usize, grant: u64) -> Option<&[u8]> {
        if self.len == 0 || grant != self.grant || at < self.start {
            return None;
        }
        let from = usize::try_from(at - self.start).ok()?;
        let to = from.checked_add(n)?;
        (to <= self.len).then(|| &self.buf[from..to])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `len` bytes, each its offset's low byte; `read` as the
    /// host's `pread`, counting its calls.
    struct Host {
        bytes: Vec<u8>,
        calls: usize,
    }

    impl Host {
        fn new(len: usize) -> Host {
            Host {
                bytes: (0..len).map(|i| i as u8).collect(),
                calls: 0,
            }
        }

        fn read(&mut self, out: &mut [u8], at: u64) -> Result<usize, FsError> {
            self.calls += 1;
            let from = (at as usize).min(self.bytes.len());
            let n = out.len().min(self.bytes.len() - from);
            out[..n].copy_from_slice(&self.bytes[from..from + n]);
            Ok(n)
        }
    }

    /// `n` bytes at `at` through `ra` under `grant`, checked against the
    /// host's bytes.
    fn read(ra: &mut ReadAhead, host: &mut Host, at: u64, n: usize, grant: u64) -> usize {
        let avail = (host.bytes.len() as u64).saturating_sub(at);
        let n = n.min(avail as usize);
        let mut out = vec![0xee; n];
        let got = ra
            .read(at, &mut out, avail, grant, |b, a| host.read(b, a))
            .unwrap();
        let want = &host.bytes[at as usize..at as usize + got];
        assert_eq!(&out[..got], want, "{n} bytes at {at}");
        got
    }

    #[test]
    fn reads_that_go_on_take_one_host_read_per_buffer() {
        let mut host = Host::new(1 << 20);
        let mut ra = ReadAhead::default();
        let mut at = 0;
        while at < host.bytes.len() as u64 {
            at += read(&mut ra, &mut host, at, 16 << 10, 1) as u64;
        }
        // A new handle's first read at 0 goes on from nothing: one
        // `pread` for each 128 KiB.
        assert_eq!(host.calls, (1 << 20) / AHEAD);
    }

    #[test]
    fn a_new_grant_or_a_write_reads_the_host_again() {
        let mut host = Host::new(1 << 20);
        let mut ra = ReadAhead::default();
        read(&mut ra, &mut host, 0, 4096, 1);
        read(&mut ra, &mut host, 4096, 4096, 1);
        let calls = host.calls;
        read(&mut ra, &mut host, 8192, 4096, 1);
        assert_eq!(host.calls, calls, "held");
        // Someone else wrote meanwhile: the token came back with a new grant.
        host.bytes[12288] = 0xab;
        read(&mut ra, &mut host, 12288, 4096, 2);
        assert_eq!(host.calls, calls + 1);
        // This handle wrote through its window (and that reached the host).
        host.bytes[16384] = 0xcd;
        ra.forget();
        read(&mut ra, &mut host, 16384, 4096, 2);
        assert_eq!(host.calls, calls + 2);
    }

    #[test]
    fn reads_elsewhere_and_long_reads_go_to_the_host() {
        let mut host = Host::new(1 << 20);
        let mut ra = ReadAhead::default();
        read(&mut ra, &mut host, 5000, 100, 1);
        read(&mut ra, &mut host, 300_000, 100, 1);
        read(&mut ra, &mut host, 300_100, AHEAD, 1);
        assert_eq!(host.calls, 3);
        assert!(ra.buf.is_empty(), "nothing read ahead");
        // Held bytes serve a read that does not go on from the last.
        read(&mut ra, &mut host, 300_100 + AHEAD as u64, 10, 1);
        read(&mut ra, &mut host, 300_200 + AHEAD as u64, 10, 1);
        assert_eq!(host.calls, 4);
    }

    #[test]
    fn the_buffer_stops_at_the_files_end_and_a_read_of_nothing_is_the_hosts() {
        let mut host = Host::new(100_000);
        let mut ra = ReadAhead::default();
        read(&mut ra, &mut host, 0, 1000, 1);
        read(&mut ra, &mut host, 1000, 1000, 1);
        assert_eq!((ra.len, host.calls), (100_000, 1));
        assert_eq!(read(&mut ra, &mut host, 99_500, 1000, 1), 500);
        let calls = host.calls;
        let mut out = [];
        let got = ra.read(100_000, &mut out, 0, 1, |b, a| host.read(b, a)).unwrap();
        assert_eq!((got, host.calls), (0, calls + 1));
    }

    #[test]
    fn a_read_across_the_buffers_end_fills_it_again_from_there() {
        let mut host = Host::new(1 << 20);
        let mut ra = ReadAhead::default();
        // Held from 0: 10 bytes, then reads of 10,000 until one crosses
        // the buffer's end, which fills it again from where it starts.
        let mut at = read(&mut ra, &mut host, 0, 10, 1) as u64;
        while at < AHEAD as u64 {
            at += read(&mut ra, &mut host, at, 10_000, 1) as u64;
        }
        assert_eq!(host.calls, 2);
        assert_eq!(ra.start, 10 + (AHEAD as u64 - 10) / 10_000 * 10_000);
    }
}
