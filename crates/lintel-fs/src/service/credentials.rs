//! The credentials a served call is made with: the calling program's, as
//! the kernel holds them.
//!
//! For each call from another process the service thread takes on the
//! caller's file-system user and group, supplementary groups and umask
//! ([`Credentials::adopt`]), makes the call, and takes its own back
//! (every call that names a path, changes a file or lands the caller's
//! writes; reads and seeks need none). The
//! kernel then checks every permission itself (owner, group and other
//! bits, ACLs, capabilities, sticky directories) and gives new files the
//! owner, group and mode Linux would (setgid directories, umask), and
//! `access(2)` answers for the real ids ([`As::Real`]). This is how NFS
//! servers and virtiofsd serve many users: a thread's fsuid, fsgid and
//! groups are its own (`setfsuid(2)`, the raw `setgroups(2)`), and each
//! service thread gets a file-system context of its own
//! (`unshare(CLONE_FS)`) so its umask is too. Checks of our own would
//! have to re-implement all of that and would drift from it; FUSE's
//! `default_permissions` is the kernel doing the same checks in the other
//! direction.
//!
//! Who the caller is comes from the kernel, never from the caller: the
//! connection's peer as `SO_PEERCRED` named it ([`lintel::caller`]), and
//! its credentials from `/proc/<pid>/status`. They are read on the
//! caller's first call and kept until the caller says they changed
//! ([`Credentials::forget`]; the emulation says so after each `set*id`,
//! `setgroups` or `umask` call of the program). That notice carries no
//! identity: a program that withholds it keeps what it held when last
//! read, which it held anyway; the emulation sends it from the trap that
//! made the change, so a program compromised after dropping privileges
//! cannot take the notice back.
//!
//! What is not followed: a thread whose credentials differ from its
//! process's leader (only raw per-thread `setfsuid` makes one; glibc keeps
//! a process's threads alike), and capabilities a root program dropped
//! while staying uid 0 (it is served as root). A service that may not
//! switch (no `CAP_SETUID`/`CAP_SETGID`) serves callers whose user, group
//! and groups equal its own, and refuses others with `EACCES`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::proto::FsError;

/// One process's credentials, as `/proc/<pid>/status` gives them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Creds {
    pub ruid: u32,
    pub fsuid: u32,
    pub rgid: u32,
    pub fsgid: u32,
    /// Supplementary groups, sorted.
    pub groups: Vec<u32>,
    pub umask: u32,
}

impl Creds {
    /// Parse the `Uid:`, `Gid:`, `Groups:` and `Umask:` lines of a
    /// `/proc/<pid>/status`; `None` if one is missing or malformed.
    pub fn parse(status: &str) -> Option<Creds> {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        // Real, effective, saved, file system.
        let ids = |name: &str| -> Option<[u32; 4]> {
            let v: Vec<u32> = field(name)?
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            v.try_into().ok()
        };
        let uid = ids("Uid")?;
        let gid = ids("Gid")?;
        let mut groups: Vec<u32> = field("Groups")?
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        groups.sort_unstable();
        groups.dedup();
        let umask = u32::from_str_radix(field("Umask")?, 8).ok()?;
        Some(Creds {
            ruid: uid[0],
            fsuid: uid[3],
            rgid: gid[0],
            fsgid: gid[3],
            groups,
            umask,
        })
    }

    /// The credentials of process `pid` now.
    fn of_process(pid: u32) -> std::io::Result<Creds> {
        // Room for all of it at once: procfs gives no size, and
        // `fs::read_to_string` then reads in doubling pieces from 32
        // bytes (eight reads for a status of some 1,400 bytes).
        let mut status = String::with_capacity(4096);
        std::io::Read::read_to_string(
            &mut std::fs::File::open(format!("/proc/{pid}/status"))?,
            &mut status,
        )?;
        Creds::parse(&status)
            .ok_or_else(|| std::io::Error::other(format!("/proc/{pid}/status: no credentials")))
    }

    /// What a call made as `who` runs with.
    fn acting(&self, who: As) -> Acting {
        let (uid, gid) = match who {
            As::Effective => (self.fsuid, self.fsgid),
            As::Real => (self.ruid, self.rgid),
        };
        Acting {
            uid,
            gid,
            groups: self.groups.clone(),
            umask: self.umask,
        }
    }
}

/// Which of the caller's ids a call acts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum As {
    /// The file-system ids (which follow the effective ones): every call
    /// but `access`.
    Effective,
    /// The real ids, as `access(2)` checks without `AT_EACCESS`.
    Real,
}

/// What a thread acts as for the file system.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Acting {
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
    umask: u32,
}

/// Most callers whose credentials are kept at once (then all are read
/// again as they call).
const MAX_KEPT: usize = 4096;

/// A thread's last caller: its service's id, its connection, and the
/// service's generation then.
type LastKey = (u64, u64, u64);

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What a caller's calls act as.
struct Caller {
    effective: Acting,
    real: Acting,
}

/// The credentials of the service's callers, by connection.
pub(crate) struct Credentials {
    by_conn: Mutex<HashMap<u64, Arc<Caller>>>,
    /// Bumped whenever a caller's are forgotten, so that a thread's
    /// [`LAST`] is known stale.
    generation: AtomicU64,
    /// The service's own.
    own: Acting,
    /// Names this service's callers in a thread's [`LAST`] (never reused).
    id: u64,
}

impl Credentials {
    pub fn new() -> std::io::Result<Credentials> {
        let own = Creds::of_process(std::process::id())?;
        Ok(Credentials {
            by_conn: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            own: own.acting(As::Effective),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// The calling process changed its credentials or umask: read them
    /// again on its next call.
    pub fn forget(&self) {
        if let Some(c) = lintel::caller() {
            self.by_conn.lock().remove(&c.connection());
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Act as the calling process (its ids as `who` says) until the guard
    /// drops. A call from this process (a co-located one runs on its
    /// caller's thread) changes nothing.
    pub fn adopt(&self, who: As) -> Result<Adopted<'_>, FsError> {
        let Some(caller) = lintel::caller() else {
            return Ok(Adopted { restore: None });
        };
        let creds = self.of(caller)?;
        let want = match who {
            As::Effective => &creds.effective,
            As::Real => &creds.real,
        };
        if *want == self.own {
            return Ok(Adopted { restore: None });
        }
        // Made first, so that a switch that fails halfway is undone.
        let adopted = Adopted {
            restore: Some(&self.own),
        };
        if let Err(e) = switch(want, &self.own) {
            tracing::warn!(uid = want.uid, gid = want.gid, error = %e, "the file service cannot act as its caller");
            return Err(rustix::io::Errno::ACCESS.into());
        }
        Ok(adopted)
    }

    /// What `caller`'s calls act as: this thread's last caller's, if it
    /// is the same and nothing was forgotten since, else from the map, else
    /// read from the kernel.
    fn of(&self, caller: lintel::Caller) -> Result<Arc<Caller>, FsError> {
        let conn = caller.connection();
        let key = (self.id, conn, self.generation.load(Ordering::Acquire));
        if let Some(c) =
            LAST.with_borrow(|last| last.as_ref().filter(|(k, _)| *k == key).map(|(_, c)| c.clone()))
        {
            return Ok(c);
        }
        let found = self.by_conn.lock().get(&conn).cloned();
        let c = match found {
            Some(c) => c,
            None => self.read(caller)?,
        };
        LAST.set(Some((key, c.clone())));
        Ok(c)
    }

    fn read(&self, caller: lintel::Caller) -> Result<Arc<Caller>, FsError> {
        let conn = caller.connection();
        // A connection the kernel named no process for has no credentials
        // to act with.
        let pid = caller.pid().ok_or(rustix::io::Errno::ACCESS)?;
        let creds = Creds::of_process(pid).map_err(|e| {
            tracing::warn!(pid, error = %e, "the caller's credentials cannot be read");
            FsError::from(rustix::io::Errno::ACCESS)
        })?;
        let creds = Arc::new(Caller {
            effective: creds.acting(As::Effective),
            real: creds.acting(As::Real),
        });
        let mut map = self.by_conn.lock();
        if map.len() >= MAX_KEPT {
            map.clear();
        }
        map.insert(conn, creds.clone());
        Ok(creds)
    }
}

/// The service thread acts as a caller; dropping it makes the thread the
/// service's own again.
pub(crate) struct Adopted<'a> {
    restore: Option<&'a Acting>,
}

impl Drop for Adopted<'_> {
    fn drop(&mut self) {
        if let Some(own) = self.restore
            && let Err(e) = switch(own, own)
        {
            // Taking back what the thread had cannot fail with the
            // privileges it had; if it does, nothing on this thread may
            // act for the file system any more.
            tracing::error!(error = %e, "a file service thread cannot take its own credentials back");
            std::process::abort();
        }
    }
}

thread_local! {
    /// The caller this thread served last: (service, connection,
    /// generation) and what it acts as.
    static LAST: RefCell<Option<(LastKey, Arc<Caller>)>> = const { RefCell::new(None) };
    /// What this thread acts as now, where it differs from the process:
    /// `None` until it first switches.
    static CURRENT: RefCell<Option<Acting>> = const { RefCell::new(None) };
}

/// Make this thread act as `want`, changing only what differs (`own`:
/// what the process acts as, and so a thread that never switched).
fn switch(want: &Acting, own: &Acting) -> std::io::Result<()> {
    CURRENT.with_borrow_mut(|current| {
        let now = match current {
            Some(now) => now,
            None => {
                // The first switch of this thread: its umask becomes its
                // own (a file-system context of its own).
                sys::unshare_fs()?;
                current.insert(own.clone())
            }
        };
        if now.groups != want.groups {
            let groups: Vec<rustix::process::Gid> = want
                .groups
                .iter()
                .map(|g| rustix::process::Gid::from_raw(*g))
                .collect();
            rustix::thread::set_thread_groups(&groups)?;
            now.groups = want.groups.clone();
        }
        if now.gid != want.gid {
            sys::set_fsgid(want.gid)?;
            now.gid = want.gid;
        }
        if now.uid != want.uid {
            sys::set_fsuid(want.uid)?;
            now.uid = want.uid;
        }
        if now.umask != want.umask {
            rustix::process::umask(rustix::fs::Mode::from_raw_mode(want.umask));
            now.umask = want.umask;
        }
        Ok(())
    })
}

/// The calls that change one thread's file-system identity.
mod sys {
    #![allow(unsafe_code)]

    /// `setfsuid(2)`, which reports failure only by leaving the id as it
    /// was: asked again with an id that cannot be set, it tells which it
    /// is.
    pub fn set_fsuid(uid: u32) -> std::io::Result<()> {
        // SAFETY: setfsuid takes an integer and changes only this thread's
        // credentials; it touches no memory of ours.
        let now = unsafe {
            libc::setfsuid(uid);
            libc::setfsuid(u32::MAX)
        };
        if now as u32 == uid {
            Ok(())
        } else {
            Err(std::io::Error::from_raw_os_error(libc::EPERM))
        }
    }

    /// `setfsgid(2)`, checked as [`set_fsuid`].
    pub fn set_fsgid(gid: u32) -> std::io::Result<()> {
        // SAFETY: as for setfsuid: an integer in, this thread's
        // credentials changed, no memory touched.
        let now = unsafe {
            libc::setfsgid(gid);
            libc::setfsgid(u32::MAX)
        };
        if now as u32 == gid {
            Ok(())
        } else {
            Err(std::io::Error::from_raw_os_error(libc::EPERM))
        }
    }

    /// Give this thread a file-system context (umask, working directory,
    /// root) of its own, a copy of the process's.
    pub fn unshare_fs() -> std::io::Result<()> {
        // SAFETY: CLONE_FS alone leaves the descriptor table shared (the
        // hazard `unshare_unsafe` names is unsharing CLONE_FILES); the
        // service resolves every path from its root descriptor, never
        // from the working directory this thread now keeps apart.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FS) }?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tpython3\nUmask:\t0027\nState:\tR (running)\n\
        Uid:\t1000\t65534\t65534\t65534\nGid:\t100\t100\t100\t101\n\
        FDSize:\t64\nGroups:\t27 4 27 100 \nNStgid:\t1\n";

    #[test]
    fn status_gives_real_and_file_system_ids_groups_and_umask() {
        let c = Creds::parse(STATUS).unwrap();
        assert_eq!(
            c,
            Creds {
                ruid: 1000,
                fsuid: 65534,
                rgid: 100,
                fsgid: 101,
                groups: vec![4, 27, 100],
                umask: 0o027,
            }
        );
        assert_eq!((c.acting(As::Real).uid, c.acting(As::Real).gid), (1000, 100));
        assert_eq!(
            (c.acting(As::Effective).uid, c.acting(As::Effective).gid),
            (65534, 101)
        );
    }

    #[test]
    fn no_groups_is_an_empty_list_and_a_missing_line_no_credentials() {
        let none = STATUS.replace("Groups:\t27 4 27 100 \n", "Groups:\t\n");
        assert_eq!(Creds::parse(&none).unwrap().groups, Vec::<u32>::new());
        for line in ["Uid:", "Gid:", "Groups:", "Umask:"] {
            let cut: String = STATUS
                .lines()
                .filter(|l| !l.starts_with(line))
                .map(|l| format!("{l}\n"))
                .collect();
            assert_eq!(Creds::parse(&cut), None, "without {line}");
        }
        assert_eq!(
            Creds::parse(&STATUS.replace("65534\t65534\t65534", "x\t1\t2")),
            None
        );
    }

    #[test]
    fn this_process_reads_as_the_kernel_says() {
        let me = Creds::of_process(std::process::id()).unwrap();
        assert_eq!(me.fsuid, rustix::process::geteuid().as_raw());
        assert_eq!(me.rgid, rustix::process::getgid().as_raw());
    }
}
