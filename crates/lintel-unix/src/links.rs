//! Symlinks the service does not follow, followed for the program.
//!
//! The service resolves every path beneath its export's root and refuses
//! a symlink that leaves it (`EXDEV`): an absolute target, or one that
//! climbs above the root. For the program the served tree is mounted at
//! the prefix, so such a link means what it would mean there: an absolute
//! target under the prefix leads back into the served tree, any other
//! absolute target leads to the host (where the kernel goes on), and so
//! does a relative one that climbs above the prefix. [`resolve`] walks the
//! path one name at a time, as the kernel's lookup does, asking the
//! service only about names it has already resolved to, so it never
//! asks it to follow a link itself; at most [`MAX_LINKS`] links, then
//! `ELOOP`, as Linux.
//!
//! The walk is a plain function over [`Lookup`], tested here on a tree in
//! memory; the emulation runs it only after the service said `EXDEV`.

use crate::paths::Prefix;

/// Most symlinks one lookup follows (Linux's `MAXSYMLINKS`).
pub const MAX_LINKS: usize = 40;

/// What the walk asks of the served tree.
pub trait Lookup {
    /// The target of `rel` (relative to the root, no links in it but
    /// perhaps its last name) if it is a symlink, `None` if it is
    /// anything else; the errno if it cannot be looked up.
    fn link(&self, rel: &[u8]) -> Result<Option<Vec<u8>>, i32>;
}

/// Where a path leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A served path, relative to the root, with no symlink in it but
    /// perhaps its last name (when that is not to be followed).
    Served(Vec<u8>),
    /// An absolute host path, for the kernel.
    Host(Vec<u8>),
}

/// Where the served path `rel` (relative to the root) leads, following
/// every symlink in it, and the last one too if `follow_last`.
pub fn resolve(prefix: &Prefix, rel: &[u8], follow_last: bool, look: &impl Lookup) -> Result<Target, i32> {
    // Names still to walk, last first; and the resolved directory.
    let mut todo: Vec<Vec<u8>> = names(rel).rev().collect();
    let mut done: Vec<Vec<u8>> = Vec::new();
    let mut links = 0;
    while let Some(name) = todo.pop() {
        if name == b".." {
            if done.pop().is_none() {
                // Above the prefix: the host's, from the prefix's parent.
                let mut host = prefix.as_bytes().to_vec();
                host.extend_from_slice(b"/..");
                return Ok(Target::Host(host_path(host, &todo)));
            }
            continue;
        }
        let mut here = done.clone();
        here.push(name);
        let at = here.join(&b'/');
        let last = todo.is_empty();
        if last && !follow_last {
            return Ok(Target::Served(at));
        }
        let target = match look.link(&at) {
            Ok(t) => t,
            // The call itself says why, or makes the last name.
            Err(_) if last => return Ok(Target::Served(at)),
            Err(e) => return Err(e),
        };
        let Some(target) = target else {
            done = here;
            continue;
        };
        links += 1;
        if links > MAX_LINKS {
            return Err(libc::ELOOP);
        }
        if target.first() == Some(&b'/') {
            let Some(inside) = prefix.strip(&target) else {
                return Ok(Target::Host(host_path(target, &todo)));
            };
            done.clear();
            todo.extend(names(&inside).rev());
        } else {
            todo.extend(names(&target).rev());
        }
    }
    Ok(Target::Served(if done.is_empty() {
        b".".to_vec()
    } else {
        done.join(&b'/')
    }))
}

/// The path's names, without empty ones and `.`.
pub(crate) fn names(path: &[u8]) -> impl DoubleEndedIterator<Item = Vec<u8>> + '_ {
    path.split(|&b| b == b'/')
        .filter(|n| !n.is_empty() && *n != b".")
        .map(<[u8]>::to_vec)
}

/// `base` with the names still to walk (last first in `todo`) after it.
fn host_path(mut base: Vec<u8>, todo: &[Vec<u8>]) -> Vec<u8> {
    for name in todo.iter().rev() {
        base.push(b'/');
        base.extend_from_slice(name);
    }
    base
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A tree in memory: its symlinks by path, and its other names.
    struct Tree {
        links: HashMap<&'static str, &'static str>,
        others: Vec<&'static str>,
    }

    impl Lookup for Tree {
        fn link(&self, rel: &[u8]) -> Result<Option<Vec<u8>>, i32> {
            let rel = std::str::from_utf8(rel).unwrap();
            match self.links.get(rel) {
                Some(t) => Ok(Some(t.as_bytes().to_vec())),
                None if self.others.contains(&rel) => Ok(None),
                None => Err(libc::ENOENT),
            }
        }
    }

    fn tree() -> Tree {
        Tree {
            links: HashMap::from([
                ("abs", "/srv/d"),
                ("d/up", "../e"),
                ("out", "/etc"),
                ("d/climb", "../../usr/lib"),
                ("loop", "loop"),
                ("d/dot", "."),
            ]),
            others: vec!["d", "e", "d/f", "e/g"],
        }
    }

    fn go(rel: &str, follow: bool) -> Result<Target, i32> {
        resolve(&Prefix::new(b"/srv").unwrap(), rel.as_bytes(), follow, &tree())
    }

    fn served(p: &str) -> Result<Target, i32> {
        Ok(Target::Served(p.as_bytes().to_vec()))
    }

    fn host(p: &str) -> Result<Target, i32> {
        Ok(Target::Host(p.as_bytes().to_vec()))
    }

    #[test]
    fn absolute_targets_under_the_prefix_lead_back_in() {
        assert_eq!(go("abs/f", true), served("d/f"));
        assert_eq!(go("abs", true), served("d"));
        assert_eq!(go("abs", false), served("abs"), "the link itself");
        assert_eq!(go("abs/up/g", true), served("e/g"), "a relative link after it");
        assert_eq!(go("abs/dot/dot/f", true), served("d/f"));
    }

    #[test]
    fn targets_outside_the_prefix_lead_to_the_host() {
        assert_eq!(go("out/hostname", true), host("/etc/hostname"));
        assert_eq!(go("out", true), host("/etc"));
        assert_eq!(go("d/climb/x", true), host("/srv/../usr/lib/x"));
    }

    #[test]
    fn loops_end_in_eloop_and_missing_names_in_the_lookups_error() {
        assert_eq!(go("loop", true), Err(libc::ELOOP));
        assert_eq!(go("loop", false), served("loop"));
        assert_eq!(go("nope/x", true), Err(libc::ENOENT));
        assert_eq!(go("abs/new", true), served("d/new"), "the last name may be made");
    }
}
