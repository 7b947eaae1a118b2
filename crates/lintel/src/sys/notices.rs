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
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use rustix::net::{AddressFamily, SocketFlags, SocketType, socketpair};
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

/// Notices read by one system call.
const BATCH: usize = 64;
/// Most batches read at once: the rest stay queued and readable.
const ROUNDS: usize = 64;

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

    /// Read the queued notices into `out`, up to [`ROUNDS`] batches of
    /// [`BATCH`] (one `recvmmsg` each); true if the queue was found empty.
    /// A batch that comes back short is taken to have emptied it: a notice
    /// that arrives after it makes the socket ready again (the reactor's
    /// readiness is edge-triggered, and the runtime does not clear a
    /// readiness newer than the one it reported), so the common case costs
    /// one system call, not a second one to see it empty.
    fn read(&self, out: &mut Vec<u32>) -> bool {
        for _ in 0..ROUNDS {
            let mut bufs = [[0u8; 4]; BATCH];
            // SAFETY: all-zero bytes are a valid value of these plain C
            // structs (null pointers, zero lengths).
            let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
            for ((m, v), b) in msgs.iter_mut().zip(iov.iter_mut()).zip(bufs.iter_mut()) {
                v.iov_base = b.as_mut_ptr().cast();
                v.iov_len = b.len();
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: `msgs` holds BATCH headers, each naming one iovec of
            // `iov` that names 4 bytes of `bufs`; all of them outlive the
            // call, and the kernel writes only within them.
            let n = unsafe {
                libc::recvmmsg(
                    self.fd.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    BATCH as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if n < 0 {
                // Empty (or unreadable: nothing more will come), unless interrupted.
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return true;
            }
            let n = n as usize;
            for (m, b) in msgs.iter().zip(&bufs).take(n) {
                if m.msg_len == 4 {
                    out.push(u32::from_le_bytes(*b)); // else not a notice: a hostile peer's bytes
                }
            }
            if n < BATCH {
                return true;
            }
        }
        false
    }
}
