//! A map of weak references whose dead entries are swept whenever it has
//! doubled since the last sweep: what the export keeps of its open files,
//! which die when their last door goes.
//!
//! Sweeping on every insert (or every removal, as the open files' map did)
//! costs a pass over the whole map per open: with 100,000 files opened in
//! turn, a served `open` and `close` took 535 µs, quadratic in the opens
//! made. Sweeping when the map has doubled is the same amortized work per
//! insert whatever its size, and holds at most about twice the live
//! entries.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Weak};

/// Entries kept before the first sweep.
const FLOOR: usize = 64;

pub(crate) struct WeakMap<K, T> {
    map: HashMap<K, Weak<T>>,
    /// The map's size after the last sweep.
    swept: usize,
}

impl<K: Hash + Eq, T> Default for WeakMap<K, T> {
    fn default() -> Self {
        WeakMap {
            map: HashMap::new(),
            swept: 0,
        }
    }
}

impl<K: Hash + Eq, T> WeakMap<K, T> {
    /// The live entry for `key`.
    pub fn get(&self, key: &K) -> Option<Arc<T>> {
        self.map.get(key)?.upgrade()
    }

    /// Keep a weak reference to `value` under `key`, sweeping the dead
    /// entries first if the map has doubled since the last sweep.
    pub fn insert(&mut self, key: K, value: &Arc<T>) {
        if self.map.len() >= 2 * self.swept.max(FLOOR) {
            self.map.retain(|_, v| v.strong_count() > 0);
            self.swept = self.map.len();
        }
        self.map.insert(key, Arc::downgrade(value));
    }

    /// Forget `key` if its value is gone (a live one stays; a later sweep
    /// takes it once it dies).
    pub fn forget(&mut self, key: &K) {
        if self.map.get(key).is_some_and(|v| v.strong_count() == 0) {
            self.map.remove(key);
        }
    }

    /// Entries held, live or dead.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values made and dropped one after another, as files opened and
    /// closed in turn: the map stays small however many there were.
    #[test]
    fn dead_entries_are_swept_as_the_map_grows() {
        let mut m = WeakMap::default();
        let kept: Vec<Arc<u32>> = (0..10).map(Arc::new).collect();
        for (i, v) in kept.iter().enumerate() {
            m.insert(i as u64, v);
        }
        for i in 10..100_000u64 {
            let v = Arc::new(i as u32);
            m.insert(i, &v);
            assert!(
                m.held() <= 2 * FLOOR + 1,
                "{} entries after {i} inserts",
                m.held()
            );
        }
        for (i, v) in kept.iter().enumerate() {
            assert_eq!(
                m.get(&(i as u64)).as_deref(),
                Some(&**v),
                "a live entry survives sweeps"
            );
        }
        let live = (0..100_000u64).filter(|i| m.get(i).is_some()).count();
        assert_eq!(live, 10, "only the kept values are live");
        assert!(m.get(&99_999).is_none(), "a dead one is never handed out");
    }

    #[test]
    fn forgetting_takes_only_a_dead_entry() {
        let mut m = WeakMap::default();
        let live = Arc::new(1);
        m.insert(1u8, &live);
        m.forget(&1);
        assert_eq!(m.get(&1), Some(live.clone()));
        drop(live);
        m.forget(&1);
        assert_eq!(m.held(), 0);
    }
}
