//! A real build in a served tree: zlib's `./configure && make && make
//! test` (`third_party/zlib`), natively in one copy of the sources and
//! under `lintel-run` in another, served through the prefix, with the
//! shell's working directory there. Both must succeed, `make test` must
//! pass (it runs `minigzip` and `example`, which the build has just
//! linked, from the tree), and every file the builds leave must be the
//! same byte for byte, mode and all.

mod common;
use common::check_library_is_current;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const PREFIX: &str = "/lintel-served";

/// What `make test` prints when each of its three tests passes.
const PASSED: [&str; 3] = [
    "*** zlib test OK ***",
    "*** zlib shared test OK ***",
    "*** zlib 64-bit test OK ***",
];

/// The build, as a shell runs it in the sources' directory.
const BUILD: &str = "./configure && make && make test";

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().unwrap().is_dir() {
            copy_dir(&src, &dst);
        } else {
            // Permissions too: `configure` is executable.
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// `cmd` with an environment the same both ways: no make flags from
/// whoever runs the tests, no compiler settings, the C locale.
fn command(program: &str) -> Command {
    let mut c = Command::new(program);
    for v in [
        "MAKEFLAGS",
        "MFLAGS",
        "MAKELEVEL",
        "CARGO_MAKEFLAGS",
        "CC",
        "CFLAGS",
        "CPPFLAGS",
        "LDFLAGS",
        "LDSHARED",
        "AR",
        "ARFLAGS",
        "RANLIB",
        "prefix",
        "LD_LIBRARY_PATH",
    ] {
        c.env_remove(v);
    }
    c.env("LC_ALL", "C");
    c
}

fn report(what: &str, out: &std::process::Output) -> String {
    format!(
        "{what}: status {:?}\n--- stdout (end)\n{}\n--- stderr (end)\n{}",
        out.status.code(),
        tail(&out.stdout),
        tail(&out.stderr)
    )
}

fn tail(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Every entry under `root`: a directory, a symlink's target, or a file's
/// mode and bytes.
fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let md = std::fs::symlink_metadata(&p).unwrap();
            if md.is_symlink() {
                let mut v = b"symlink ".to_vec();
                v.extend_from_slice(std::fs::read_link(&p).unwrap().as_os_str().as_encoded_bytes());
                out.insert(rel, v);
            } else if md.is_dir() {
                out.insert(rel, b"dir".to_vec());
                walk(root, &p, out);
            } else {
                let mut v = format!("file {:o} ", md.permissions().mode()).into_bytes();
                v.extend_from_slice(&contents(&rel, &p));
                out.insert(rel, v);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// A file's bytes; `configure.log` with what differs between any two runs
/// taken out: the date `configure` logs (its third line) and the process
/// ID in its test files' names (`ztest1234.c`).
fn contents(rel: &str, p: &Path) -> Vec<u8> {
    let bytes = std::fs::read(p).unwrap();
    if rel != "configure.log" {
        return bytes;
    }
    let text = String::from_utf8_lossy(&bytes);
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        let line = if i == 2 {
            "(the date)".to_string()
        } else {
            without_pids(line)
        };
        out.push_str(&line);
        out.push('\n');
    }
    out.into_bytes()
}

fn without_pids(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find("ztest") {
        out.push_str(&rest[..at + 5]);
        rest = rest[at + 5..].trim_start_matches(|c: char| c.is_ascii_digit());
        out.push('N');
    }
    out.push_str(rest);
    out
}

#[test]
fn zlib_builds_and_passes_its_tests_in_a_served_tree_as_natively() {
    check_library_is_current();
    let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../third_party/zlib");
    assert!(sources.join("configure").exists(), "third_party/zlib is missing");
    let (native, served) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    copy_dir(&sources, native.path());
    copy_dir(&sources, served.path());
    assert_eq!(tree(native.path()), tree(served.path()), "the two copies differ");

    let n = command("/bin/sh")
        .args(["-c", BUILD])
        .current_dir(native.path())
        .output()
        .unwrap();
    // Served: `./configure` executed straight from the served tree by a
    // shell whose working directory is there.
    let s = command(env!("CARGO_BIN_EXE_lintel-run"))
        .args([
            "--root",
            served.path().to_str().unwrap(),
            "--prefix",
            PREFIX,
            "--",
        ])
        .args(["/bin/sh", "-c", &format!("cd {PREFIX} && {BUILD}")])
        .output()
        .unwrap();
    assert!(n.status.success(), "{}", report("native build", &n));
    assert!(s.status.success(), "{}", report("served build", &s));
    for (what, out) in [("native", &n), ("served", &s)] {
        let text = String::from_utf8_lossy(&out.stdout);
        for line in PASSED {
            assert!(text.contains(line), "{what} `make test` did not print {line:?}");
        }
    }

    // What the build and its tests print is the same too, but for one
    // known difference: the dynamic loader looks for libraries before the
    // emulation is armed, so it cannot find `libz.so.1` in the served tree
    // through `LD_LIBRARY_PATH`, and the shared test's programs
    // (`examplesh`, `minigzipsh`) run with the host's libz, which
    // `example` reports on stderr (see docs/unix-emulation.md).
    assert_eq!(
        String::from_utf8_lossy(&s.stdout),
        String::from_utf8_lossy(&n.stdout),
        "what the build printed, served (left) and native (right)"
    );
    let known = "warning: different zlib version linked: ";
    let stderr_of = |out: &std::process::Output| -> Vec<String> {
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| !l.starts_with(known))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        stderr_of(&s),
        stderr_of(&n),
        "the build's errors, served (left) and native (right)"
    );

    let (a, b) = (tree(native.path()), tree(served.path()));
    let only = |x: &BTreeMap<String, Vec<u8>>, y: &BTreeMap<String, Vec<u8>>| -> Vec<String> {
        x.keys().filter(|k| !y.contains_key(*k)).cloned().collect()
    };
    let differ: Vec<&String> = a
        .iter()
        .filter(|(k, v)| b.get(*k).is_some_and(|w| w != *v))
        .map(|(k, _)| k)
        .collect();
    let (only_native, only_served) = (only(&a, &b), only(&b, &a));
    assert!(
        only_native.is_empty() && only_served.is_empty() && differ.is_empty(),
        "the builds left different trees:\n only native: {only_native:?}\n only served: {only_served:?}\n different: {differ:?}"
    );
    // What the build made is there (and so compared).
    for made in [
        "libz.a",
        "libz.so.1.3.1",
        "libz.so",
        "minigzip",
        "example",
        "minigzip64",
        "adler32.o",
        "zutil.lo",
    ] {
        assert!(a.contains_key(made), "the build made no {made}");
    }
}
