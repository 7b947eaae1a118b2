//! `SOCK_SEQPACKET` sockets that carry bytes and file descriptors, and
//! what the kernel says about the peer.

use crate::fd::above_floor;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

/// Most descriptors one socket message may carry; more is a protocol error.
pub const MAX_FDS_PER_MSG: usize = 64;

/// A connected pair of `SOCK_SEQPACKET` sockets: message boundaries kept,
/// each send atomic, hang-up seen by the other end when the last copy closes.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let (a, b) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    Ok((above_floor(a), above_floor(b)))
}

fn seqpacket_socket() -> io::Result<OwnedFd> {
    Ok(above_floor(rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?))
}

/// A `SOCK_SEQPACKET` socket listening at `path` (which must not exist).
pub fn seqpacket_listen(path: &std::path::Path) -> io::Result<OwnedFd> {
    let sock = seqpacket_socket()?;
    rustix::net::bind(&sock, &rustix::net::SocketAddrUnix::new(path)?)?;
    rustix::net::listen(&sock, 16)?;
    Ok(sock)
}

/// Accept one connection: the socket, the peer's pid as the kernel records
/// it, and whether the peer runs as our user.
pub fn seqpacket_accept(listener: BorrowedFd<'_>) -> io::Result<(OwnedFd, u32, u32)> {
    let sock = above_floor(rustix::net::accept_with(listener, SocketFlags::CLOEXEC)?);
    let cred = rustix::net::sockopt::socket_peercred(&sock)?;
    Ok((sock, cred.pid.as_raw_nonzero().get() as u32, cred.uid.as_raw()))
}

/// A `SOCK_SEQPACKET` socket connected to the listener at `path`.
pub fn seqpacket_connect(path: &std::path::Path) -> io::Result<OwnedFd> {
    let sock = seqpacket_socket()?;
    rustix::net::connect(&sock, &rustix::net::SocketAddrUnix::new(path)?)?;
    Ok(sock)
}

/// Send one message with `fds` attached.
pub fn send_msg(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS_PER_MSG))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors",
        ));
    }
    let iov = [io::IoSlice::new(bytes)];
    loop {
        match rustix::net::sendmsg(sock, &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(_) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// What one non-blocking receive found.
pub enum Recv {
    /// A message of this many bytes (into the caller's buffer), with its fds
    /// and, on a socket with [`set_passcred`], the sender's pid as the kernel
    /// vouches for it.
    Msg(usize, Vec<OwnedFd>, Option<u32>),
    /// The peer closed its end.
    Closed,
    /// Nothing queued now.
    Empty,
}

/// Receive one message without blocking. Descriptors that arrive are always
/// taken into `OwnedFd`s, so a caller that rejects the message closes them.
pub fn recv_msg(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Recv> {
    let mut space = [std::mem::MaybeUninit::<u8>::uninit();
        rustix::cmsg_space!(ScmRights(MAX_FDS_PER_MSG), ScmCredentials(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [io::IoSliceMut::new(buf)];
    let r = loop {
        match rustix::net::recvmsg(
            sock,
            &mut iov,
            &mut control,
            RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => return Ok(Recv::Empty),
            Err(rustix::io::Errno::CONNRESET) => return Ok(Recv::Closed),
            Err(e) => return Err(e.into()),
            Ok(r) => break r,
        }
    };
    let mut fds = Vec::new();
    let mut pid = None;
    for msg in control.drain() {
        match msg {
            RecvAncillaryMessage::ScmRights(iter) => fds.extend(iter.map(above_floor)),
            RecvAncillaryMessage::ScmCredentials(c) => pid = Some(c.pid.as_raw_nonzero().get() as u32),
            _ => {}
        }
    }
    if r.bytes == 0 && fds.is_empty() {
        return Ok(Recv::Closed);
    }
    if r.flags.contains(rustix::net::ReturnFlags::TRUNC) || r.flags.contains(rustix::net::ReturnFlags::CTRUNC)
    {
        // Oversized: the fds (if any) are dropped here, the message refused.
        return Ok(Recv::Msg(usize::MAX, Vec::new(), None));
    }
    Ok(Recv::Msg(r.bytes, fds, pid))
}

/// Ask the kernel to attach the sender's credentials to every message this
/// socket receives from now on. Set it before the peer sends: the kernel
/// decides at send time.
pub fn set_passcred(sock: BorrowedFd<'_>) -> io::Result<()> {
    Ok(rustix::net::sockopt::set_socket_passcred(sock, true)?)
}

/// The pid of the process that created the peer end of `sock`, as the kernel
/// recorded it (not as the peer claims).
pub fn peer_pid(sock: BorrowedFd<'_>) -> io::Result<u32> {
    let cred = rustix::net::sockopt::socket_peercred(sock)?;
    Ok(cred.pid.as_raw_nonzero().get() as u32)
}
