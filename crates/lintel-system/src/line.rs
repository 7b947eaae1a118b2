//! Lines to stderr, each in one `write`: the supervisor and its domains
//! share stderr, and a line written in pieces (as `eprintln!` writes its
//! format's parts, one system call each) can be cut by another process's
//! line (seen: "started (pid " with a domain's line before the digits).
//! A write of up to 4 KiB to a pipe is never interleaved.

use std::io::Write;

/// `line` and a newline to stderr, in one write.
pub(crate) fn say(mut line: String) {
    line.push('\n');
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// `eprintln!`, written in one piece (see the module doc).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::line::say(format!($($arg)*))
    };
}
