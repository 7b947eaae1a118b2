//! Children reaped (`wait4`, `waitid`): the service finishes the calls a
//! reaped child left running before the program's next call that names a
//! path (`Fs::child_reaped`), as Linux finishes a killed process's system
//! calls before its parent can reap it. Only notes the pid: `wait4` is
//! often made from a `SIGCHLD` handler that interrupted `malloc`.

use lintel_fs::Fs;

use super::{Emulation, R};
use crate::{trap, user};

/// Offset of `si_pid` in the `siginfo_t` that `waitid` fills.
const SI_PID: u64 = 16;

impl Emulation {
    /// Make `wait4` or `waitid`, noting the child it reaped.
    pub(super) fn reap(&self, nr: i64, a: [u64; 6]) -> R {
        let r = trap::raw_syscall(nr, a);
        let pid = match nr {
            libc::SYS_wait4 if r > 0 => r as u32,
            libc::SYS_waitid if r == 0 && a[2] != 0 => {
                let mut b = [0u8; 4];
                // Not `read_into`: its per-thread memory of checked ranges
                // may be in use by the code this handler interrupted.
                match user::read_through_kernel(a[2] + SI_PID, &mut b) {
                    Ok(()) => u32::from_le_bytes(b),
                    Err(_) => 0,
                }
            }
            _ => 0,
        };
        if pid != 0 {
            Fs::child_reaped(pid);
        }
        Some(r)
    }
}
