//! Context-switch counts of the calling thread, to check that a blocking case really sleeps.

/// Voluntary context switches of the calling thread so far (`/proc/thread-self/status`), or
/// `None` where that file is unavailable. Each real sleep in `FUTEX_WAIT`, `read` etc. adds one.
pub fn voluntary_switches() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn sleeping_counts_a_switch() {
        let Some(before) = super::voluntary_switches() else {
            return;
        };
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(super::voluntary_switches().unwrap() > before);
    }
}
