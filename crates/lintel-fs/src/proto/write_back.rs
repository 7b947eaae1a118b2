//! What "written back" means for a token taken back from its holder: the
//! dirty runs of the file's cache go to the same offsets of the host file,
//! and the host file takes the token's size. The service does it when it
//! recalls a token (with the runs it filled), a client when its service
//! died holding its writes (with the runs its cache holds data for): both
//! sides run this one function.

use std::os::fd::OwnedFd;

use rustix::io::Errno;

use crate::proto::FsError;

/// Write the byte ranges `runs` of `cache` to the same offsets of `host`,
/// then give `host` the length `size`. The bytes written.
pub(crate) fn copy_back(
    cache: &OwnedFd,
    host: &OwnedFd,
    runs: &[(u64, u64)],
    size: u64,
) -> Result<u64, FsError> {
    let mut written = 0;
    let mut buf = vec![0u8; (1 << 20).min(runs.iter().map(|r| r.1 - r.0).max().unwrap_or(0) as usize)];
    for &(from, to) in runs {
        let mut at = from;
        while at < to {
            let want = ((to - at) as usize).min(buf.len());
            let n = match rustix::io::pread(cache, &mut buf[..want], at) {
                Ok(0) => break,
                Ok(n) => n,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            };
            let mut done = 0;
            while done < n {
                match rustix::io::pwrite(host, &buf[done..n], at + done as u64) {
                    Ok(k) => done += k,
                    Err(Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            at += n as u64;
            written += n as u64;
        }
    }
    set_size(host, size)?;
    Ok(written)
}

/// Give `host` the length `size` (no call if it has it).
pub(crate) fn set_size(host: &OwnedFd, size: u64) -> Result<(), FsError> {
    if rustix::fs::fstat(host)?.st_size as u64 != size {
        rustix::fs::ftruncate(host, size)?;
    }
    Ok(())
}
