//! Credentials and the umask, which the service acts with: a call that
//! may change them is made here, then the service is told.

use lintel_fs::Fs;

use super::R;
use crate::trap;

/// Make call `nr` if it may change the program's credentials or umask,
/// then note the change; `None`: not such a call. (Made here, then noted:
/// a served call of another thread that came between would otherwise tell
/// the service too early.)
pub(super) fn change(nr: i64, a: [u64; 6]) -> R {
    if !changes_credentials(nr) {
        return None;
    }
    let r = trap::raw_syscall(nr, a);
    Fs::credentials_changed();
    Some(r)
}

/// Whether call `nr` may change the program's credentials or umask,
/// which the service acts with.
fn changes_credentials(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_setuid
            | libc::SYS_setgid
            | libc::SYS_setreuid
            | libc::SYS_setregid
            | libc::SYS_setresuid
            | libc::SYS_setresgid
            | libc::SYS_setfsuid
            | libc::SYS_setfsgid
            | libc::SYS_setgroups
            | libc::SYS_umask
    )
}
