//! Spliced reads: large copy-path reads whose bytes come through a pipe of
//! the client's instead of through the call.
//!
//! A read through the call copies each byte several times on its way
//! (host page cache into the service's buffer, into the reply's segment,
//! out of it). Here the client attaches the write end of a pipe to the
//! open file once ([`OpenFile::attach_pipe`]); each read asks the service
//! to `splice` the range into it (the kernel moves page references, no
//! copy) and then reads the bytes out of the pipe straight into the
//! caller's buffer: one copy, the one a native `read` makes. The pipe
//! never blocks either side: the service splices without blocking (a pipe
//! left with bytes in it is refused), and the client's end is
//! non-blocking, so a service that promises bytes it did not send gets an
//! error, not a hang. Any trouble with the pipe drops it; the read then
//! goes through the call.
//!
//! Coherence is the copy path's: the service splices under the file's
//! token lock, with the host file current; the bytes a read returns are
//! the file's at that moment (or, for a write racing the read, a mix, as
//! between a Linux `read` and a concurrent `write`).
//!
//! A mapped file whose token is with this client reads ahead instead: one
//! call splices a pipeful from the offset, and the reads that follow drain
//! it with no call ([`crate::mapped`], `Mapped::read_streamed`). The pipe
//! then holds bytes beyond the last read, recorded in `Ahead`; a read
//! through the call first drops such a pipe, since the service's splice
//! must find it empty.
//!
//! This is the client's side; the service's (its attached pipes and the
//! `splice`) is `service::splice`.

use std::os::fd::OwnedFd;

use rustix::io::Errno;
use rustix::pipe::PipeFlags;

use crate::proto::{FsError, MAX_IO, OpenFile, OpenFileClient};

/// Reads of at least this many bytes that do not take the mapped path are
/// spliced. Smaller ones go through the call: at 4 KiB the two ways
/// measured alike (2.2–2.5× a native `read` either way, suite `fs`), and
/// the call needs no pipe.
pub const SPLICE_MIN: usize = 8 << 10;

/// The pipe size asked for (Linux's default limit for an unprivileged
/// process, `/proc/sys/fs/pipe-max-size`); a smaller pipe serves too.
const PIPE_SIZE: usize = 1 << 20;

const PAGE: usize = 4096;

/// A file handle's pipe, attached or not.
#[derive(Default)]
pub(crate) enum Pipe {
    /// Not tried yet.
    #[default]
    Unattached,
    Attached {
        read: OwnedFd,
        number: u32,
        /// Bytes asked for at most per call: the pipe's size less a page,
        /// since a range that does not start on a page boundary takes one
        /// page slot more than its length says.
        per_call: usize,
        /// Bytes read ahead and still in the pipe (mapped files only, see
        /// [`crate::mapped`]).
        ahead: Option<Ahead>,
    },
    /// Attaching failed (no pipes left, an old service): copy path only.
    Refused,
}

/// A handle's pipes. Reads come through `now`. A read ahead (mapped files
/// only) also names `then`, empty, and the service fills it with the
/// pipeful that follows after its reply, while `now` is drained; the read
/// that reaches that offset swaps the two and finds the bytes waiting.
#[derive(Default)]
pub(crate) struct Pipes {
    pub now: Pipe,
    pub then: Pipe,
    /// What `then` was asked to hold: the file's bytes from `.0` on, read
    /// under token grant `.1`. `None`: `then` is empty.
    pub asked: Option<(u64, u64)>,
}

impl Pipes {
    /// Drop both pipes: a call that failed may still fill either.
    pub(crate) fn drop_all(&mut self) {
        *self = Pipes::default();
    }
}

impl Pipe {
    /// Whether this pipe is attached with nothing in it (a pipe that held
    /// bytes for a read that took them all is).
    pub(crate) fn is_empty_attached(&self) -> bool {
        matches!(self, Pipe::Attached { ahead, .. } if ahead.is_none_or(|h| h.len == 0))
    }
}

/// What a pipe holds ahead of the reader: `len` bytes of the file from
/// `start` on, spliced under the token grant numbered `grant`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ahead {
    pub start: u64,
    pub len: usize,
    pub grant: u64,
}

impl Pipe {
    /// Attach a pipe if none is (a pipe with bytes read ahead in it is
    /// dropped first: a call must find it empty); the attached pipe's
    /// read end, number, bytes per call and read-ahead state.
    pub(crate) fn ready(
        &mut self,
        file: &OpenFileClient,
        keep_ahead: bool,
    ) -> Option<(&OwnedFd, u32, usize, &mut Option<Ahead>)> {
        if let Pipe::Attached { ahead: Some(a), .. } = self
            && (a.len > 0 && !keep_ahead)
        {
            *self = Pipe::Unattached;
        }
        if let Pipe::Unattached = self {
            *self = attach(file);
        }
        match self {
            Pipe::Attached {
                read,
                number,
                per_call,
                ahead,
            } => Some((&*read, *number, *per_call, ahead)),
            _ => None,
        }
    }

    /// Read into `buf` at `at` (or the shared offset) through the pipe:
    /// as many bytes as a read through the call gives (all of `buf` up
    /// to [`MAX_IO`], fewer only at the end of the file), in rounds of the
    /// pipe's size. `Ok(None)`: no pipe to use; read through the call.
    pub(crate) fn read(
        &mut self,
        file: &OpenFileClient,
        at: Option<u64>,
        buf: &mut [u8],
    ) -> Result<Option<usize>, FsError> {
        let total = buf.len().min(MAX_IO as usize);
        let mut done = 0;
        while done < total {
            let Some((read, number, per_call, ahead)) = self.ready(file, false) else {
                return Ok((done > 0).then_some(done));
            };
            *ahead = None;
            let want = (total - done).min(per_call);
            let spliced = match at {
                Some(at) => file.read_spliced_at(number, at + done as u64, want as u32),
                None => file.read_spliced(number, want as u32),
            };
            let n = match spliced {
                Ok(n) => n as usize,
                Err(FsError::Invalid(_)) => {
                    // The pipe or this file cannot be spliced: this handle
                    // reads through the call from now on.
                    *self = Pipe::Refused;
                    continue;
                }
                Err(e) => {
                    // The call failed (the service died, a deadline
                    // passed, ...): a late splice may still land in this
                    // pipe, so it is dropped.
                    *self = Pipe::Unattached;
                    if done > 0 {
                        tracing::debug!("a spliced read stopped short: {e}");
                        break;
                    }
                    return Err(e);
                }
            };
            let drained = if n > want {
                Err(FsError::Invalid(format!(
                    "the service spliced {n} bytes for {want}"
                )))
            } else {
                drain(read, &mut buf[done..done + n])
            };
            if let Err(e) = drained {
                *self = Pipe::Unattached;
                return Err(e);
            }
            done += n;
            if n < want {
                break;
            }
        }
        Ok(Some(done))
    }
}

/// A new pipe, its write end attached to `file`.
fn attach(file: &OpenFileClient) -> Pipe {
    let Ok((read, write)) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK) else {
        return Pipe::Refused;
    };
    // Out of the way of programs that choose descriptor numbers (the
    // write end leaves with the call, but is ours until then).
    let (read, write) = (
        lintel::above_descriptor_floor(read),
        lintel::above_descriptor_floor(write),
    );
    let size = rustix::pipe::fcntl_setpipe_size(&write, PIPE_SIZE)
        .or_else(|_| rustix::pipe::fcntl_getpipe_size(&write))
        .unwrap_or(16 * PAGE);
    if size < 2 * PAGE {
        return Pipe::Refused;
    }
    match file.attach_pipe(write) {
        Ok(number) => Pipe::Attached {
            read,
            number,
            per_call: size - PAGE,
            ahead: None,
        },
        Err(_) => Pipe::Refused,
    }
}

/// Read exactly `buf.len()` bytes the service put in the pipe.
pub(crate) fn drain(read: &OwnedFd, buf: &mut [u8]) -> Result<(), FsError> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::read(read, &mut buf[done..]) {
            Ok(0) | Err(Errno::AGAIN) => {
                return Err(FsError::Invalid(format!(
                    "the service promised {} bytes in the pipe and sent {done}",
                    buf.len()
                )));
            }
            Ok(k) => done += k,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
