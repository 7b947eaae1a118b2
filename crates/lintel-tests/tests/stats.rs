//! The call counts a domain keeps (`lintel::stats`), with real processes.
//! One test per file: the counts are the process's.

use lintel_tests::{m, Peer};

/// A caller whose call runs far longer than any spin budget sleeps for its
/// reply, and the sleep is counted in the call's size class beside the
/// call itself.
#[test]
fn long_calls_are_counted_as_slept_in_their_size_class() {
    let p = Peer::start("plain");
    let before = lintel::stats::snapshot();
    for size in [8, 64 << 10, 1 << 20] {
        let mut arg = vec![0u8; size];
        arg[..8].copy_from_slice(&30u64.to_le_bytes());
        p.call(m::SLEEP_PLAIN, &arg, &[]).expect("the sleeping call");
    }
    let d = lintel::stats::snapshot().since(&before);
    assert_eq!(d.sized, [1, 0, 1, 1], "calls by size class: {d}");
    assert_eq!(d.slept, [1, 0, 1, 1], "sleeps by size class: {d}");
}
