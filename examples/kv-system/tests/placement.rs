//! The same script through both manifests: same answers, different places.

use std::io::Write;
use std::process::{Command, Stdio};

const SCRIPT: &str = "put a 1\nput b hello world\nget a\nget b\nget zz\nkeys\ndel a\ndel a\ntime\nlog\nwhere\nbench 200\n\
     cat hello.txt\nwrite scratch-PLACE.txt written through the file service\ncat scratch-PLACE.txt\n\
     cat ../Cargo.toml\nrm scratch-PLACE.txt\ncat scratch-PLACE.txt\n";

/// The example's manifest `manifest` booted on a copy of its folder (the
/// store keeps its journal in the exported `files/`), fed the script.
fn run(manifest: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir(dir.path().join("files")).unwrap();
    std::fs::copy(
        example.join("files/hello.txt"),
        dir.path().join("files/hello.txt"),
    )
    .unwrap();
    let path = dir.path().join(manifest);
    std::fs::copy(example.join(manifest), &path).unwrap();
    let path = path.to_str().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kv-system"))
        .args(["boot", path])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let place = manifest.trim_end_matches(".toml");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(SCRIPT.replace("PLACE", place).as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}

fn answers(stdout: &str) -> String {
    stdout
        .lines()
        .filter(|l| !l.contains("domain") && !l.contains(" gets: "))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn colocated_and_isolated_answer_alike() {
    let (co, co_err) = run("colocated.toml");
    let (iso, iso_err) = run("isolated.toml");
    let expected = "ok\nok\na = 1\nb = hello world\nerror: no key `zz`\na b\nremoved\nno such key\nt=4\n\
                    t=1 put a (1 bytes)\nt=2 put b (11 bytes)\nt=3 remove a\n\
                    Served by lintel-fs: this directory is the example system's export.\n\
                    wrote 32 bytes\nwritten through the file service\n\
                    error: `../Cargo.toml` leads outside the exported directory\nremoved\n\
                    error: No such file or directory (os error 2)";
    assert_eq!(answers(&co), expected);
    assert_eq!(answers(&iso), expected);
    for svc in ["kv", "clock", "log", "fs"] {
        assert!(co.contains(&format!("{svc}: this domain (all)")), "{co}");
        assert!(iso.contains(&format!("{svc}: another domain (pid ")), "{iso}");
    }
    assert!(co_err.contains("system ready: 1 domain"), "{co_err}");
    assert!(iso_err.contains("system ready: 5 domains"), "{iso_err}");
    assert!(co.contains("200 gets: ") && iso.contains("200 gets: "));
}
