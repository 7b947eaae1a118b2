//! How a domain ended, in words and as the supervisor's own exit status.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// "status 3" or "signal 9 (SIGKILL)".
pub(crate) fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        format!("status {code}")
    } else if let Some(sig) = status.signal() {
        format!("signal {sig} ({})", signal_name(sig))
    } else {
        format!("{status}")
    }
}

/// The shell's convention: the exit code, or 128 + the signal number.
pub(crate) fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

pub(crate) fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        31 => "SIGSYS",
        _ => "unknown signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words() {
        assert_eq!(describe(ExitStatus::from_raw(9)), "signal 9 (SIGKILL)");
        assert_eq!(describe(ExitStatus::from_raw(3 << 8)), "status 3");
        assert_eq!(exit_code(ExitStatus::from_raw(6)), 134);
        assert_eq!(exit_code(ExitStatus::from_raw(2 << 8)), 2);
    }
}
