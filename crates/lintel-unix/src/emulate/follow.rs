//! A symlink in a served path that leaves the export: the service refuses
//! it (`EXDEV`), and the call is made again on the path the program would
//! see ([`links`]), into the served tree or out to the kernel.

use super::resolve::{LinkLookup, PathArg};
use super::{Emulation, err};
use crate::links;
use crate::trap;

impl Emulation {
    /// Call `nr` again, the service having refused (`EXDEV`) a symlink in
    /// its path that leaves the export: followed as the program would see
    /// it ([`links`]), into the served tree or out to the kernel. `None`:
    /// not a call that names one path, or nothing to follow.
    pub(super) fn follow_out(&self, nr: i64, a: [u64; 6]) -> Option<i64> {
        let Some(arg) = PathArg::of(nr, a) else {
            return self.follow_out_two(nr, a);
        };
        let dirfd = arg.dirfd.map_or(libc::AT_FDCWD, |i| a[i] as i32);
        let rel = self.path_at(dirfd, a[arg.path]).ok()??;
        let look = LinkLookup(&self.fs);
        let target = match links::resolve(&self.prefix, &rel, arg.follow_last, &look) {
            Ok(t) => t,
            Err(e) => return Some(err(e)),
        };
        let mut again = a;
        if let Some(i) = arg.dirfd {
            again[i] = libc::AT_FDCWD as u64;
        }
        let mut path = match &target {
            links::Target::Served(p) if *p == rel => return None,
            links::Target::Served(p) => self.prefix.absolute(p),
            links::Target::Host(p) => p.clone(),
        };
        path.push(0);
        again[arg.path] = path.as_ptr() as u64;
        match target {
            links::Target::Served(_) => self.dispatch(nr, again),
            links::Target::Host(_) if nr == libc::SYS_chdir => self.kernel_chdir(nr, again[0]),
            links::Target::Host(_) => Some(trap::raw_syscall(nr, again)),
        }
    }

    /// As [`Emulation::follow_out`] for the calls that name two paths
    /// (`rename`, `link`): each served name followed (its directories; its
    /// last name too for `linkat`'s `AT_SYMLINK_FOLLOW`), the old one's
    /// errors first, as Linux looks its directory up first; then the call
    /// made again on where they lead: both served, the service answers;
    /// one on each side, the namespace does (a lookup error, else
    /// `EXDEV`); both the host's, the kernel.
    fn follow_out_two(&self, nr: i64, a: [u64; 6]) -> Option<i64> {
        let (names, follow_old) = match nr {
            libc::SYS_rename | libc::SYS_link => ([(None, 0), (None, 1)], false),
            libc::SYS_renameat | libc::SYS_renameat2 => ([(Some(0), 1), (Some(2), 3)], false),
            libc::SYS_linkat => (
                [(Some(0), 1), (Some(2), 3)],
                a[4] as i32 & libc::AT_SYMLINK_FOLLOW != 0,
            ),
            _ => return None,
        };
        let look = LinkLookup(&self.fs);
        let mut again = a;
        // The followed paths, kept alive while `again` points at them.
        let mut held: Vec<Vec<u8>> = Vec::new();
        for (k, (dir, path)) in names.into_iter().enumerate() {
            let dirfd = dir.map_or(libc::AT_FDCWD, |i| a[i] as i32);
            let rel = match self.path_at(dirfd, a[path]) {
                Ok(Some(rel)) => rel,
                // The host's name: the kernel finds it as given.
                Ok(None) => continue,
                Err(e) => return Some(err(e)),
            };
            let mut followed = match links::resolve(&self.prefix, &rel, k == 0 && follow_old, &look) {
                Ok(links::Target::Served(p)) if p == rel => continue,
                Ok(links::Target::Served(p)) => self.prefix.absolute(&p),
                Ok(links::Target::Host(p)) => p,
                Err(e) => return Some(err(e)),
            };
            followed.push(0);
            if let Some(i) = dir {
                again[i] = libc::AT_FDCWD as u64;
            }
            again[path] = followed.as_ptr() as u64;
            held.push(followed);
        }
        if held.is_empty() {
            return None;
        }
        let r = self
            .dispatch(nr, again)
            .unwrap_or_else(|| trap::raw_syscall(nr, again));
        drop(held);
        Some(r)
    }
}
