//! Which paths the emulation serves: those under the prefix, named
//! relative to the export's root. Lexical, as the prefix does not exist on
//! the host.

/// The served prefix (an absolute path, without a trailing slash).
#[derive(Debug, Clone)]
pub struct Prefix(Vec<u8>);

impl Prefix {
    /// `prefix` normalized; `None` unless it is absolute and not `/` itself.
    pub fn new(prefix: &[u8]) -> Option<Prefix> {
        let p = normalize(prefix)?;
        (p.first() == Some(&b'/') && p.len() > 1).then_some(Prefix(p))
    }

    /// `path` (absolute) relative to the export root if it lies under the
    /// prefix (`.` for the prefix itself); `None` if it does not.
    pub fn strip(&self, path: &[u8]) -> Option<Vec<u8>> {
        if path.first() != Some(&b'/') {
            return None;
        }
        let p = normalize(path)?;
        let rest = p.strip_prefix(&self.0[..])?;
        match rest {
            [] => Some(b".".to_vec()),
            [b'/', tail @ ..] => Some(tail.to_vec()),
            _ => None,
        }
    }
}

impl Prefix {
    /// The prefix itself.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The absolute path a program sees for `rel` (relative to the root).
    pub fn absolute(&self, rel: &[u8]) -> Vec<u8> {
        let mut p = self.0.clone();
        if rel != b"." {
            p.push(b'/');
            p.extend_from_slice(rel);
        }
        p
    }
}

/// Where the relative path `rel` leads from the served directory `dir`
/// when it climbs out of the served tree: the absolute host path.
pub fn outside(prefix: &Prefix, dir: &[u8], rel: &[u8]) -> Option<Vec<u8>> {
    let mut whole = prefix.absolute(dir);
    whole.push(b'/');
    whole.extend_from_slice(rel);
    let p = normalize(&whole)?;
    prefix.strip(&p).is_none().then_some(p)
}

/// Join a served directory's path (relative to the root) and a relative
/// path under it; `None` if the result leaves the root.
pub fn join(dir: &[u8], rel: &[u8]) -> Option<Vec<u8>> {
    let mut whole = dir.to_vec();
    whole.push(b'/');
    whole.extend_from_slice(rel);
    normalize(&whole)
}

/// Collapse `//`, `.` and `..` (which stops at the root for an absolute
/// path: `None` if a relative one climbs out).
fn normalize(path: &[u8]) -> Option<Vec<u8>> {
    let absolute = path.first() == Some(&b'/');
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in path.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                if parts.pop().is_none() && !absolute {
                    return None;
                }
            }
            c => parts.push(c),
        }
    }
    let mut out = Vec::new();
    if absolute {
        out.push(b'/');
    }
    out.extend_from_slice(&parts.join(&b'/'));
    if out.is_empty() {
        out.push(b'.');
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn climbing_out_of_the_served_tree_leads_to_the_host() {
        let p = Prefix::new(b"/srv/data").unwrap();
        assert_eq!(p.absolute(b"."), b"/srv/data".to_vec());
        assert_eq!(p.absolute(b"a/b"), b"/srv/data/a/b".to_vec());
        assert_eq!(outside(&p, b".", b".."), Some(b"/srv".to_vec()));
        assert_eq!(outside(&p, b"a", b"../../../etc"), Some(b"/etc".to_vec()));
        assert_eq!(outside(&p, b"a", b"../b"), None, "still served");
        assert_eq!(join(b"a", b"../.."), None);
    }

    #[test]
    fn paths_under_the_prefix_map_to_the_root() {
        let p = Prefix::new(b"/srv/data/").unwrap();
        assert_eq!(p.strip(b"/srv/data"), Some(b".".to_vec()));
        assert_eq!(p.strip(b"/srv/data/a/b.txt"), Some(b"a/b.txt".to_vec()));
        assert_eq!(p.strip(b"/srv//data/./a/../b"), Some(b"b".to_vec()));
        assert_eq!(p.strip(b"/srv/database"), None);
        assert_eq!(p.strip(b"/srv/data/../etc"), None);
        assert_eq!(p.strip(b"relative"), None);
        assert!(Prefix::new(b"/").is_none() && Prefix::new(b"rel").is_none());
    }

    #[test]
    fn relative_paths_join_their_directory() {
        assert_eq!(join(b".", b"a"), Some(b"a".to_vec()));
        assert_eq!(join(b"d/e", b"../f"), Some(b"d/f".to_vec()));
        assert_eq!(join(b"d", b".."), Some(b".".to_vec()));
        assert_eq!(join(b"d", b"../../x"), None, "it leaves the prefix");
    }
}
