//! The descriptor floor: the lintel runtime keeps its descriptors above
//! it, and the program is kept below it.

use super::{R, err};
use crate::trap;
use crate::user;

/// Keep the program below the descriptor floor, where the lintel runtime
/// keeps its own descriptors ([`lintel::set_descriptor_floor`]): the
/// program sees the floor as its descriptor limit, so `dup2` onto a
/// number above it fails as above any limit, `close` finds nothing
/// there, and `close_range` stops below it. `None`: not such a call.
pub(super) fn reserved(nr: i64, a: [u64; 6]) -> R {
    let floor = lintel::descriptor_floor() as u64;
    if floor == 0 {
        return None;
    }
    let nofile = |resource: u64| resource == libc::RLIMIT_NOFILE as u64;
    match nr {
        libc::SYS_dup2 | libc::SYS_dup3 if a[1] >= floor && a[1] <= i32::MAX as u64 => Some(err(libc::EBADF)),
        libc::SYS_fcntl if matches!(a[1] as i32, libc::F_DUPFD | libc::F_DUPFD_CLOEXEC) && a[2] >= floor => {
            Some(err(libc::EINVAL))
        }
        libc::SYS_close if a[0] >= floor && a[0] <= i32::MAX as u64 => Some(err(libc::EBADF)),
        libc::SYS_close_range if a[0] >= floor => Some(0),
        libc::SYS_close_range if a[1] >= floor => Some(trap::raw_syscall(
            libc::SYS_close_range,
            [a[0], floor - 1, a[2], 0, 0, 0],
        )),
        libc::SYS_getrlimit if nofile(a[0]) => Some(nofile_view(floor, a[1])),
        libc::SYS_setrlimit if nofile(a[0]) => Some(0),
        libc::SYS_prlimit64 if nofile(a[1]) && (a[0] == 0 || a[0] == std::process::id() as u64) => {
            Some(if a[3] != 0 { nofile_view(floor, a[3]) } else { 0 })
        }
        _ => None,
    }
}

/// The program's descriptor limits (the kernel's, capped at the floor)
/// written to its `struct rlimit` at `to`. Raising them is accepted and
/// changes nothing: the floor is the most the program may have.
fn nofile_view(floor: u64, to: u64) -> i64 {
    let mut lim = [0u64; 2];
    let r = trap::raw_syscall(
        libc::SYS_prlimit64,
        [0, libc::RLIMIT_NOFILE as u64, 0, lim.as_mut_ptr() as u64, 0, 0],
    );
    if r < 0 {
        return r;
    }
    let view = [lim[0].min(floor), lim[1].min(floor)];
    let bytes: Vec<u8> = view.iter().flat_map(|v| v.to_ne_bytes()).collect();
    user::write(to, &bytes).map_or_else(err, |()| 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_stays_below_the_descriptor_floor() {
        assert_eq!(
            reserved(libc::SYS_dup2, [0, 5000, 0, 0, 0, 0]),
            None,
            "no floor: untouched"
        );
        lintel::set_descriptor_floor(5000);
        let call = |nr, a: [u64; 3]| reserved(nr, [a[0], a[1], a[2], 0, 0, 0]);
        assert_eq!(call(libc::SYS_dup2, [0, 5000, 0]), Some(err(libc::EBADF)));
        assert_eq!(call(libc::SYS_dup3, [0, 7000, 0]), Some(err(libc::EBADF)));
        assert_eq!(call(libc::SYS_dup2, [0, 4999, 0]), None);
        assert_eq!(
            call(libc::SYS_fcntl, [0, libc::F_DUPFD_CLOEXEC as u64, 5000]),
            Some(err(libc::EINVAL))
        );
        assert_eq!(call(libc::SYS_fcntl, [0, libc::F_DUPFD as u64, 10]), None);
        assert_eq!(call(libc::SYS_close, [6000, 0, 0]), Some(err(libc::EBADF)));
        assert_eq!(
            call(libc::SYS_close, [u64::MAX, 0, 0]),
            None,
            "-1: the kernel's EBADF"
        );
        assert_eq!(call(libc::SYS_close_range, [5001, u32::MAX as u64, 0]), Some(0));
        let mut lim = [0u64; 2];
        let to = lim.as_mut_ptr() as u64;
        assert_eq!(
            call(libc::SYS_getrlimit, [libc::RLIMIT_NOFILE as u64, to, 0]),
            Some(0)
        );
        assert!(lim[0] <= 5000 && lim[1] <= 5000 && lim[0] > 0, "{lim:?}");
        assert_eq!(
            call(libc::SYS_getrlimit, [libc::RLIMIT_STACK as u64, to, 0]),
            None
        );
        lintel::set_descriptor_floor(0);
    }
}
