//! The service's side of spliced reads: the pipes clients attach to an
//! open file ([`crate::proto::OpenFile::attach_pipe`]) and the `splice`
//! that moves a file's bytes into one by reference. The client's side,
//! and why, is `client::spliced`.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use rustix::fs::OFlags;
use rustix::io::Errno;

use crate::proto::{FsError, MAX_IO};
use crate::service::tally::Tally;

/// The pipes attached to an open file, by number. A number is never given
/// out twice: a late call naming a pipe its client gave up on (a deadline
/// passed) finds nothing, never the client's next pipe.
#[derive(Default)]
pub(crate) struct Pipes {
    next: u32,
    by_number: HashMap<u32, AttachedPipe>,
}

/// A client's pipe (its write end), counted against the export's bound
/// while it is attached.
struct AttachedPipe {
    fd: OwnedFd,
    tally: Arc<Tally>,
}

impl Drop for AttachedPipe {
    fn drop(&mut self) {
        self.tally.pipes.fetch_sub(1, SeqCst);
    }
}

/// Most pipes an export keeps attached at once, over all its open files:
/// a pipe left full by its client holds up to a megabyte of the host's
/// page cache, so the bound bounds that too. Clients past it read through
/// the call.
pub const MAX_EXPORT_PIPES: u64 = 256;

/// Most pipes one open file keeps attached (one per client process that
/// reads it in large pieces); a client past it takes the copy path.
pub const MAX_PIPES: usize = 64;

/// `pipe` is the write end of a pipe, or the caller is told it is not.
pub(crate) fn check_write_end(pipe: &OwnedFd) -> Result<(), FsError> {
    let st = rustix::fs::fstat(pipe)?;
    let mode = rustix::fs::fcntl_getfl(pipe)? & OFlags::ACCMODE;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Fifo || mode != OFlags::WRONLY
    {
        return Err(FsError::Invalid("not the write end of a pipe".into()));
    }
    Ok(())
}

impl Pipes {
    /// Attach `pipe` (a write end, [`check_write_end`]) under a new
    /// number, counted in `tally` against [`MAX_EXPORT_PIPES`]; the number.
    pub(crate) fn attach(&mut self, pipe: OwnedFd, tally: &Arc<Tally>) -> Result<u32, FsError> {
        use rustix::event::{PollFd, PollFlags, poll};
        // A pipe whose reader is gone says so (POLLERR): it makes room.
        self.by_number.retain(|_, p| {
            let mut fds = [PollFd::new(&p.fd, PollFlags::OUT)];
            let gone = poll(&mut fds, Some(&rustix::time::Timespec::default())).is_ok()
                && fds[0].revents().contains(PollFlags::ERR);
            !gone
        });
        if self.by_number.len() >= MAX_PIPES {
            return Err(FsError::Invalid(format!("{MAX_PIPES} pipes attached already")));
        }
        let Some(number) = self.next.checked_add(1) else {
            return Err(FsError::Invalid("no pipe numbers left".into()));
        };
        if tally.pipes.fetch_add(1, SeqCst) >= MAX_EXPORT_PIPES {
            tally.pipes.fetch_sub(1, SeqCst);
            return Err(FsError::Invalid(format!(
                "the export has {MAX_EXPORT_PIPES} pipes attached already"
            )));
        }
        self.next = number;
        self.by_number.insert(
            number,
            AttachedPipe {
                fd: pipe,
                tally: tally.clone(),
            },
        );
        Ok(number)
    }

    /// Move up to `len` bytes of `from` at `at` into attached pipe `pipe`
    /// by reference (`splice`); how many. Never blocks on the pipe: one the
    /// client left bytes in, or a broken one, is an `Invalid` error (the
    /// client then drops it), as is a file the kernel cannot splice.
    pub(crate) fn splice(&mut self, from: &OwnedFd, pipe: u32, at: u64, len: u32) -> Result<usize, FsError> {
        use rustix::pipe::{SpliceFlags, splice};
        let unusable = |why: &str| FsError::Invalid(format!("pipe {pipe}: {why}"));
        let Some(to) = self.by_number.get(&pipe).map(|p| &p.fd) else {
            return Err(unusable("not attached"));
        };
        let len = len.min(MAX_IO) as usize;
        let (mut off, mut done) = (at, 0);
        while done < len {
            match splice(from, Some(&mut off), to, None, len - done, SpliceFlags::NONBLOCK) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(Errno::INTR) => {}
                Err(_) if done > 0 => break,
                Err(Errno::AGAIN) => return Err(unusable("full")),
                Err(Errno::PIPE) => {
                    self.by_number.remove(&pipe);
                    return Err(unusable("its reader is gone"));
                }
                Err(Errno::INVAL) => return Err(unusable("the file cannot be spliced")),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(done)
    }
}
