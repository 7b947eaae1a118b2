//! Model checks of the in-process protocols: a door's count against its
//! workers' fast calls (`refs`), and a slot's owner against a thief
//! (`claim`). The protocol files are compiled
//! here a second time, over loom's atomics and lock (`sync` below), and
//! each test's closure runs under every interleaving, and every
//! weak-memory outcome loom models, of its threads (up to a bound of
//! preemptions). Both halves of the asymmetric fence are full fences here,
//! which is how the pair orders (`fence`, whose litmus test checks the
//! pair itself). So the model cannot tell a heavy fence from a full one:
//! taking out a heavy fence that follows a full one (as in
//! `Refs::settle_all`, after `take_decision`'s) goes unnoticed here.

// (Loaded twice on purpose: these copies run over loom's memory.)
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "refs.rs"]
mod refs;

#[allow(dead_code, clippy::duplicate_mod)]
#[path = "claim.rs"]
mod claim;

/// loom's counterparts of `crate::state::sync`.
mod sync {
    use std::sync::atomic::Ordering::SeqCst;

    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, fence};

    /// A lock with parking_lot's interface.
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub fn new(v: T) -> Mutex<T> {
            Mutex(loom::sync::Mutex::new(v))
        }
        pub fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap()
        }
    }

    pub(crate) fn light() {
        loom::sync::atomic::fence(SeqCst)
    }

    pub(crate) fn heavy() {
        loom::sync::atomic::fence(SeqCst)
    }
}

/// Every interleaving with at most this many preemptions (loom's bound;
/// the whole space is too large for CI, and most bugs need two or three).
const PREEMPTIONS: usize = 3;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(PREEMPTIONS);
    b.check(f);
}

mod counts {
    use std::sync::atomic::Ordering::SeqCst;

    use loom::cell::UnsafeCell;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicU32;

    use super::model;
    use super::refs::{self, Refs, Runner};

    /// A door in the model: its count, two workers' words, and what its
    /// calls and its `unreferenced` touch.
    struct Door {
        refs: Refs,
        runners: [Runner; 2],
        /// The object's state: every call and every `unreferenced` writes
        /// it, so loom reports any two of them not ordered by the protocol.
        state: UnsafeCell<u32>,
        /// A clock: each call's end and each decision take a tick, and the
        /// latest of each is kept.
        clock: AtomicU32,
        last_call_end: AtomicU32,
        last_decision: AtomicU32,
        fired: AtomicU32,
    }

    impl refs::Door for Door {
        fn runs(&self, addr: usize) -> bool {
            self.runners.iter().any(|r| r.names(addr))
        }
        fn unreferenced(&self) {
            let t = self.clock.fetch_add(1, SeqCst);
            self.last_decision.fetch_max(t, SeqCst);
            self.fired.fetch_add(1, SeqCst);
        }
    }

    impl Door {
        fn held_once() -> Arc<Door> {
            let d = Door {
                refs: Refs::new(),
                runners: Default::default(),
                state: UnsafeCell::new(0),
                clock: AtomicU32::new(1),
                last_call_end: AtomicU32::new(0),
                last_decision: AtomicU32::new(0),
                fired: AtomicU32::new(0),
            };
            d.refs.add_holder();
            Arc::new(d)
        }

        /// One fast call by worker `w`, if the door lets it in.
        fn call(&self, w: usize) {
            let r = &self.runners[w];
            if self.refs.enter(r) {
                loom::thread::yield_now();
                let t = self.clock.fetch_add(1, SeqCst);
                self.last_call_end.fetch_max(t, SeqCst);
            }
            self.refs.leave(r, self);
        }

        fn touch(&self) {
            // SAFETY: loom's cell checks, rather than assumes, that no two
            // accesses overlap: the protocol must order them.
            self.state.with_mut(|s| unsafe { *s += 1 });
        }
    }

    /// A door whose `unreferenced` touches the object too.
    struct Touching(Arc<Door>);

    impl refs::Door for Touching {
        fn runs(&self, addr: usize) -> bool {
            self.0.runs(addr)
        }
        fn unreferenced(&self) {
            self.0.touch();
            refs::Door::unreferenced(&*self.0);
        }
    }

    impl Touching {
        /// A worker's fast call on the door, which touches the object if
        /// the door lets it in.
        fn spawn_call(t: &Arc<Touching>) -> loom::thread::JoinHandle<()> {
            let t = t.clone();
            loom::thread::spawn(move || {
                let r = &t.0.runners[0];
                if t.0.refs.enter(r) {
                    t.0.touch();
                }
                t.0.refs.leave(r, &*t);
            })
        }
    }

    /// A worker's call races with `fall`, which leaves the door unheld:
    /// the call, if let in, ends before `unreferenced` is decided (loom
    /// would report the unordered writes), which happens exactly once and
    /// leaves nothing pending.
    fn a_call_races(fall: fn(&Refs, &Touching)) {
        model(move || {
            let d = Door::held_once();
            let t = Arc::new(Touching(d.clone()));
            let worker = Touching::spawn_call(&t);
            fall(&d.refs, &t);
            worker.join().unwrap();
            assert_eq!(d.fired.load(SeqCst), 1, "one unreferenced per fall");
            assert!(!d.refs.pending());
        });
    }

    #[test]
    fn unreferenced_follows_the_calls_let_in_before_the_last_release() {
        a_call_races(|refs, door| refs.drop_holder(door));
    }

    #[test]
    fn unreferenced_follows_the_calls_let_in_before_a_release_in_a_batch() {
        a_call_races(|refs, door| {
            if refs.drop_holder_later() {
                Refs::settle_all(&[door], |d| &d.0.refs);
            }
        });
    }

    /// Two doors let go in one batch while a worker calls one of them: each
    /// is decided once, the called one after its call.
    #[test]
    fn doors_let_go_at_once_are_each_decided_after_their_calls() {
        model(|| {
            let doors = [Door::held_once(), Door::held_once()];
            let t = doors.clone().map(|d| Arc::new(Touching(d)));
            let worker = Touching::spawn_call(&t[0]);
            let fallen: Vec<&Touching> = t
                .iter()
                .map(|t| &**t)
                .filter(|t| t.0.refs.drop_holder_later())
                .collect();
            Refs::settle_all(&fallen, |d| &d.0.refs);
            worker.join().unwrap();
            for d in &doors {
                assert_eq!(d.fired.load(SeqCst), 1, "one unreferenced per door");
                assert!(!d.refs.pending());
            }
        });
    }

    #[test]
    fn unreferenced_follows_the_calls_let_in_before_a_revoke() {
        a_call_races(|refs, door| {
            refs.revoke(door);
            refs.drop_holder(door); // (no holder is left to drop)
            refs.revoke(door);
        });
    }

    /// The door is dropped, held again and dropped again while two workers
    /// each try a call: some `unreferenced` is decided after every call has
    /// ended (a call that outlives every decision had the fall of the
    /// holder that let it in decided before it ended), and none is left
    /// pending.
    #[test]
    fn a_door_held_again_is_decided_after_its_new_calls() {
        model(|| {
            let d = Door::held_once();
            let workers: Vec<_> = (0..2)
                .map(|w| {
                    let d = d.clone();
                    loom::thread::spawn(move || d.call(w))
                })
                .collect();
            d.refs.drop_holder(&*d);
            d.refs.add_holder();
            d.refs.drop_holder(&*d);
            workers.into_iter().for_each(|w| w.join().unwrap());
            assert!(d.fired.load(SeqCst) >= 1, "the last fall was decided");
            assert!(
                d.last_decision.load(SeqCst) > d.last_call_end.load(SeqCst),
                "a call outlived every decision"
            );
            assert!(!d.refs.pending());
        });
    }
}

mod leases {
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    use super::claim::{Claim, Found, Ownership};
    use super::model;

    /// A slot leased by owner 1, between calls, and what calls on it touch
    /// (loom reports two callers whose accesses the protocol leaves
    /// unordered).
    struct Leased {
        slot: Ownership,
        owner: Claim,
        contents: UnsafeCell<u32>,
    }

    impl Leased {
        fn new() -> Arc<Leased> {
            let owner = Claim::new(0, 1, None);
            let slot = Ownership::new();
            slot.lease_free(&owner);
            slot.end(&owner);
            Arc::new(Leased {
                slot,
                owner,
                contents: UnsafeCell::new(0),
            })
        }

        fn touch(&self) {
            // SAFETY: loom's cell checks, rather than assumes, that no two
            // callers' accesses overlap: the protocol must order them.
            self.contents.with_mut(|c| unsafe { *c += 1 });
        }

        /// A thief (owner 2) tries to take the slot from its owner; the
        /// thread returns true if it did and made its call. (It takes no
        /// drained slot: that needs the late reply to have landed.)
        fn spawn_thief(l: &Arc<Leased>) -> loom::thread::JoinHandle<bool> {
            let l = l.clone();
            loom::thread::spawn(move || {
                let thief = Claim::new(0, 2, None);
                let took = match l.slot.peek() {
                    found @ Found::Leased(_) => l.slot.take(found, &thief),
                    _ => false,
                };
                if took {
                    l.touch();
                    l.slot.end(&thief);
                }
                took
            })
        }
    }

    /// The owner makes two calls (until its claim is void) while a thief
    /// tries to take the slot: never both in a call at once, and a thief
    /// that backs off leaves the slot its owner's.
    #[test]
    fn an_owner_and_a_thief_are_never_in_one_call() {
        model(|| {
            let l = Leased::new();
            let thief = Leased::spawn_thief(&l);
            for _ in 0..2 {
                if !l.slot.begin(&l.owner) {
                    break;
                }
                l.touch();
                l.slot.end(&l.owner);
            }
            let took = thief.join().unwrap();
            assert!(
                took || l.slot.begin(&l.owner),
                "a thief that backed off left the slot unusable"
            );
        });
    }

    /// The owner gives its lease up while a thief tries to take the slot:
    /// exactly one of them wins it, so it is never on the free list and
    /// leased at once.
    #[test]
    fn a_released_slot_is_freed_or_stolen_never_both() {
        model(|| {
            let l = Leased::new();
            let thief = Leased::spawn_thief(&l);
            l.slot.end(&l.owner);
            let freed = l.slot.free(&l.owner);
            let took = thief.join().unwrap();
            assert!(freed != took, "freed: {freed}, stolen: {took}");
        });
    }

    /// The owner abandons its call while a thief tries: a thief never takes
    /// a slot whose call was abandoned, which stays draining.
    #[test]
    fn an_abandoned_call_keeps_its_slot_from_thieves() {
        model(|| {
            let l = Leased::new();
            let thief = Leased::spawn_thief(&l);
            let began = l.slot.begin(&l.owner);
            if began {
                l.touch();
                l.slot.abandon(&l.owner);
            }
            let took = thief.join().unwrap();
            assert!(
                !(began && took),
                "a thief took a slot in (or draining from) a call"
            );
            if began {
                assert!(matches!(l.slot.peek(), Found::Draining(_)));
            }
        });
    }
}
