//! The slot handshake and the alert handshake, written once over a memory
//! model ([`Mem`]): the runtime runs them on the call area's shared words
//! with real futexes ([`Shared`]), and the model checker runs the very same
//! functions on its own atomics (`tests` below, with loom), so every
//! interleaving of post, sleep, wake, bind, let go and alert is explored.
//!
//! The rule every pair here follows: each side stores its own word, issues
//! a full fence, then loads the other's. Of two such sides at least one sees
//! the other's store, so a sleeper is always either seen (and woken) or sees
//! what it was waiting for, and an alert always reaches its call. (Fences,
//! not sequentially consistent accesses: the C++ model makes both work, but
//! loom checks only the fences.) The alert handshake runs between threads
//! of one process, one side on every call: there the pair of full fences is
//! an asymmetric pair (`fence`), which orders the same way; the model
//! checks the full fences it stands for.

use std::sync::atomic::Ordering::{self, *};
use std::time::Duration;

use crate::abi::{BUSY, PARKED, RUNNING, SEQ_DEAD, SLEEPING, SPINNING, UNBOUND};

/// A 32-bit word both sides read and write.
pub(crate) trait Word {
    fn load(&self, o: Ordering) -> u32;
    fn store(&self, v: u32, o: Ordering);
    fn compare_exchange(&self, cur: u32, new: u32) -> Result<u32, u32>;
}

/// Where the handshake runs: its words, fences and futexes.
pub(crate) trait Mem {
    type Word: Word;
    fn fence();
    /// Store `v` in `w`, then a full fence: how each side publishes its
    /// word before it looks at the other's.
    fn publish(w: &Self::Word, v: u32) {
        w.store(v, Release);
        Self::fence();
    }
    /// [`Mem::publish`] by the frequent side of a handshake within one
    /// process, whose other side publishes with [`Mem::publish_heavy`]:
    /// together they order as two full fences (`fence`; the model checks
    /// the full fences).
    fn publish_light(w: &Self::Word, v: u32) {
        Self::publish(w, v)
    }
    /// The rare side's mirror of [`Mem::publish_light`].
    fn publish_heavy(w: &Self::Word, v: u32) {
        Self::publish(w, v)
    }
    /// Sleep while `w` holds `expected`; may return early. `timeout` is a
    /// safety net of the real runtime; the model has no time and ignores it,
    /// so it proves no wake-up is lost without it.
    fn futex_wait(w: &Self::Word, expected: u32, timeout: Duration);
    fn futex_wake(w: &Self::Word);
}

/// The runtime's memory: shared words of a call area, Linux futexes.
pub(crate) struct Shared;

impl Word for std::sync::atomic::AtomicU32 {
    #[inline(always)]
    fn load(&self, o: Ordering) -> u32 {
        self.load(o)
    }
    #[inline(always)]
    fn store(&self, v: u32, o: Ordering) {
        self.store(v, o)
    }
    #[inline(always)]
    fn compare_exchange(&self, cur: u32, new: u32) -> Result<u32, u32> {
        self.compare_exchange(cur, new, AcqRel, Acquire)
    }
}

impl Mem for Shared {
    type Word = std::sync::atomic::AtomicU32;
    #[inline(always)]
    fn fence() {
        std::sync::atomic::fence(SeqCst)
    }
    /// One locked exchange: a full barrier on x86, cheaper than a store
    /// followed by `mfence`. (A sequentially consistent exchange orders
    /// with the other side's fences in the C++ model too; loom, which
    /// treats it as acquire-release, checks the store-and-fence form.)
    #[inline(always)]
    fn publish(w: &Self::Word, v: u32) {
        w.swap(v, SeqCst);
    }
    #[inline(always)]
    fn publish_light(w: &Self::Word, v: u32) {
        w.store(v, Release);
        crate::sys::fence::light();
    }
    fn publish_heavy(w: &Self::Word, v: u32) {
        w.store(v, Release);
        crate::sys::fence::heavy();
    }
    #[inline]
    fn futex_wait(w: &Self::Word, expected: u32, timeout: Duration) {
        crate::sys::futex_wait(w, expected, Some(timeout))
    }
    #[inline]
    fn futex_wake(w: &Self::Word) {
        crate::sys::futex_wake(w, u32::MAX)
    }
}

/// The four words of a slot the handshake runs on.
pub(crate) struct Words<'a, W> {
    /// Sequence of the posted request (client writes).
    pub req: &'a W,
    /// Sequence of the published reply (server writes; the watcher writes
    /// [`SEQ_DEAD`] when the server died).
    pub rep: &'a W,
    /// [`RUNNING`] or [`SLEEPING`] (client writes).
    pub client: &'a W,
    /// [`UNBOUND`], [`SPINNING`], [`SLEEPING`] or [`BUSY`] (server writes).
    pub server: &'a W,
}

impl<'a> Words<'a, std::sync::atomic::AtomicU32> {
    /// The handshake's words of a slot in a call area.
    #[inline(always)]
    pub(crate) fn of(slot: &'a crate::sys::umem::Slot) -> Self {
        use crate::sys::umem::SyncWord;
        Words {
            req: slot.sync(SyncWord::ReqSeq),
            rep: slot.sync(SyncWord::RepSeq),
            client: slot.sync(SyncWord::ClientState),
            server: slot.sync(SyncWord::ServerState),
        }
    }
}

/// What the server was doing when a request was posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Posted {
    /// Running or spinning: it will see the request.
    Running,
    /// Asleep on the slot: woken.
    Woken,
    /// No thread bound to the slot: the caller must kick the pool.
    Unbound,
}

/// Client: publish request `seq` (written into the slot before).
#[inline(always)]
pub(crate) fn post<M: Mem>(w: &Words<'_, M::Word>, seq: u32) -> Posted {
    let posted = post_unwoken::<M>(w, seq);
    if posted == Posted::Woken {
        wake_server::<M>(w);
    }
    posted
}

/// [`post`] without its wake-up: [`Posted::Woken`] says the server sleeps
/// and the caller must call [`wake_server`] next (the fast path does so out
/// of line).
#[inline(always)]
pub(crate) fn post_unwoken<M: Mem>(w: &Words<'_, M::Word>, seq: u32) -> Posted {
    M::publish(w.req, seq);
    match w.server.load(Relaxed) {
        SPINNING | BUSY => Posted::Running,
        SLEEPING => Posted::Woken,
        _ => Posted::Unbound,
    }
}

/// Wake the server that [`post_unwoken`] found asleep.
#[inline(always)]
pub(crate) fn wake_server<M: Mem>(w: &Words<'_, M::Word>) {
    M::futex_wake(w.req);
}

/// Client: sleep once for reply `seq`: register as sleeping, look again,
/// then sleep. The caller loops until [`Words::rep`] says what it waits for.
#[inline]
pub(crate) fn sleep_for_reply<M: Mem>(w: &Words<'_, M::Word>, seq: u32, timeout: Duration) {
    M::publish(w.client, SLEEPING);
    let r = w.rep.load(Acquire);
    if r != seq && r != SEQ_DEAD {
        M::futex_wait(w.rep, r, timeout);
    }
    w.client.store(RUNNING, Relaxed);
}

/// Server: publish reply `seq` (written into the slot before), waking the
/// client if it sleeps. True if the client's task is parked
/// ([`park_for_reply`]): the caller must send it a notice.
#[inline(always)]
pub(crate) fn publish_reply<M: Mem>(w: &Words<'_, M::Word>, seq: u32) -> bool {
    M::publish(w.rep, seq);
    match w.client.load(Relaxed) {
        SLEEPING => {
            M::futex_wake(w.rep);
            false
        }
        PARKED => true,
        _ => false,
    }
}

/// Client of an awaited call: park the task waiting for reply `seq`:
/// publish [`PARKED`], then look again. True if the reply (or the server's
/// death) is there already; else the server, which publishes its reply
/// before it looks at our word, sees [`PARKED`] and sends a notice. The
/// word stays [`PARKED`] until [`unpark`].
#[inline]
pub(crate) fn park_for_reply<M: Mem>(w: &Words<'_, M::Word>, seq: u32) -> bool {
    M::publish(w.client, PARKED);
    let r = w.rep.load(Acquire);
    r == seq || r == SEQ_DEAD
}

/// Client: the parked call is over (answered or abandoned); later replies
/// on the slot need no notice.
#[inline]
pub(crate) fn unpark<M: Mem>(w: &Words<'_, M::Word>) {
    w.client.store(RUNNING, Relaxed);
}

/// The request sequence after `seq`: never 0 (no request yet) or
/// [`SEQ_DEAD`] (the watcher's mark of a dead server).
#[inline(always)]
pub(crate) const fn seq_after(seq: u32) -> u32 {
    match seq.wrapping_add(1) {
        0 | SEQ_DEAD => 1,
        n => n,
    }
}

/// A request newer than `last` (0 is never one).
#[inline(always)]
pub(crate) fn fresh(r: u32, last: u32) -> bool {
    r != last && r != 0
}

/// Server: sleep once for a request newer than `last`: register as
/// sleeping, look again, then sleep, and look once more on waking (the
/// common case: woken by the request). `Some(seq)` (and the server marked
/// busy) if one is there; `None` to look again (or let go).
#[inline]
pub(crate) fn sleep_for_request<M: Mem>(w: &Words<'_, M::Word>, last: u32, timeout: Duration) -> Option<u32> {
    M::publish(w.server, SLEEPING);
    let mut r = w.req.load(Acquire);
    if !fresh(r, last) {
        M::futex_wait(w.req, r, timeout);
        r = w.req.load(Acquire);
        if !fresh(r, last) {
            return None;
        }
    }
    w.server.store(BUSY, Relaxed);
    Some(r)
}

/// Server, bound to a slot between calls: sleep until a request newer
/// than `last` comes (`Some`, the server marked busy), or until `let_go`
/// says to let go of the slot (`None`). `let_go` is asked before every
/// sleep, not only after one: a reason to let go that came while the
/// thread was busy (its caller died during the call it served, whose wake-up
/// found nobody asleep) is seen before the thread sleeps, not after its
/// timeout. A caller's death also makes the sleep itself end
/// ([`caller_gone`]), so none is lost between the look and the sleep.
#[inline]
pub(crate) fn wait_for_request<M: Mem>(
    w: &Words<'_, M::Word>,
    last: u32,
    let_go: impl Fn() -> bool,
    timeout: Duration,
) -> Option<u32> {
    loop {
        if let_go() {
            return None;
        }
        if let Some(r) = sleep_for_request::<M>(w, last, timeout) {
            return Some(r);
        }
    }
}

/// The slot's caller died (published before this, where the server's
/// `let_go` reads it): move the request word on, then wake the server. A
/// server between its look at `let_go` and its sleep then does not sleep
/// (the futex finds the word changed), and one that finds the new word
/// takes it for a request, which a dead caller's never starts. The caller
/// is gone, so nobody else writes the word.
pub(crate) fn caller_gone<M: Mem>(w: &Words<'_, M::Word>) {
    let next = match w.req.load(Acquire).wrapping_add(1) {
        0 => 1,
        n => n,
    };
    M::publish(w.req, next);
    M::futex_wake(w.req);
}

/// Server: stop serving the slot: publish [`UNBOUND`], then look once more.
/// `Some(seq)`: a request came in meanwhile whose caller saw the server
/// still bound, so no kick announces it; serve it (if the bind state lets
/// this thread take the slot back, see [`Binding`]).
#[inline]
pub(crate) fn let_go<M: Mem>(w: &Words<'_, M::Word>, last: u32) -> Option<u32> {
    M::publish(w.server, UNBOUND);
    let r = w.req.load(Acquire);
    fresh(r, last).then_some(r)
}

/// Server-private state of a slot: who serves it. Moves by compare-and-swap
/// only, so a kicked worker and a thread letting go never both serve it.
pub(crate) struct Binding<W>(pub W);

pub(crate) const IDLE: u32 = 0;
pub(crate) const QUEUED: u32 = 1;
pub(crate) const BOUND: u32 = 2;

impl<W: Word> Binding<W> {
    /// A kick: queue the slot for a worker unless one has it.
    #[inline]
    pub fn claim_for_queue(&self) -> bool {
        self.0.compare_exchange(IDLE, QUEUED).is_ok()
    }
    /// A worker took the slot off the queue.
    #[inline]
    pub fn bind(&self) {
        self.0.store(BOUND, SeqCst)
    }
    /// The bound worker lets go (before [`let_go`]).
    #[inline]
    pub fn unbind(&self) {
        self.0.store(IDLE, SeqCst)
    }
    /// After [`let_go`] found a request: take the slot back, unless a kick
    /// queued it for another worker meanwhile.
    #[inline]
    pub fn rebind(&self) -> bool {
        self.0.compare_exchange(IDLE, BOUND).is_ok()
    }
}

/// The alert handshake of one slot, on the server: which request the slot
/// runs, and which request's caller was alerted. A request may still wait
/// for a thread when its alert comes, so the alert is kept here.
pub(crate) struct AlertBox<W> {
    /// The request being (or last) served.
    pub last_seq: W,
    /// The last request whose caller was alerted.
    pub alerted_seq: W,
}

impl<W: Word> AlertBox<W> {
    /// A worker starts request `seq`: whether it starts alerted (its caller
    /// was alerted when it posted, `flagged`, or since). Stores `last_seq`,
    /// fences, then reads `alerted_seq`: [`AlertBox::alert`] does the
    /// mirror image, so one of the two sees the other. Both sides are
    /// threads of the serving process, and this one runs on every call: its
    /// fence is the light one of an asymmetric pair.
    #[inline]
    pub fn begin<M: Mem<Word = W>>(&self, seq: u32, flagged: bool) -> bool {
        M::publish_light(&self.last_seq, seq);
        flagged || self.alerted_seq.load(Relaxed) == seq
    }

    /// The caller of request `seq` was alerted: note it; true if the
    /// request has started, so the thread running it must be alerted now
    /// (else [`AlertBox::begin`] will see the note).
    #[inline]
    pub fn alert<M: Mem<Word = W>>(&self, seq: u32) -> bool {
        M::publish_heavy(&self.alerted_seq, seq);
        self.last_seq.load(Relaxed) == seq
    }
}

#[cfg(test)]
mod tests {
    //! Model checks: each test's closure runs under every interleaving (and
    //! every weak-memory outcome loom models) of its threads. A lost wake-up
    //! shows as a deadlock, a lost alert or a double serve as a failed
    //! assertion.

    use super::*;
    use loom::sync::atomic::{AtomicBool, AtomicU32};
    use loom::sync::{Arc, Condvar, Mutex};

    /// Every interleaving with at most this many preemptions (loom's bound;
    /// the full space is too large for CI: most bugs need two or three).
    const PREEMPTIONS: usize = 3;

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(PREEMPTIONS);
        b.check(f);
    }

    /// loom's memory, with a futex made of a mutex and a condition
    /// variable: the kernel checks the word and queues the sleeper under one
    /// lock, and wakes under the same lock, which is what this does.
    struct Model;

    struct FWord {
        v: AtomicU32,
        lock: Mutex<()>,
        cv: Condvar,
    }

    impl FWord {
        fn new(v: u32) -> FWord {
            FWord {
                v: AtomicU32::new(v),
                lock: Mutex::new(()),
                cv: Condvar::new(),
            }
        }
    }

    impl Word for FWord {
        fn load(&self, o: Ordering) -> u32 {
            self.v.load(o)
        }
        fn store(&self, v: u32, o: Ordering) {
            self.v.store(v, o)
        }
        fn compare_exchange(&self, cur: u32, new: u32) -> Result<u32, u32> {
            self.v.compare_exchange(cur, new, AcqRel, Acquire)
        }
    }

    impl Mem for Model {
        type Word = FWord;
        fn fence() {
            loom::sync::atomic::fence(SeqCst)
        }
        fn futex_wait(w: &FWord, expected: u32, _timeout: Duration) {
            let g = w.lock.lock().unwrap();
            if w.v.load(SeqCst) == expected {
                drop(w.cv.wait(g).unwrap());
            }
        }
        fn futex_wake(w: &FWord) {
            let _g = w.lock.lock().unwrap();
            w.cv.notify_all();
        }
    }

    struct Slot {
        req: FWord,
        rep: FWord,
        client: FWord,
        server: FWord,
    }

    impl Slot {
        fn new(server: u32) -> Arc<Slot> {
            Arc::new(Slot {
                req: FWord::new(0),
                rep: FWord::new(0),
                client: FWord::new(RUNNING),
                server: FWord::new(server),
            })
        }
        fn words(&self) -> Words<'_, FWord> {
            Words {
                req: &self.req,
                rep: &self.rep,
                client: &self.client,
                server: &self.server,
            }
        }
    }

    /// The client's whole wait, as the runtime does it with spinning off.
    fn call(s: &Slot, seq: u32) -> Posted {
        let w = s.words();
        let posted = post::<Model>(&w, seq);
        while w.rep.load(Acquire) != seq {
            sleep_for_reply::<Model>(&w, seq, Duration::ZERO);
        }
        posted
    }

    /// A bound server's wait for the request after `last`.
    fn next_request(s: &Slot, last: u32) -> u32 {
        let w = s.words();
        loop {
            if let Some(r) = sleep_for_request::<Model>(&w, last, Duration::ZERO) {
                return r;
            }
        }
    }

    #[test]
    fn sequences_skip_zero_and_the_dead_mark() {
        assert_eq!(seq_after(SEQ_DEAD - 1), 1);
        assert_eq!(seq_after(u32::MAX), 1);
        assert_eq!(seq_after(5), 6);
    }

    #[test]
    fn calls_to_a_bound_server_never_lose_a_wake_up() {
        model(|| {
            let s = Slot::new(SLEEPING);
            let server = {
                let s = s.clone();
                loom::thread::spawn(move || {
                    let mut last = 0;
                    for _ in 0..2 {
                        last = next_request(&s, last);
                        publish_reply::<Model>(&s.words(), last);
                    }
                })
            };
            for seq in 1..=2 {
                assert_ne!(call(&s, seq), Posted::Unbound, "the server stays bound");
                assert_eq!(s.rep.load(SeqCst), seq);
            }
            server.join().unwrap();
        });
    }

    /// A parked call and the server's reply: the task is either answered
    /// when it looks after parking, or sent a notice (here a futex word the
    /// task waits on, as the runtime waits on the notice socket). A lost
    /// notice shows as a deadlock.
    #[test]
    fn a_parked_call_is_never_left_without_its_notice() {
        model(|| {
            let s = Slot::new(SLEEPING);
            let notices = Arc::new(FWord::new(0));
            let server = {
                let (s, notices) = (s.clone(), notices.clone());
                loom::thread::spawn(move || {
                    let r = next_request(&s, 0);
                    if publish_reply::<Model>(&s.words(), r) {
                        notices.store(1, SeqCst);
                        Model::futex_wake(&notices);
                    }
                })
            };
            let w = s.words();
            post::<Model>(&w, 1);
            if !park_for_reply::<Model>(&w, 1) {
                while notices.load(SeqCst) == 0 {
                    Model::futex_wait(&notices, 0, Duration::ZERO);
                }
            }
            unpark::<Model>(&w);
            assert_eq!(s.rep.load(SeqCst), 1, "a notice comes only after the reply");
            server.join().unwrap();
        });
    }

    #[test]
    fn a_request_posted_while_the_server_lets_go_is_served_exactly_once() {
        // The server serves call 1, then lets go of the slot; call 2 comes
        // meanwhile. Either the server sees it on its last look and takes
        // the slot back, or the client sees UNBOUND and kicks, and a worker
        // binds; never both, never neither.
        model(|| {
            let s = Slot::new(BUSY);
            let binding = Arc::new(Binding(FWord::new(BOUND)));
            let served = Arc::new(AtomicU32::new(0));
            let server = {
                let (s, binding, served) = (s.clone(), binding.clone(), served.clone());
                loom::thread::spawn(move || {
                    let w = s.words();
                    let first = next_request(&s, 0);
                    publish_reply::<Model>(&w, first);
                    binding.unbind();
                    if let Some(r) = let_go::<Model>(&w, first)
                        && binding.rebind()
                    {
                        w.server.store(BUSY, Relaxed);
                        served.fetch_add(1, SeqCst);
                        publish_reply::<Model>(&w, r);
                    }
                })
            };
            call(&s, 1);
            let w = s.words();
            if post::<Model>(&w, 2) == Posted::Unbound && binding.claim_for_queue() {
                // The kick: a worker (played by this thread) takes the
                // queued slot and serves it.
                binding.bind();
                w.server.store(BUSY, Relaxed);
                served.fetch_add(1, SeqCst);
                publish_reply::<Model>(&w, 2);
            }
            while w.rep.load(Acquire) != 2 {
                sleep_for_reply::<Model>(&w, 2, Duration::ZERO);
            }
            server.join().unwrap();
            assert_eq!(s.rep.load(SeqCst), 2, "call 2 was answered");
            assert_eq!(served.load(SeqCst), 1, "by exactly one thread");
        });
    }

    /// The server is running call 1 when its caller dies: the death's
    /// wake-up finds nobody asleep. The server, done with the call, must
    /// let go of the slot, not sleep on it (with no timeout in the model, a
    /// sleep nobody ends is a deadlock). Its pool counts a thread bound to a
    /// slot as busy: one asleep on a dead caller's slot would stay busy
    /// until its safety-net timeout.
    #[test]
    fn a_server_busy_when_its_caller_dies_lets_go_of_the_slot() {
        model(|| {
            let s = Slot::new(BUSY);
            s.req.store(1, SeqCst); // call 1, being served
            let dead = Arc::new(AtomicBool::new(false));
            let server = {
                let (s, dead) = (s.clone(), dead.clone());
                loom::thread::spawn(move || {
                    let mut last = 1;
                    let let_go = || dead.load(SeqCst);
                    // A request seen now is a dead caller's: never started.
                    while let Some(r) = wait_for_request::<Model>(&s.words(), last, let_go, Duration::ZERO) {
                        last = r;
                    }
                })
            };
            dead.store(true, SeqCst);
            caller_gone::<Model>(&s.words());
            server.join().unwrap();
        });
    }

    #[test]
    fn an_alert_reaches_its_call_whether_or_not_it_has_started() {
        model(|| {
            let boxed = Arc::new(AlertBox {
                last_seq: FWord::new(1),
                alerted_seq: FWord::new(0),
            });
            let alerted_thread = Arc::new(AtomicBool::new(false));
            let watcher = {
                let (boxed, alerted_thread) = (boxed.clone(), alerted_thread.clone());
                loom::thread::spawn(move || {
                    if boxed.alert::<Model>(2) {
                        alerted_thread.store(true, SeqCst);
                    }
                })
            };
            let started_alerted = boxed.begin::<Model>(2, false);
            watcher.join().unwrap();
            assert!(
                started_alerted || alerted_thread.load(SeqCst),
                "the alert for call 2 was lost"
            );
        });
    }

    #[test]
    fn an_alert_for_a_finished_call_does_not_alert_an_unrelated_one() {
        model(|| {
            let boxed = Arc::new(AlertBox {
                last_seq: FWord::new(1),
                alerted_seq: FWord::new(0),
            });
            let watcher = {
                let boxed = boxed.clone();
                loom::thread::spawn(move || boxed.alert::<Model>(1))
            };
            let second_alerted = boxed.begin::<Model>(2, false);
            watcher.join().unwrap();
            assert!(!second_alerted, "call 2 was never alerted");
        });
    }
}
