//! Checking and splitting the paths clients send. The kernel does the
//! real confinement (`openat2` with `RESOLVE_BENEATH`); this refuses what
//! is wrong on its face, with the errno Linux gives, and finds the parent
//! directory and the last name for calls that act on a name in a directory.

use crate::proto::FsError;

/// A client path the service may resolve beneath its root: not empty
/// (`ENOENT`), no NUL byte (`EINVAL`), not absolute (it names the host's
/// root, outside the export).
pub(crate) fn check(path: &[u8]) -> Result<&[u8], FsError> {
    if path.is_empty() {
        return Err(rustix::io::Errno::NOENT.into());
    }
    if path.contains(&0) {
        return Err(FsError::Invalid("a path contains a NUL byte".into()));
    }
    if path[0] == b'/' {
        return Err(escapes(path));
    }
    Ok(path)
}

/// The error for a path that leaves the export.
pub(crate) fn escapes(path: &[u8]) -> FsError {
    FsError::Escapes {
        path: String::from_utf8_lossy(path).into_owned(),
    }
}

/// `path` as (parent directory, last name). The name keeps its trailing
/// slashes, so the kernel applies its own rules to them (`unlink("f/")` is
/// `ENOTDIR`). A last name of `.` or `..` is refused: no call that acts on
/// a name in a directory accepts them (Linux gives `EINVAL` or `EBUSY`).
pub(crate) fn split(path: &[u8]) -> Result<(&[u8], &[u8]), FsError> {
    let path = check(path)?;
    let end = path.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
    let start = path[..end].iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    let parent: &[u8] = if start == 0 { b"." } else { &path[..start] };
    match &path[start..end] {
        b"." | b".." => Err(FsError::Invalid(format!(
            "`{}` does not end in a name",
            String::from_utf8_lossy(path)
        ))),
        _ => Ok((parent, &path[start..])),
    }
}

/// The kernel's name of a file (`link`, as `/proc/self/fd` gives it)
/// relative to the export's `root` (its name the same way): `.` for the
/// root itself, a ` (deleted)` kept; `None` if it is not beneath the root.
pub(crate) fn beneath(root: &[u8], link: &[u8]) -> Option<Vec<u8>> {
    const DELETED: &[u8] = b" (deleted)";
    let (name, deleted) = match link.strip_suffix(DELETED) {
        Some(name) => (name, true),
        None => (link, false),
    };
    let rest = name.strip_prefix(root)?;
    let mut rel = match rest {
        [] => b".".to_vec(),
        // (The host's root exports every path: its name is `/` alone.)
        [b'/', tail @ ..] if !tail.is_empty() => tail.to_vec(),
        tail if root == b"/" && !tail.is_empty() => tail.to_vec(),
        _ => return None,
    };
    if deleted {
        rel.extend_from_slice(DELETED);
    }
    Some(rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_name_is_made_relative_to_the_root() {
        assert_eq!(beneath(b"/srv/x", b"/srv/x/a/b").as_deref(), Some(&b"a/b"[..]));
        assert_eq!(beneath(b"/srv/x", b"/srv/x").as_deref(), Some(&b"."[..]));
        assert_eq!(
            beneath(b"/srv/x", b"/srv/x/a (deleted)").as_deref(),
            Some(&b"a (deleted)"[..])
        );
        assert_eq!(beneath(b"/srv/x", b"/srv/xy/a"), None, "a sibling, not beneath");
        assert_eq!(beneath(b"/srv/x", b"/srv/a"), None);
        assert_eq!(beneath(b"/", b"/etc/passwd").as_deref(), Some(&b"etc/passwd"[..]));
    }

    #[test]
    fn paths_are_relative_and_whole() {
        assert_eq!(check(b"a/b"), Ok(&b"a/b"[..]));
        assert_eq!(check(b"").unwrap_err().errno(), 2);
        assert!(matches!(check(b"a\0b"), Err(FsError::Invalid(_))));
        assert!(matches!(check(b"/etc/passwd"), Err(FsError::Escapes { .. })));
    }

    #[test]
    fn a_path_splits_into_its_parent_and_last_name() {
        fn ok(p: &[u8]) -> (&[u8], &[u8]) {
            split(p).unwrap()
        }
        assert_eq!(ok(b"f"), (&b"."[..], &b"f"[..]));
        assert_eq!(ok(b"d/f"), (&b"d/"[..], &b"f"[..]));
        assert_eq!(ok(b"d//e/f"), (&b"d//e/"[..], &b"f"[..]));
        assert_eq!(ok(b"d/e/"), (&b"d/"[..], &b"e/"[..]));
        assert_eq!(ok(b"../x"), (&b"../"[..], &b"x"[..]));
        for bad in [&b"."[..], b"..", b"d/..", b"d/./", b"../"] {
            assert!(matches!(split(bad), Err(FsError::Invalid(_))), "{bad:?}");
        }
        assert!(matches!(split(b"/x"), Err(FsError::Escapes { .. })));
    }
}
