//! What the supervisor does when a domain exits: a restart policy and, per
//! domain, the record of its restarts that decides the next step. A plain
//! value, tested on the host with made-up times; the supervisor feeds it
//! exits and starts and carries out what it answers.
//!
//! The shape follows Erlang/OTP supervisors and systemd's `Restart=`: a
//! domain is restarted never, only when it failed, or always; each try waits
//! a backoff that doubles up to a bound (and falls back to the first once
//! the domain has stayed up longer than the bound); and a domain that
//! exits more than `max_restarts` times within `period` is given up on, so
//! one that dies at once is not restarted for ever. Giving up either stops
//! the system or leaves the domain down, as the policy says.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use lintel_system::restart::{Exit, Next, Policy, Tracker};
//! let mut kv = Tracker::new(Policy::default());
//! let t0 = Instant::now();
//! kv.started(t0);
//! // Killed: restarted after the first backoff.
//! assert_eq!(kv.exited(Exit::Signal(9), t0), Next::RestartAt(t0 + Duration::from_millis(100)));
//! ```

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// When a domain that exited is started again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// Never: it stays down.
    Never,
    /// When it failed: killed by a signal, or an exit status other than 0.
    OnFailure,
    /// Whenever it exits, even with status 0.
    Always,
}

/// What giving up on a domain does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUp {
    /// The whole system stops (as the root driver's return stops it).
    Stop,
    /// The domain stays down; the rest go on, and its names fail.
    Leave,
}

/// One domain's restart policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Whether an exit is followed by a restart.
    pub restart: Restart,
    /// The wait before the first restart; each one after doubles it.
    pub backoff: Duration,
    /// The longest wait; also how long a domain must stay up for the next
    /// wait to start again at `backoff`.
    pub max_backoff: Duration,
    /// Most restarts within `period`; one more and the supervisor gives up.
    pub max_restarts: u32,
    /// The window `max_restarts` is counted in.
    pub period: Duration,
    /// What happens when there are too many.
    pub give_up: GiveUp,
}

impl Default for Policy {
    /// Restart on failure after 100 ms, doubling to 10 s; give up (leave
    /// the domain down) after 5 restarts within 60 s.
    fn default() -> Policy {
        Policy {
            restart: Restart::OnFailure,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            max_restarts: 5,
            period: Duration::from_secs(60),
            give_up: GiveUp::Leave,
        }
    }
}

/// How a domain's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this status.
    Status(i32),
    /// A signal killed it.
    Signal(i32),
}

impl Exit {
    /// How a process that ended with `status` ended.
    pub fn of(status: std::process::ExitStatus) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Status(code),
            (None, Some(sig)) => Exit::Signal(sig),
            (None, None) => Exit::Status(-1),
        }
    }

    /// Whether the exit counts as a failure (anything but status 0).
    pub fn failed(self) -> bool {
        self != Exit::Status(0)
    }
}

/// What to do about a domain that exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Start it again at this time.
    RestartAt(Instant),
    /// Leave it down: its policy does not restart it after such an exit.
    Down,
    /// Too many restarts within the period: give up, as the policy says.
    GiveUp(GiveUp),
}

/// One domain's restarts so far, and the wait the next one takes.
#[derive(Debug, Clone)]
pub struct Tracker {
    policy: Policy,
    /// When each restart within the last period was decided.
    recent: VecDeque<Instant>,
    /// The wait the next restart takes.
    wait: Duration,
    /// When the current instance started.
    started: Option<Instant>,
    /// Restarts decided in all.
    restarts: u32,
}

impl Tracker {
    /// A domain not yet started, under `policy`.
    pub fn new(policy: Policy) -> Tracker {
        Tracker {
            policy,
            recent: VecDeque::new(),
            wait: policy.backoff,
            started: None,
            restarts: 0,
        }
    }

    /// The domain's current instance started at `now`.
    pub fn started(&mut self, now: Instant) {
        self.started = Some(now);
    }

    /// Restarts decided since the domain first started.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    /// The policy followed.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The domain was stopped at `now` because a domain it depends on
    /// restarted: started again at once, unless its policy never restarts
    /// it. Not its own failure, so it does not count toward giving up.
    pub fn provider_restarted(&mut self, now: Instant) -> Next {
        self.started = None;
        if self.policy.restart == Restart::Never {
            return Next::Down;
        }
        self.restarts += 1;
        Next::RestartAt(now)
    }

    /// The domain's instance exited at `now`, as `exit` says: what next.
    pub fn exited(&mut self, exit: Exit, now: Instant) -> Next {
        let up = self
            .started
            .take()
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s));
        let wanted = match self.policy.restart {
            Restart::Never => false,
            Restart::OnFailure => exit.failed(),
            Restart::Always => true,
        };
        if !wanted {
            return Next::Down;
        }
        while self
            .recent
            .front()
            .is_some_and(|&t| now.saturating_duration_since(t) > self.policy.period)
        {
            self.recent.pop_front();
        }
        if self.recent.len() >= self.policy.max_restarts as usize {
            return Next::GiveUp(self.policy.give_up);
        }
        if up > self.policy.max_backoff {
            self.wait = self.policy.backoff; // it stayed up: start afresh
        }
        let wait = self.wait;
        self.wait = (self.wait * 2).min(self.policy.max_backoff);
        self.recent.push_back(now);
        self.restarts += 1;
        Next::RestartAt(now + wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn policy(restart: Restart) -> Policy {
        Policy {
            restart,
            backoff: ms(100),
            max_backoff: ms(1000),
            max_restarts: 3,
            period: ms(10_000),
            give_up: GiveUp::Stop,
        }
    }

    #[test]
    fn each_policy_restarts_what_it_says() {
        let t0 = Instant::now();
        let next = |r: Restart, e: Exit| {
            let mut t = Tracker::new(policy(r));
            t.started(t0);
            t.exited(e, t0 + ms(5))
        };
        let killed = Exit::Signal(9);
        assert_eq!(next(Restart::Never, killed), Next::Down);
        assert_eq!(next(Restart::OnFailure, Exit::Status(0)), Next::Down);
        assert_eq!(
            next(Restart::OnFailure, Exit::Status(3)),
            Next::RestartAt(t0 + ms(105))
        );
        assert_eq!(next(Restart::OnFailure, killed), Next::RestartAt(t0 + ms(105)));
        assert_eq!(
            next(Restart::Always, Exit::Status(0)),
            Next::RestartAt(t0 + ms(105))
        );
    }

    #[test]
    fn the_wait_doubles_to_its_bound_and_starts_afresh_after_a_long_run() {
        let mut p = policy(Restart::Always);
        p.max_restarts = 100;
        let mut t = Tracker::new(p);
        let mut now = Instant::now();
        let mut waits = Vec::new();
        for _ in 0..6 {
            t.started(now);
            now += ms(10);
            let Next::RestartAt(at) = t.exited(Exit::Signal(9), now) else {
                panic!()
            };
            waits.push(at - now);
            now = at;
        }
        assert_eq!(waits, [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]);
        // Up for longer than the bound: the next wait is the first again.
        t.started(now);
        now += ms(1500);
        assert_eq!(t.exited(Exit::Signal(9), now), Next::RestartAt(now + ms(100)));
        assert_eq!(t.restarts(), 7);
    }

    #[test]
    fn too_many_restarts_within_the_period_give_up() {
        let mut t = Tracker::new(policy(Restart::OnFailure));
        let t0 = Instant::now();
        for i in 0..3 {
            let now = t0 + ms(i * 2000);
            t.started(now);
            assert!(matches!(
                t.exited(Exit::Status(1), now + ms(1)),
                Next::RestartAt(_)
            ));
        }
        // The fourth within 10 s is one too many.
        t.started(t0 + ms(6000));
        assert_eq!(
            t.exited(Exit::Status(1), t0 + ms(6001)),
            Next::GiveUp(GiveUp::Stop)
        );
    }

    #[test]
    fn restarts_older_than_the_period_no_longer_count() {
        let mut t = Tracker::new(policy(Restart::OnFailure));
        let t0 = Instant::now();
        for i in 0..3 {
            t.started(t0 + ms(i));
            assert!(matches!(
                t.exited(Exit::Status(1), t0 + ms(i + 1)),
                Next::RestartAt(_)
            ));
        }
        // 11 s later the three are out of the 10 s period: restarted again.
        let later = t0 + ms(11_000);
        t.started(later);
        assert!(matches!(
            t.exited(Exit::Status(1), later + ms(1)),
            Next::RestartAt(_)
        ));
    }

    #[test]
    fn a_provider_restart_restarts_at_once_without_counting_toward_giving_up() {
        let mut t = Tracker::new(policy(Restart::OnFailure));
        let t0 = Instant::now();
        for i in 0..10 {
            t.started(t0 + ms(i));
            assert_eq!(t.provider_restarted(t0 + ms(i)), Next::RestartAt(t0 + ms(i)));
        }
        assert_eq!(t.restarts(), 10);
        t.started(t0 + ms(20));
        assert_eq!(
            t.exited(Exit::Status(1), t0 + ms(21)),
            Next::RestartAt(t0 + ms(121))
        );
        assert_eq!(
            Tracker::new(policy(Restart::Never)).provider_restarted(t0),
            Next::Down
        );
    }

    #[test]
    fn the_default_restarts_failures_and_leaves_a_crash_loop_down() {
        let mut t = Tracker::new(Policy::default());
        let mut now = Instant::now();
        for _ in 0..5 {
            t.started(now);
            let Next::RestartAt(at) = t.exited(Exit::Signal(11), now) else {
                panic!()
            };
            now = at;
        }
        t.started(now);
        assert_eq!(t.exited(Exit::Signal(11), now), Next::GiveUp(GiveUp::Leave));
        assert_eq!(
            Tracker::new(Policy::default()).exited(Exit::Status(0), now),
            Next::Down
        );
    }
}
