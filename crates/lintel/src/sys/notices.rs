//! The notice socket of a call area: a `SOCK_DGRAM` socketpair whose one end
//! the serving domain holds and sends a slot's index on (4 bytes, never
//! blocking) when it replies to a parked call, and whose other end this
//! domain reads, registered with the async runtime's reactor.
//!
//! A datagram socket, not an eventfd: each end is its own open file, so
//! nothing the peer does to its end (clearing `O_NONBLOCK`, filling the
//! queue) can make our reads block, and its sends never block either.
//!
//! The end we read is registered once, with a waker the caller supplies
//! ([`Notices::drain_and_arm`]): the reactor wakes it when notices come,
//! and it reads them and arms again, so no task or thread waits on the
//! socket for its own sake.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use rustix::net::{AddressFamily, RecvFlags, SocketFlags, SocketType, recv, socketpair};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::sys::above_floor;

/// Our end of a notice socket.
pub struct Notices {
    fd: Arc<OwnedFd>,
    /// The registration with a runtime's reactor, once armed.
    io: Mutex<Option<AsyncFd<Shared>>>,
}

/// The socket as the reactor holds it (the descriptor stays ours).
struct Shared(Arc<OwnedFd>);

impl AsRawFd for Shared {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Most notices read in one go: the rest stay queued and readable.
const BATCH: usize = 4096;

impl Notices {
    /// A new socket pair: our end, and the end to send the serving domain.
    pub fn pair() -> io::Result<(Notices, OwnedFd)> {
        let (ours, theirs) = socketpair(
            AddressFamily::UNIX,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )?;
        let notices = Notices {
            fd: Arc::new(above_floor(ours)),
            io: Mutex::new(None),
        };
        Ok((notices, above_floor(theirs)))
    }

    /// Whether a waker is registered with a reactor.
    pub fn armed(&self) -> bool {
        self.io.lock().is_some()
    }

    /// Read the notices queued into `out` (slot indices), then register
    /// `waker` with the reactor for the next one. The first call registers
    /// the socket with the current task's runtime (it must have I/O
    /// enabled); later ones, typically made by `waker` itself when woken,
    /// need no runtime context.
    ///
    /// `Ok(true)`: more were queued than one call reads (a peer flooding
    /// the socket); they stay queued, and the caller must look at every
    /// parked call rather than trust `out`. An error means the reactor is
    /// gone (its runtime shut down): the socket is unregistered, to be
    /// armed again from a task of a live runtime.
    pub fn drain_and_arm(&self, waker: &Waker, out: &mut Vec<u32>) -> io::Result<bool> {
        let mut io = self.io.lock();
        if io.is_none() {
            if tokio::runtime::Handle::try_current().is_err() {
                return Err(io::Error::other("not in a tokio runtime"));
            }
            // SAFETY: `Shared` holds the descriptor open (an `Arc` of the
            // `OwnedFd`) for as long as the registration that owns it, and
            // always names the same descriptor.
            let afd = unsafe { AsyncFd::register_with_interest(Shared(self.fd.clone()), Interest::READABLE) };
            *io = Some(afd.map_err(|e| e.into_parts().1)?);
        }
        let Some(afd) = io.as_ref() else {
            unreachable!("registered above")
        };
        let mut cx = Context::from_waker(waker);
        let mut flooded = false;
        loop {
            match afd.poll_read_ready(&mut cx) {
                Poll::Pending => return Ok(flooded),
                Poll::Ready(Ok(mut ready)) => {
                    // Readiness is cleared even when the batch ran out:
                    // the next notice sent makes the socket ready again.
                    flooded |= !self.read(out);
                    ready.clear_ready();
                }
                Poll::Ready(Err(e)) => {
                    *io = None;
                    return Err(e);
                }
            }
        }
    }

    /// Read up to a batch of queued notices into `out`; true if the queue
    /// is empty now (or will give nothing more).
    fn read(&self, out: &mut Vec<u32>) -> bool {
        let mut buf = [0u8; 4];
        for _ in 0..BATCH {
            match recv(self.fd.as_fd(), &mut buf, RecvFlags::DONTWAIT) {
                Ok((4, _)) => out.push(u32::from_le_bytes(buf)),
                Ok((0, _)) => return true, // the peer's end is closed
                Ok(_) => continue,         // not a notice: a hostile peer's bytes
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return true, // empty
            }
        }
        false
    }
}
