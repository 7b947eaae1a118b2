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
        let arg = PathArg::of(nr, a)?;
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
}
