//! An epoll instance watching sockets for input and hang-up.

use crate::fd::above_floor;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::event::epoll;

/// An epoll instance watching connection sockets for input and hang-up.
pub struct Poller {
    fd: OwnedFd,
}

impl Poller {
    /// A new epoll instance, its descriptor above the floor.
    pub fn new() -> io::Result<Poller> {
        Ok(Poller {
            fd: above_floor(epoll::create(epoll::CreateFlags::CLOEXEC)?),
        })
    }

    /// Watch `fd` for input or hang-up, reported with `key`.
    pub fn add(&self, fd: BorrowedFd<'_>, key: u64) -> io::Result<()> {
        Ok(epoll::add(
            &self.fd,
            fd,
            epoll::EventData::new_u64(key),
            epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
        )?)
    }

    /// Stop watching `fd` (nothing if it was not watched).
    pub fn remove(&self, fd: BorrowedFd<'_>) {
        let _ = epoll::delete(&self.fd, fd);
    }

    /// Wait for events, at most `timeout` if given; returns the keys of
    /// ready sources.
    pub fn wait(&self, keys: &mut Vec<u64>, timeout: Option<std::time::Duration>) {
        let mut events: Vec<epoll::Event> = Vec::with_capacity(64);
        let timeout = timeout.and_then(|t| rustix::time::Timespec::try_from(t).ok());
        let _ = epoll::wait(
            &self.fd,
            rustix::buffer::spare_capacity(&mut events),
            timeout.as_ref(),
        );
        keys.clear();
        keys.extend(events.iter().map(|e| e.data.u64()));
    }
}

impl AsFd for Poller {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
