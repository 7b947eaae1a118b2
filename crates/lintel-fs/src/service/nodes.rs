//! The export's nodes by file, and the claims that let a node be found.
//!
//! A file's node (its token and its cache) is found by the file's
//! `(st_dev, st_ino)`. Inode numbers are reused: once the last descriptor
//! of an unlinked file is closed, the next file made may get its number
//! (ext4 gives a freed number to the next new file). A node found by
//! number after that would show the new file the old one's cached pages.
//!
//! So a node is found only while an open of its file holds a [`Claim`] on
//! it. The last claim to go takes the node out of the map, and it goes
//! before its open's descriptors close (`Opened` declares its claim before
//! them, and Rust drops fields in that order): by the time the number can
//! be reused, nobody finds the node. One held on meanwhile (a write-out's
//! list of nodes) is found by nobody, and the next open of the file, the
//! same one or a new one by that number, makes a new node.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::service::node::Node;

/// A file's identity on the host.
pub(crate) type Key = (u64, u64);

/// A node and the number of claims on it (never 0 in the map: the last
/// claim takes its node out).
type Claimed = (Arc<Node>, usize);

/// The export's nodes: those of files open through it.
#[derive(Clone, Default)]
pub(crate) struct Nodes(Arc<Mutex<HashMap<Key, Claimed>>>);

impl Nodes {
    /// A claim on the node of the file `key`, made if no open holds one.
    pub(crate) fn claim(&self, key: Key) -> Claim {
        let mut map = self.0.lock();
        let (node, claims) = map.entry(key).or_insert_with(|| (Arc::new(Node::new()), 0));
        *claims += 1;
        Claim {
            node: node.clone(),
            nodes: self.clone(),
            key,
        }
    }

    /// The node of the file `key`, if an open holds a claim on it.
    pub(crate) fn get(&self, key: Key) -> Option<Arc<Node>> {
        self.0.lock().get(&key).map(|(node, _)| node.clone())
    }

    /// Every node an open holds a claim on.
    pub(crate) fn live(&self) -> Vec<Arc<Node>> {
        self.0.lock().values().map(|(node, _)| node.clone()).collect()
    }
}

/// An open's hold on its file's node (see the module's doc).
pub(crate) struct Claim {
    node: Arc<Node>,
    nodes: Nodes,
    key: Key,
}

impl std::ops::Deref for Claim {
    type Target = Arc<Node>;

    fn deref(&self) -> &Arc<Node> {
        &self.node
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        // While this claim lives, its entry is its node's.
        if let Entry::Occupied(mut entry) = self.nodes.0.lock().entry(self.key) {
            debug_assert!(Arc::ptr_eq(&entry.get().0, &self.node));
            entry.get_mut().1 -= 1;
            if entry.get().1 == 0 {
                entry.remove();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_found_while_an_open_claims_it() {
        let nodes = Nodes::default();
        let a = nodes.claim((1, 2));
        let b = nodes.claim((1, 2));
        assert!(Arc::ptr_eq(&a, &b), "two opens of a file share its node");
        assert!(nodes.get((1, 2)).is_some_and(|n| Arc::ptr_eq(&n, &a)));
        drop(a);
        assert!(nodes.get((1, 2)).is_some(), "one open still claims it");
        drop(b);
        assert!(nodes.get((1, 2)).is_none());
    }

    /// The inode number's next file gets a node of its own, even while
    /// the old node is held on (by a write-out's list, say).
    #[test]
    fn a_node_no_open_claims_is_not_found_though_held() {
        let nodes = Nodes::default();
        let old = nodes.claim((1, 2));
        let held: Arc<Node> = Arc::clone(&old);
        drop(old);
        assert!(nodes.get((1, 2)).is_none(), "found while held on");
        let new = nodes.claim((1, 2));
        assert!(!Arc::ptr_eq(&new, &held), "the next file got the old node");
        // The old node going later takes nothing of the new one's.
        drop(held);
        assert!(nodes.get((1, 2)).is_some_and(|n| Arc::ptr_eq(&n, &new)));
    }
}
