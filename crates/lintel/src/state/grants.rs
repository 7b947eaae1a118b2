//! The grant table: the server-private translation from the small door
//! numbers one peer uses to the doors we serve.
//!
//! A peer can name only grants we made for it; every index it sends is
//! checked here. Each grant counts how many times it was sent minus how
//! many the peer released, and holds one reference on the door (a holder)
//! while that count is above zero.
//!
//! Once the peer is gone the table is *closed*: everything in it is
//! released and no new grant is made, so a call that passes doors to a dead
//! peer cannot leave a reference behind.
//!
//! A plain value: it says which doors gained or lost their holder, and the
//! caller applies that to the doors (outside the table's lock).

use std::collections::HashMap;

/// A door as the grant table sees it: any shared handle with an identity.
pub(crate) trait Granted: Clone {
    /// Identity of the door (the same door gives the same key).
    fn key(&self) -> usize;
}

impl<T> Granted for std::sync::Arc<T> {
    fn key(&self) -> usize {
        std::sync::Arc::as_ptr(self) as *const () as usize
    }
}

/// What [`Grants::grant`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Granting {
    /// A new grant: the peer now holds the door (add a holder).
    New(u32),
    /// The peer held it already; its count went up.
    Again(u32),
}

impl Granting {
    pub fn index(self) -> u32 {
        match self {
            Granting::New(g) | Granting::Again(g) => g,
        }
    }
}

pub(crate) struct Grants<D> {
    entries: Vec<Option<(D, u32)>>,
    by_door: HashMap<usize, u32>,
    free: Vec<u32>,
    closed: bool,
}

impl<D> Default for Grants<D> {
    fn default() -> Self {
        Grants {
            entries: Vec::new(),
            by_door: HashMap::new(),
            free: Vec::new(),
            closed: false,
        }
    }
}

impl<D: Granted> Grants<D> {
    /// Grant `door` to the peer once more; `None` once the table is closed.
    pub fn grant(&mut self, door: &D) -> Option<Granting> {
        use std::collections::hash_map::Entry;
        if self.closed {
            return None;
        }
        // One lookup: the door's grant, or the place for a new one.
        let free = match self.by_door.entry(door.key()) {
            Entry::Occupied(e) => {
                let g = *e.get();
                return Some(match &mut self.entries[g as usize] {
                    Some((_, count)) => {
                        *count = count.saturating_add(1);
                        Granting::Again(g)
                    }
                    vacant => {
                        *vacant = Some((door.clone(), 1));
                        Granting::New(g)
                    }
                });
            }
            Entry::Vacant(v) => v,
        };
        let e = Some((door.clone(), 1));
        let g = match self.free.pop() {
            Some(g) => {
                self.entries[g as usize] = e;
                g
            }
            None => {
                self.entries.push(e);
                (self.entries.len() - 1) as u32
            }
        };
        free.insert(g);
        Some(Granting::New(g))
    }

    /// The door behind grant `g`, if the peer holds one there.
    #[inline]
    pub fn lookup(&self, g: u32) -> Option<&D> {
        self.entries.get(g as usize)?.as_ref().map(|(d, _)| d)
    }

    /// Take back `count` sends of grant `g` (a release from the peer, or
    /// a grant rolled back because its call failed). Returns the door if
    /// the peer no longer holds it (drop its holder).
    pub fn release(&mut self, g: u32, count: u32) -> Option<D> {
        let (_, c) = self.entries.get_mut(g as usize)?.as_mut()?;
        *c = c.saturating_sub(count);
        if *c > 0 {
            return None;
        }
        let (door, _) = self.entries[g as usize].take()?;
        self.by_door.remove(&door.key());
        self.free.push(g);
        Some(door)
    }

    /// The peer is gone: close the table and return every door it held.
    pub fn close(&mut self) -> Vec<D> {
        self.closed = true;
        self.by_door.clear();
        self.free.clear();
        self.entries.drain(..).flatten().map(|(d, _)| d).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    type G = Grants<Arc<u32>>;

    #[test]
    fn the_same_door_keeps_one_grant_and_counts_sends() {
        let mut t = G::default();
        let d = Arc::new(1);
        assert_eq!(t.grant(&d), Some(Granting::New(0)));
        assert_eq!(t.grant(&d), Some(Granting::Again(0)));
        assert!(t.release(0, 1).is_none(), "sent twice, released once");
        assert!(Arc::ptr_eq(&t.release(0, 1).unwrap(), &d));
        assert!(t.lookup(0).is_none());
    }

    #[test]
    fn indices_are_reused_only_after_release_and_never_name_another_peers_door() {
        let mut t = G::default();
        let (a, b) = (Arc::new(1), Arc::new(2));
        let ga = t.grant(&a).unwrap().index();
        let gb = t.grant(&b).unwrap().index();
        assert_ne!(ga, gb);
        assert!(t.release(ga, 1).is_some());
        let c = Arc::new(3);
        assert_eq!(t.grant(&c).unwrap(), Granting::New(ga), "freed index reused");
        assert_eq!(**t.lookup(ga).unwrap(), 3);
        assert_eq!(**t.lookup(gb).unwrap(), 2);
    }

    #[test]
    fn unknown_and_stale_indices_are_refused() {
        let mut t = G::default();
        assert!(t.lookup(0).is_none());
        assert!(t.lookup(u32::MAX).is_none());
        assert!(t.release(7, 1).is_none());
        let g = t.grant(&Arc::new(1)).unwrap().index();
        t.release(g, 1);
        assert!(t.release(g, 1).is_none(), "released twice");
    }

    #[test]
    fn a_closed_table_grants_nothing_more() {
        let mut t = G::default();
        let d = Arc::new(1);
        t.grant(&d);
        t.grant(&d);
        let held = t.close();
        assert_eq!(held.len(), 1, "one holder per door, whatever the count");
        assert_eq!(t.grant(&d), None, "a dead peer is granted nothing");
        assert!(t.lookup(0).is_none());
    }
}
