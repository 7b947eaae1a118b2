//! Programs and scripts stored in the served tree, `exec`ed (issue 26,
//! finding 7): each check runs natively on one tree and under `lintel-run`
//! on an identical tree served through the prefix, and what it prints
//! (paths renamed alike), its status and the errno an `exec` fails with
//! must be the same. Linux says what is right; nothing here is written
//! down by hand.

mod common;
use common::check_library_is_current;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const PREFIX: &str = "/lintel-served";

/// Reports the errno an `exec` fails with (or runs the program): `python3
/// exec_errno.py PATH ARGV0 ARGS...`, or `--fd` first to `fexecve` a
/// descriptor of PATH opened here (close-on-exec, as Python opens).
const EXEC_ERRNO: &str = r#"
import errno, os, sys
args = sys.argv[1:]
by_fd = args[0] == "--fd"
if by_fd:
    args = args[1:]
path, argv = args[0], args[1:]
try:
    target = os.open(path, os.O_RDONLY) if by_fd else path
    sys.stdout.flush()
    os.execv(target, argv) if not by_fd else os.execve(target, argv, os.environ)
except OSError as e:
    print("exec", path, "failed:", errno.errorcode[e.errno])
"#;

/// The tree: served ELF programs (a dynamically linked one, the
/// statically linked busybox), scripts of every kind, and files that
/// must not run. `%R` in a script stands for the tree's root as the
/// program sees it.
fn make_tree(root: &Path, shown: &str) {
    let put = |rel: &str, text: &str, mode: u32| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text.replace("%R", shown)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let copy = |from: &str, rel: &str| {
        std::fs::create_dir_all(root.join(rel).parent().unwrap()).unwrap();
        std::fs::copy(from, root.join(rel)).unwrap();
    };
    copy("/bin/echo", "bin/echo");
    copy("/bin/busybox", "bin/busybox");
    std::os::unix::fs::symlink("busybox", root.join("bin/wc")).unwrap();
    put("a.txt", "alpha\nbeta\ngamma\n", 0o644);
    // make starts a command with no shell syntax itself (posix_spawn).
    put(
        "Makefile",
        "all:\n\t./bin/echo from-make\n\t./s/plain from-make\n",
        0o644,
    );
    put("exec_errno.py", EXEC_ERRNO, 0o644);
    put("s/plain", "#!/bin/sh\necho \"plain 0=$0 n=$# args=$*\"\n", 0o755);
    put(
        "s/witharg",
        "#!/bin/sh -e\necho \"witharg 0=$0 args=$*\"\nfalse\necho not reached\n",
        0o755,
    );
    put(
        "s/env",
        "#! /usr/bin/env  sh  \necho \"env 0=$0 args=$*\"\n",
        0o755,
    );
    // Interpreters that are served scripts themselves, and one a served
    // static program.
    put(
        "s/interp",
        "#!/bin/sh\necho \"interp 0=$0 args=$*\"; cat \"$1\" | wc -l\n",
        0o755,
    );
    put("s/nested", "#!%R/s/interp\nline two\n", 0o755);
    put(
        "s/fd3",
        "#!/bin/sh\nread y <&3; echo \"got=$y\"; cat <&3\n",
        0o755,
    );
    put("s/nested-arg", "#!%R/s/interp  one  arg  \n", 0o755);
    put("s/deeper", "#!%R/s/nested\n", 0o755);
    put("s/rel-interp", "#!s/interp\n", 0o755);
    put(
        "s/by-busybox",
        "#!%R/bin/busybox sh\necho \"busybox 0=$0 args=$*\"; %R/bin/busybox cat %R/a.txt | %R/bin/wc -l\n",
        0o755,
    );
    // Lines as the kernel reads them: /bin/echo shows the arguments it
    // was given.
    put("s/spaced-arg", "#!/bin/echo  a \t b  \t\n", 0o755);
    put("s/tabs", "#!\t/bin/echo\t-n\t\n", 0o755);
    put("s/nul", "#!/bin/echo\0ignored\n", 0o755);
    put("s/cut-arg", &format!("#!/bin/echo {}", "x".repeat(300)), 0o755);
    put("s/cut-name", &format!("#!/{}", "a".repeat(300)), 0o755);
    // What must fail, and how.
    put("s/not-executable", "#!/bin/sh\necho ran\n", 0o644);
    put("s/no-interp", "#!/nonexistent/interp\n", 0o755);
    put("s/no-served-interp", "#!%R/nonexistent\n", 0o755);
    put("s/interp-is-dir", "#!%R/s\n", 0o755);
    put("s/empty-line", "#!   \nexit 3\n", 0o755);
    put("s/not-a-program", "just some words\n", 0o755);
    // A chain of scripts, each the next one's interpreter: Linux follows
    // five.
    put("chain/c0", "#!/bin/sh\necho \"chain 0=$0 args=$*\"\n", 0o755);
    for i in 1..=6 {
        put(&format!("chain/c{i}"), &format!("#!%R/chain/c{}\n", i - 1), 0o755);
    }
}

fn trees() -> (tempfile::TempDir, tempfile::TempDir) {
    let (n, s) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    make_tree(n.path(), n.path().to_str().unwrap());
    make_tree(s.path(), PREFIX);
    (n, s)
}

fn run(cmd: &[&str]) -> (i32, String, String) {
    let out = Command::new(cmd[0]).args(&cmd[1..]).output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(out.stdout),
        text(out.stderr),
    )
}

/// Run `cmd` (with `%R` standing for the tree's root) natively and under
/// `lintel-run`: status and output (stdout, then stderr, paths renamed
/// `ROOT`) must match.
fn same(native: &Path, served: &Path, cmd: &[&str]) {
    same_with(native, served, &[], cmd)
}

/// [`same`], with `options` for the launcher (`--read-only`).
fn same_with(native: &Path, served: &Path, options: &[&str], cmd: &[&str]) {
    check_library_is_current();
    let n_root = native.to_str().unwrap();
    let n_cmd: Vec<String> = cmd.iter().map(|a| a.replace("%R", n_root)).collect();
    let s_cmd: Vec<String> = cmd.iter().map(|a| a.replace("%R", PREFIX)).collect();
    let n = run(&n_cmd.iter().map(String::as_str).collect::<Vec<_>>());
    let mut full = vec![
        env!("CARGO_BIN_EXE_lintel-run"),
        "--root",
        served.to_str().unwrap(),
    ];
    full.extend_from_slice(options);
    full.extend_from_slice(&["--prefix", PREFIX, "--"]);
    full.extend(s_cmd.iter().map(String::as_str));
    let s = run(&full);
    let shown =
        |r: &(i32, String, String), root: &str| (r.0, r.1.replace(root, "ROOT"), r.2.replace(root, "ROOT"));
    assert_eq!(
        shown(&s, PREFIX),
        shown(&n, n_root),
        "`{}`: status, output and errors served (left) and native (right)",
        cmd.join(" ")
    );
}

/// `cmd` run by a shell whose working directory is the tree's root.
fn in_root(script: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), format!("cd %R && {script}")]
}

fn check_all(cmds: &[Vec<String>]) {
    let (n, s) = trees();
    for c in cmds {
        same(
            n.path(),
            s.path(),
            &c.iter().map(String::as_str).collect::<Vec<_>>(),
        );
    }
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn served_programs_run_dynamically_and_statically_linked() {
    assert!(
        lintel_unix::image::is_static(Path::new("/bin/busybox")),
        "/bin/busybox is missing or not static: .ci/run installs Debian's busybox-static"
    );
    check_all(&[
        in_root("./bin/echo dynamic \"two words\"; echo status=$?"),
        strs(&["%R/bin/echo", "absolute"]),
        // Static mode: the served busybox reads served files, runs its
        // applets through /proc/self/exe, and runs by another name.
        in_root("./bin/busybox cat a.txt; ./bin/busybox sh -c 'echo 0=$0; cat a.txt | ./bin/wc -l'"),
        in_root("./bin/wc -c a.txt %R/a.txt"),
        strs(&[
            "%R/bin/busybox",
            "sh",
            "-c",
            "cd %R && ./bin/echo from-static && ./s/plain x",
        ]),
        // Each exec'd program is served: it reads served files.
        in_root("./bin/busybox sh -c './bin/busybox ls s chain | ./bin/busybox sort'"),
        // Started by posix_spawn: by make, by Python.
        in_root("make -s"),
        strs(&[
            "python3",
            "-c",
            "import os\nfor p in ['%R/bin/echo', '%R/s/plain']:\n    pid = os.posix_spawn(p, [p, 'spawned'], os.environ)\n    print(os.waitpid(pid, 0)[1])",
        ]),
        // By descriptor (fexecve): as natively.
        strs(&[
            "python3",
            "%R/exec_errno.py",
            "--fd",
            "%R/bin/echo",
            "argv0",
            "by-fd",
        ]),
        strs(&["python3", "%R/exec_errno.py", "%R/bin/echo", "argv0", "named"]),
    ]);
}

#[test]
fn served_scripts_run_as_the_kernel_runs_them() {
    check_all(&[
        // $0 is the path as the program named it.
        in_root("./s/plain a 'b c'; s/../s/plain; %R/s/plain x"),
        strs(&["%R/s/plain", "direct"]),
        in_root("cd s && ./plain here && cd .. && PATH=%R/s:$PATH plain on-path"),
        // The optional argument, then trimmed interpreters.
        in_root("./s/witharg one; echo status=$?"),
        in_root("./s/env e1 e2"),
        // Served interpreters that are scripts themselves, a relative one,
        // and a served static one.
        in_root("./s/nested n1 n2; ./s/nested-arg a1; ./s/deeper d1"),
        in_root("./s/rel-interp r1"),
        // Served descriptors and the working directory go across, offset
        // shared.
        in_root("exec 3<a.txt; read x <&3; echo \"first=$x\"; ./s/fd3; cd s && ./plain in-s && pwd"),
        in_root("./s/by-busybox b1 b2"),
        in_root("./chain/c5 five-deep"),
        in_root("./s/spaced-arg 1; ./s/tabs 2; echo; ./s/nul 3; ./s/cut-arg 4"),
        // Exec'd by other programs: bash, Python, busybox in static mode.
        vec![
            "/bin/bash".into(),
            "-c".into(),
            "cd %R && ./s/plain from-bash && exec ./s/nested via-exec".into(),
        ],
        strs(&[
            "python3",
            "%R/exec_errno.py",
            "%R/s/plain",
            "argv0-is-dropped",
            "p1",
        ]),
        strs(&[
            "%R/bin/busybox",
            "sh",
            "-c",
            "cd %R && ./s/plain from-busybox; ./s/nested n",
        ]),
    ]);
}

#[test]
fn exec_errors_are_the_ones_linux_gives() {
    let errno_of = |path: &str| strs(&["python3", "%R/exec_errno.py", path, "x"]);
    check_all(&[
        errno_of("%R/s/not-executable"),
        errno_of("%R/s/no-interp"),
        errno_of("%R/s/no-served-interp"),
        errno_of("%R/s/interp-is-dir"),
        errno_of("%R/s/empty-line"),
        errno_of("%R/s/not-a-program"),
        errno_of("%R/s/cut-name"),
        errno_of("%R/s"),
        errno_of("%R/missing"),
        errno_of("%R/a.txt/below"),
        errno_of("%R/chain/c6"),
        // A script by a close-on-exec descriptor: its interpreter could
        // not open it.
        strs(&["python3", "%R/exec_errno.py", "--fd", "%R/s/plain", "x"]),
        // How shells report them.
        in_root(
            "./s/not-executable; ./s/no-interp; ./s/no-served-interp; ./chain/c6; ./missing; echo status=$?",
        ),
        vec![
            "/bin/bash".into(),
            "-c".into(),
            "cd %R; ./s/no-interp; ./chain/c6; ./s/not-a-program; echo status=$?".into(),
        ],
    ]);
}

#[test]
fn served_programs_run_from_a_read_only_export() {
    // The service hands out the file on a read-only mount of its own.
    let (n, s) = trees();
    for cmd in [
        in_root("./bin/echo read-only; ./bin/busybox cat a.txt; ./bin/wc -l a.txt"),
        in_root("./s/nested n1; ./s/by-busybox b1; ./s/env e1"),
        strs(&["python3", "%R/exec_errno.py", "%R/s/not-executable", "x"]),
    ] {
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        same_with(n.path(), s.path(), &["--read-only"], &cmd);
    }
}
