//! What the preload tests share.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// `cargo test` rebuilds `lintel-run` but not the preload library (a
/// `cdylib`, which no test links): refuse to test a library older than a
/// source file it is built from. (Sources, not `lintel-run`: the test
/// build may relink `lintel-run` with the workspace's unified features
/// long after an up-to-date library was built; nor the programs in
/// `lintel-preload/src/bin`, which the library is not built from and
/// whose change does not rebuild it.)
fn library_staleness() -> Option<String> {
    fn newest(dir: &Path, best: &mut Option<(SystemTime, PathBuf)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() && p.ends_with("lintel-preload/src/bin") {
                continue;
            }
            if p.is_dir() {
                newest(&p, best);
            } else if let Ok(t) = e.metadata().and_then(|m| m.modified())
                && best.as_ref().is_none_or(|(b, _)| t > *b)
            {
                *best = Some((t, p));
            }
        }
    }
    let lib = Path::new(env!("CARGO_BIN_EXE_lintel-run")).with_file_name("liblintel_preload.so");
    let fix = "run `cargo build --release -p lintel-preload` (bash .ci/run does)";
    let Ok(built) = std::fs::metadata(&lib).and_then(|m| m.modified()) else {
        return Some(format!("{} is missing: {fix}", lib.display()));
    };
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut best = None;
    for c in [
        "lintel-abi",
        "lintel",
        "lintel-system",
        "lintel-fs",
        "lintel-unix",
        "lintel-preload",
    ] {
        newest(&crates.join(c).join("src"), &mut best);
    }
    match best {
        Some((t, src)) if t > built => Some(format!(
            "{} is older than {}: {fix}",
            lib.display(),
            src.display()
        )),
        _ => None,
    }
}

/// Panic, saying what to run, if the preload library is older than its
/// sources.
pub fn check_library_is_current() {
    static STALE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    if let Some(why) = STALE.get_or_init(library_staleness) {
        panic!("{why}");
    }
}
