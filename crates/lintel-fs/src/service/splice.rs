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
    /// A read ahead asked for the next call ([`Pipes::schedule`]).
    fill: Option<Fill>,
}

/// A pipe's read ahead, made after the reply of the call that asked for
/// it, while the client drains its other pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fill {
    /// Up to `len` bytes from `at`, not spliced yet: the pipe is empty.
    Scheduled { at: u64, len: u32 },
    /// `got` bytes from `at` are in the pipe.
    Done { at: u64, got: usize },
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
                fill: None,
            },
        );
        Ok(number)
    }

    /// Up to `len` bytes of `from` at `at` in pipe `pipe` for a client
    /// reading ahead: those a fill made for `at` put there (or splice them
    /// now, if it was scheduled and has not run); else spliced now, as
    /// [`Self::splice`]. A pipe filled (or to be filled) from another
    /// offset is refused: the client gives it up. How many, and whether
    /// they were spliced now.
    pub(crate) fn read_ahead(
        &mut self,
        from: &OwnedFd,
        pipe: u32,
        at: u64,
        len: u32,
    ) -> Result<(usize, bool), FsError> {
        match self.by_number.get_mut(&pipe).and_then(|p| p.fill.take()) {
            None => {}
            Some(Fill::Done { at: a, got }) if a == at => return Ok((got, false)),
            Some(Fill::Scheduled { at: a, .. }) if a == at => {}
            Some(_) => {
                return Err(FsError::Invalid(format!(
                    "pipe {pipe}: read ahead from another offset"
                )));
            }
        }
        self.splice(from, pipe, at, len).map(|got| (got, true))
    }

    /// Schedule a fill of pipe `pipe` (which the client emptied) with up to
    /// `len` bytes from `at`, made by [`Self::fill`]; whether it is.
    pub(crate) fn schedule(&mut self, pipe: u32, at: u64, len: u32) -> bool {
        let Some(p) = self.by_number.get_mut(&pipe) else {
            return false;
        };
        p.fill = Some(Fill::Scheduled { at, len });
        true
    }

    /// Make pipe `pipe`'s scheduled fill, if it still waits; the bytes
    /// spliced, if any were. A fill that fails is forgotten: the pipe is
    /// then as it was (empty), and the next call for it splices.
    pub(crate) fn fill(&mut self, from: &OwnedFd, pipe: u32) -> Option<usize> {
        let Some(Fill::Scheduled { at, len }) = self.by_number.get(&pipe).and_then(|p| p.fill) else {
            return None;
        };
        let got = self.splice(from, pipe, at, len).ok();
        if let Some(p) = self.by_number.get_mut(&pipe) {
            p.fill = got.map(|got| Fill::Done { at, got });
        }
        got
    }

    /// Forget pipe `pipe`'s scheduled fill (the token is not to be read
    /// under now); a fill already made stays.
    pub(crate) fn unschedule(&mut self, pipe: u32) {
        if let Some(p) = self.by_number.get_mut(&pipe)
            && matches!(p.fill, Some(Fill::Scheduled { .. }))
        {
            p.fill = None;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `len` bytes (byte `i` is `i as u8`), a pipe attached under
    /// its number, and the pipe's read end.
    fn setup(len: usize) -> (OwnedFd, Pipes, u32, OwnedFd, Arc<Tally>) {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, &(0..len).map(|i| i as u8).collect::<Vec<_>>()).unwrap();
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::NONBLOCK).unwrap();
        let tally = Arc::new(Tally::default());
        let mut pipes = Pipes::default();
        let n = pipes.attach(write, &tally).unwrap();
        (OwnedFd::from(f), pipes, n, read, tally)
    }

    fn drain(read: &OwnedFd, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        assert_eq!(rustix::io::read(read, &mut buf).unwrap(), n);
        buf
    }

    #[test]
    fn a_fill_is_taken_once_at_its_offset() {
        let (file, mut pipes, n, read, _t) = setup(10_000);
        assert!(pipes.schedule(n, 100, 1000));
        assert_eq!(pipes.fill(&file, n), Some(1000));
        // Made already: the call takes its bytes without splicing again.
        assert_eq!(pipes.read_ahead(&file, n, 100, 1000).unwrap(), (1000, false));
        assert_eq!(
            drain(&read, 1000),
            (100..1100).map(|i| i as u8).collect::<Vec<_>>()
        );
        // Taken: the next call splices.
        assert_eq!(pipes.read_ahead(&file, n, 1100, 10).unwrap(), (10, true));
        assert_eq!(pipes.fill(&file, n), None, "nothing scheduled");
    }

    #[test]
    fn a_fill_not_yet_made_is_spliced_by_the_call_and_never_again() {
        let (file, mut pipes, n, read, _t) = setup(10_000);
        assert!(pipes.schedule(n, 0, 500));
        assert_eq!(pipes.read_ahead(&file, n, 0, 500).unwrap(), (500, true));
        // The late fill finds nothing to do: no second copy in the pipe.
        assert_eq!(pipes.fill(&file, n), None);
        assert_eq!(drain(&read, 500), (0..500).map(|i| i as u8).collect::<Vec<_>>());
        let mut more = [0u8; 1];
        assert_eq!(rustix::io::read(&read, &mut more), Err(Errno::AGAIN));
    }

    #[test]
    fn a_fill_for_another_offset_is_refused_and_an_unscheduled_one_forgotten() {
        let (file, mut pipes, n, _read, _t) = setup(10_000);
        assert!(pipes.schedule(n, 0, 500));
        assert_eq!(pipes.fill(&file, n), Some(500));
        assert!(matches!(
            pipes.read_ahead(&file, n, 64, 500),
            Err(FsError::Invalid(_))
        ));
        // Scheduled, then called off: the pipe stays as it was.
        assert!(pipes.schedule(n, 500, 500));
        pipes.unschedule(n);
        assert_eq!(pipes.fill(&file, n), None);
        // A pipe not attached takes no fill.
        assert!(!pipes.schedule(n + 1, 0, 10));
    }
}
