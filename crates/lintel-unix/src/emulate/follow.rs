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
        let (path, served) = match self.followed(&rel, arg.follow_last) {
            Ok(Some(to)) => to,
            Ok(None) => return None,
            Err(e) => return Some(err(e)),
        };
        let mut again = a;
        aim(&mut again, arg.dirfd, arg.path, &path);
        match served {
            true => self.dispatch(nr, again),
            false if nr == libc::SYS_chdir => self.kernel_chdir(nr, again[0]),
            false => Some(trap::raw_syscall(nr, again)),
        }
    }

    /// Where the served name `rel` leads for the program (its last name
    /// followed too if `follow_last`), as a NUL-terminated absolute path
    /// and whether it is served; `None` if it leads where it names.
    fn followed(&self, rel: &[u8], follow_last: bool) -> Result<Option<(Vec<u8>, bool)>, i32> {
        let mut to = match links::resolve(&self.prefix, rel, follow_last, &LinkLookup(&self.fs))? {
            links::Target::Served(p) if p == rel => return Ok(None),
            links::Target::Served(p) => (self.prefix.absolute(&p), true),
            links::Target::Host(p) => (p, false),
        };
        to.0.push(0);
        Ok(Some(to))
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
            let followed = match self.followed(&rel, k == 0 && follow_old) {
                Ok(Some((p, _))) => p,
                Ok(None) => continue,
                Err(e) => return Some(err(e)),
            };
            aim(&mut again, dir, path, &followed);
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

/// Point the call's path argument `path` (relative to the descriptor
/// argument `dir`, if any) at `to`, a NUL-terminated absolute path that
/// must outlive the call made with `args`.
fn aim(args: &mut [u64; 6], dir: Option<usize>, path: usize, to: &[u8]) {
    if let Some(i) = dir {
        args[i] = libc::AT_FDCWD as u64;
    }
    args[path] = to.as_ptr() as u64;
}
