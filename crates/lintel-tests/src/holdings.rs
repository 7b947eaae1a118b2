//! What a process holds, from `/proc`: the figures a test compares before
//! and after many cycles to show that nothing leaks.

/// Descriptors, threads, resident memory and unreaped children of one
/// process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holdings {
    pub fds: usize,
    pub threads: usize,
    pub rss_kib: u64,
    /// Its children that exited and were not reaped.
    pub zombies: usize,
}

impl Holdings {
    /// Process `pid`'s holdings now.
    pub fn of(pid: u32) -> Holdings {
        let count = |dir: String| std::fs::read_dir(dir).map_or(0, |d| d.count());
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let zombies = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
            .filter(|s| {
                // After the command's closing parenthesis: state, then ppid.
                let rest: Vec<&str> = s.rsplit(')').next().unwrap_or("").split_whitespace().collect();
                rest.first() == Some(&"Z") && rest.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(pid)
            })
            .count();
        Holdings {
            fds: count(format!("/proc/{pid}/fd")),
            threads: count(format!("/proc/{pid}/task")),
            rss_kib,
            zombies,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reaped_child_is_no_zombie_and_an_unreaped_one_is() {
        let me = std::process::id();
        let before = Holdings::of(me);
        assert!(
            before.fds >= 3 && before.threads >= 1 && before.rss_kib > 0,
            "{before:?}"
        );
        let mut child = std::process::Command::new("true").spawn().unwrap();
        assert!(crate::eventually(
            std::time::Duration::from_secs(30),
            || Holdings::of(me).zombies == 1
        ));
        child.wait().unwrap();
        assert_eq!(Holdings::of(me).zombies, 0);
    }
}
