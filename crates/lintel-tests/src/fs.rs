//! The file-service tests' peers: a service domain, and client domains
//! that the test drives through a door of their own ([`FsPeer`]), so that
//! several processes can use one export, or one open file, in the order a
//! test chooses.

use std::path::Path;
use std::process::{Child, Command};

use lintel::Door;
use lintel_fs::{Fs, FsError, Stat};

/// What a client process does on the test's behalf, with the export door
/// it was given at start and the files it opened or was handed (numbered
/// from 0 in the order they came).
#[lintel::interface]
pub trait FsPeer {
    /// Open `path` with `open(2)` flags, on path `io` (0 auto, 1 copy,
    /// 2 mapped, 3 copy with every read spliced, 4 copy with none
    /// spliced); the file's number.
    fn open(&self, path: Vec<u8>, flags: u32, io: u8) -> Result<u32, FsError>;
    /// [`FsPeer::open`] with the mode a created file gets.
    fn open_mode(&self, path: Vec<u8>, flags: u32, mode: u32, io: u8) -> Result<u32, FsError>;
    /// Close a file the peer holds (its number is not reused).
    fn close(&self, file: u32) -> Result<(), FsError>;
    /// Writes the background writer has finished so far.
    fn written(&self) -> Result<u64, FsError>;
    fn is_mapped(&self, file: u32) -> Result<bool, FsError>;
    /// Misbehave on `path` through a session of its own, made with the raw
    /// protocol: take the file's token, then `how` = 0: hold the share
    /// lock for ever; 1: keep the token active for ever; 2: write garbage
    /// over the whole shared page.
    fn misbehave(&self, path: Vec<u8>, how: u8) -> Result<(), FsError>;
    /// What the misbehaving session's calls get now: errnos of a token
    /// request and of a copy-path read of its file (0: it worked).
    fn misbehaved_probe(&self) -> Result<(i32, i32), FsError>;
    /// Keep an open file's door passed by the test; the file's number.
    fn adopt(&self, file: Door) -> Result<u32, FsError>;
    fn read(&self, file: u32, len: u32, out: &mut Vec<u8>) -> Result<(), FsError>;
    fn write(&self, file: u32, data: &[u8]) -> Result<u64, FsError>;
    fn read_at(&self, file: u32, at: u64, len: u32, out: &mut Vec<u8>) -> Result<(), FsError>;
    fn write_at(&self, file: u32, at: u64, data: &[u8]) -> Result<u64, FsError>;
    /// `whence`: 0 start, 1 current, 2 end, 3 data, 4 hole (as `lseek`).
    fn seek(&self, file: u32, whence: u8, delta: i64) -> Result<u64, FsError>;
    fn stat(&self, file: u32) -> Result<Stat, FsError>;
    fn truncate(&self, file: u32, len: u64) -> Result<(), FsError>;
    /// `fallocate(2)` with `mode` ([`lintel_fs::File::allocate`]).
    fn allocate(&self, file: u32, mode: u32, offset: u64, len: u64) -> Result<(), FsError>;
    /// Set or clear `O_APPEND` ([`lintel_fs::File::set_append`]); then
    /// whether it is set, as the service says.
    fn set_append(&self, file: u32, on: bool) -> Result<bool, FsError>;
    fn sync(&self, file: u32) -> Result<(), FsError>;
    /// Write `data` at the shared offset `times` times, from a thread of
    /// its own, returning at once (for killing a client mid-write); each
    /// write finished counts in [`FsPeer::written`].
    fn write_in_background(&self, file: u32, data: Vec<u8>, times: u32) -> Result<(), FsError>;
}

/// A process serving an export of `root`; killed when dropped.
pub struct FsService {
    pub child: Child,
    pub fs: Fs,
}

impl FsService {
    pub fn start(root: &Path, read_only: bool) -> FsService {
        FsService::start_with(root, read_only, lintel_fs::LOCK_TIMEOUT)
    }

    /// With the share-lock timeout after which a client is evicted.
    pub fn start_with(root: &Path, read_only: bool, lock_timeout: std::time::Duration) -> FsService {
        FsService::start_env(root, read_only, lock_timeout, &[])
    }

    /// With environment variables for the service's process.
    pub fn start_env(
        root: &Path,
        read_only: bool,
        lock_timeout: std::time::Duration,
        env: &[(&str, &str)],
    ) -> FsService {
        let mut cmd = Command::new(crate::bin_path("lintel-fs-peer"));
        cmd.envs(env.iter().copied());
        cmd.arg("serve")
            .arg(root)
            .arg(if read_only { "read-only" } else { "read-write" })
            .arg(lock_timeout.as_millis().to_string());
        let s = lintel::boot::spawn(&mut cmd, &[]).expect("spawn the file service");
        let door = s.doors.into_iter().next().expect("the service offers its export");
        FsService {
            child: s.child,
            fs: Fs::from_door(door),
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for FsService {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A client process holding `export`; killed when dropped.
pub struct FsClientPeer {
    pub child: Child,
    pub peer: FsPeerClient,
}

impl FsClientPeer {
    pub fn start(export: &Door) -> FsClientPeer {
        let mut cmd = Command::new(crate::bin_path("lintel-fs-peer"));
        cmd.arg("client");
        let s = lintel::boot::spawn(&mut cmd, std::slice::from_ref(export)).expect("spawn a client");
        let door = s
            .doors
            .into_iter()
            .next()
            .expect("the client offers its control door");
        FsClientPeer {
            child: s.child,
            peer: FsPeerClient::from_door(door),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for FsClientPeer {
    fn drop(&mut self) {
        self.kill();
    }
}
