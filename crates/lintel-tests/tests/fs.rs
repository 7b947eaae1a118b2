//! The file service, tried as a user would: an export served by another
//! process (and, where placement should not matter, by this one), used by
//! this process and by client processes.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use lintel_fs::{Fs, FsError, Kind, OpenOptions};
use lintel_tests::fs::{FsClientPeer, FsPeer, FsService};

const ENOENT: i32 = 2;
const EBADF: i32 = 9;
const EEXIST: i32 = 17;
const EXDEV: i32 = 18;
const ENOTDIR: i32 = 20;
const EISDIR: i32 = 21;
const EINVAL: i32 = 22;
const EROFS: i32 = 30;
const ENOTEMPTY: i32 = 39;
const EIO: i32 = 5;

const O_RDONLY: u32 = 0;
const O_WRONLY: u32 = 1;
const O_RDWR: u32 = 2;
const O_CREAT: u32 = 0o100;
const O_APPEND: u32 = 0o2000;

/// The errno of a failed call; 0 if it succeeded.
fn errno<T>(r: Result<T, FsError>) -> i32 {
    r.err().map_or(0, |e| e.errno())
}

fn rw() -> OpenOptions {
    OpenOptions::new().read(true).write(true).create(true).clone()
}

/// Run `f` against an export of a fresh directory served by this process
/// and by another one.
fn both_placements(f: impl Fn(&Fs, &Path)) {
    let dir = tempfile::tempdir().unwrap();
    let local = Fs::from_door(lintel_fs::Service::new(dir.path(), false).unwrap().into_door());
    assert!(local.door().is_local());
    f(&local, dir.path());

    let dir = tempfile::tempdir().unwrap();
    let remote = FsService::start(dir.path(), false);
    assert!(!remote.fs.door().is_local());
    f(&remote.fs, dir.path());
}

#[test]
fn files_and_directories_work_as_on_the_host() {
    both_placements(|fs, root| {
        fs.create_dir("d", 0o755).unwrap();
        let mut f = fs.open_with("d/a.txt", &rw()).unwrap();
        assert!(f.is_mapped(), "a regular file opened for reading maps");
        f.write_all(b"hello, world").unwrap();
        // Another open sees the bytes; the host file has them once the
        // token came back (here: for that open).
        assert_eq!(fs.read("d/a.txt").unwrap(), b"hello, world");
        assert_eq!(std::fs::read(root.join("d/a.txt")).unwrap(), b"hello, world");
        assert_eq!(f.seek(SeekFrom::Start(7)).unwrap(), 7);
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "world");
        assert_eq!(f.seek(SeekFrom::End(-5)).unwrap(), 7);
        assert_eq!(f.seek(SeekFrom::Current(2)).unwrap(), 9);

        let mut buf = [0u8; 5];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), 5);
        assert_eq!(&buf, b"hello");
        assert_eq!(f.write_at(b"HELLO", 0).unwrap(), 5);
        assert_eq!(
            f.stream_position().unwrap(),
            9,
            "positional I/O leaves the offset"
        );

        let st = f.metadata().unwrap();
        let host = std::fs::metadata(root.join("d/a.txt")).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!((st.size, st.ino, st.mode), (12, host.ino(), host.mode()));
        assert!(st.is_file() && !st.is_dir());

        f.set_len(5).unwrap();
        assert_eq!(fs.stat("d/a.txt").unwrap().size, 5);
        f.set_len(4096).unwrap();
        assert_eq!(std::fs::metadata(root.join("d/a.txt")).unwrap().len(), 4096);
        f.sync_all().unwrap();
        f.sync_data().unwrap();
        f.close().unwrap();

        fs.rename("d/a.txt", "d/b.txt").unwrap();
        std::os::unix::fs::symlink("b.txt", root.join("d/link")).unwrap();
        let mut names: Vec<_> = fs
            .read_dir("d")
            .unwrap()
            .into_iter()
            .map(|e| (String::from_utf8(e.name).unwrap(), e.kind))
            .collect();
        names.sort();
        assert_eq!(
            names,
            [("b.txt".into(), Kind::File), ("link".into(), Kind::Symlink)]
        );
        assert!(fs.symlink_stat("d/link").unwrap().is_symlink());
        assert_eq!(
            fs.stat("d/link").unwrap().size,
            4096,
            "stat follows links inside the export"
        );
        let dirf = fs
            .open_with("d", OpenOptions::new().read(true).custom_flags(0o200000))
            .unwrap();
        assert_eq!(dirf.read_dir().unwrap().len(), 2);
        assert!(fs.stat("d").unwrap().is_dir());

        fs.remove_file("d/link").unwrap();
        fs.remove_file("d/b.txt").unwrap();
        fs.remove_dir("d").unwrap();
        assert!(!root.join("d").exists());

        // Names need not be UTF-8.
        use std::os::unix::ffi::OsStrExt;
        let odd = std::ffi::OsStr::from_bytes(b"caf\xe9");
        fs.write(odd, b"x").unwrap();
        assert_eq!(std::fs::read(root.join(odd)).unwrap(), b"x");
        assert_eq!(fs.read_dir(".").unwrap()[0].name, b"caf\xe9");
    });
}

#[test]
fn data_of_any_size_goes_through_whole() {
    both_placements(|fs, _| {
        let big: Vec<u8> = (0..(40 << 20) + 123).map(|i: u32| (i % 251) as u8).collect();
        fs.write("big", &big).unwrap();
        assert_eq!(fs.read("big").unwrap(), big);
        let f = fs.open("big").unwrap();
        let mut part = vec![0u8; 3 << 20];
        assert_eq!(f.read_at(&mut part, 1 << 20).unwrap(), 3 << 20);
        assert_eq!(part, big[1 << 20..4 << 20]);
        // One call moves at most MAX_IO: a short read, as Unix allows.
        let mut all = vec![0u8; big.len()];
        let n = f.read_at(&mut all, 0).unwrap();
        assert_eq!(n, lintel_fs::proto::MAX_IO as usize);
        assert_eq!(all[..n], big[..n]);
    });
}

#[test]
fn errors_carry_the_errno_a_unix_program_expects() {
    both_placements(|fs, root| {
        std::fs::create_dir(root.join("full")).unwrap();
        std::fs::write(root.join("full/f"), b"x").unwrap();
        assert_eq!(errno(fs.open("missing")), ENOENT);
        assert_eq!(errno(fs.open("")), ENOENT);
        assert_eq!(
            errno(fs.open_with("full/f", OpenOptions::new().write(true).create_new(true))),
            EEXIST
        );
        assert_eq!(errno(fs.open("full/f/x")), ENOTDIR);
        // `mkdir -p` of a path under the root asks for the root too.
        assert_eq!(errno(fs.create_dir(".", 0o755)), EEXIST);
        assert_eq!(errno(fs.create_dir("full/..", 0o755)), EEXIST);
        assert_eq!(errno(fs.create_dir("missing/.", 0o755)), ENOENT);
        assert_eq!(
            errno(fs.open_with("full", OpenOptions::new().write(true))),
            EISDIR
        );
        assert_eq!(errno(fs.remove_dir("full")), ENOTEMPTY);
        assert_eq!(errno(fs.remove_file("full")), EISDIR);
        assert_eq!(errno(fs.create_dir("full", 0o755)), EEXIST);
        assert_eq!(errno(fs.remove_dir(".")), EINVAL);
        assert_eq!(errno(fs.open("a\0b")), EINVAL);
        // An O_PATH (0o10000000) open stands for the file: it reads nothing.
        let path_only = fs
            .open_with("full/f", OpenOptions::new().read(true).custom_flags(0o10000000))
            .unwrap();
        assert_eq!(errno(path_only.read_shared(&mut [0u8; 1])), EBADF);
        // O_TMPFILE is not for clients.
        assert_eq!(
            errno(fs.open_with("full", OpenOptions::new().read(true).custom_flags(0o20200000))),
            EINVAL
        );
        let ro = fs.open("full/f").unwrap();
        assert_eq!(errno(ro.write_shared(b"y")), EBADF);
        let mut buf = [0u8; 1];
        let wo = fs.open_with("full/f", OpenOptions::new().write(true)).unwrap();
        assert_eq!(errno(wo.read_shared(&mut buf)), EBADF);
        assert_eq!(errno(ro.seek_shared(SeekFrom::Current(-1))), EINVAL);
        // std::io sees the same errno.
        let e = (&ro).write(b"y").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(EBADF));
    });
}

#[test]
fn nothing_outside_the_export_is_reached() {
    both_placements(|fs, root| {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"SECRET").unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("abs")).unwrap();
        let rel = Path::new("../".repeat(root.components().count()).as_str())
            .join(outside.path().strip_prefix("/").unwrap())
            .join("secret");
        std::os::unix::fs::symlink(&rel, root.join("d/rel")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("outdir")).unwrap();
        assert_eq!(
            std::fs::read(root.join("d/rel")).unwrap(),
            b"SECRET",
            "the links do lead out"
        );

        let escapes = |r: Result<(), FsError>, what: &str| {
            let e = r.unwrap_err();
            assert!(matches!(e, FsError::Escapes { .. }), "{what}: {e:?}");
            assert_eq!(e.errno(), EXDEV, "{what}");
        };
        let outside_name = outside.path().join("secret");
        for path in [
            "..".to_string(),
            "../x".into(),
            "d/../../x".into(),
            outside_name.display().to_string(),
            "abs".into(),
            "d/rel".into(),
            "outdir/secret".into(),
        ] {
            escapes(fs.open(&path).map(drop), &format!("open {path}"));
            escapes(fs.stat(&path).map(drop), &format!("stat {path}"));
        }
        escapes(fs.read_dir("outdir").map(drop), "list outdir");
        escapes(fs.create_dir("outdir/new", 0o755), "mkdir outdir/new");
        escapes(fs.remove_file("outdir/secret"), "unlink outdir/secret");
        escapes(fs.rename("d/x", "../x"), "rename out");
        escapes(fs.rename("outdir/secret", "stolen"), "rename in");
        escapes(fs.write("../planted", b"x"), "create outside");
        // The links themselves may be looked at and removed.
        assert!(fs.symlink_stat("abs").unwrap().is_symlink());
        fs.remove_file("abs").unwrap();
        assert_eq!(std::fs::read(outside.path().join("secret")).unwrap(), b"SECRET");
        assert!(!outside.path().parent().unwrap().join("planted").exists());
    });
}

/// Symlinks and hard links are made and read through the service; a link
/// whose target leads out may be made (its target is only bytes) but
/// never followed, and no link is made outside.
#[test]
fn symlinks_and_hard_links_are_made_and_read_beneath_the_root() {
    both_placements(|fs, root| {
        fs.create_dir("d", 0o755).unwrap();
        fs.write("d/a.txt", b"alpha").unwrap();
        let host = rustix::fs::statfs(root).unwrap();
        let st = fs.statfs().unwrap();
        assert_eq!(
            (st.kind, st.name_max, st.blocks),
            (host.f_type as u64, host.f_namelen as u64, host.f_blocks)
        );
        assert_eq!(st.flags & 1, 0, "writable");
        fs.symlink("a.txt", "d/s").unwrap();
        assert_eq!(fs.read_link("d/s").unwrap(), b"a.txt");
        assert_eq!(std::fs::read_link(root.join("d/s")).unwrap(), Path::new("a.txt"));
        assert_eq!(fs.read("d/s").unwrap(), b"alpha", "followed inside");
        assert!(fs.symlink_stat("d/s").unwrap().is_symlink());
        assert_eq!(errno(fs.read_link("d/a.txt")), EINVAL, "not a symlink");
        assert_eq!(errno(fs.read_link("d/none")), ENOENT);
        assert_eq!(errno(fs.symlink("a.txt", "d/s")), EEXIST);

        fs.hard_link("d/a.txt", "b.txt").unwrap();
        fs.write("d/a.txt", b"ALPHA").unwrap();
        assert_eq!(
            std::fs::read(root.join("b.txt")).unwrap(),
            b"ALPHA",
            "one file, two names"
        );
        assert_eq!(errno(fs.hard_link("d/none", "c.txt")), ENOENT);

        fs.symlink("/etc/hostname", "out").unwrap();
        assert_eq!(fs.read_link("out").unwrap(), b"/etc/hostname");
        assert_eq!(errno(fs.read("out")), EXDEV, "never followed out");
        assert_eq!(errno(fs.symlink("x", "../planted")), EXDEV);
        assert_eq!(errno(fs.hard_link("d/a.txt", "../planted")), EXDEV);
        assert!(!root.parent().unwrap().join("planted").exists());
    });
}

/// A host thread swaps an inside directory for a symlink that leads out,
/// and moves a directory out of the export and back, while the client opens
/// paths through them: it reads inside data or gets an error, never the
/// outside file.
#[test]
fn races_on_the_path_never_lead_outside() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"SECRET").unwrap();
    std::fs::create_dir_all(outside.path().join("sub/deeper")).unwrap();
    std::fs::create_dir_all(root.join("d")).unwrap();
    std::fs::write(root.join("d/secret"), b"inside").unwrap();
    std::fs::create_dir_all(root.join("m/deeper")).unwrap();
    let svc = FsService::start(&root, false);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (root, out, stop) = (root.clone(), outside.path().to_path_buf(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::rename(root.join("d"), root.join("d.away")).unwrap();
                std::os::unix::fs::symlink(&out, root.join("d")).unwrap();
                std::fs::remove_file(root.join("d")).unwrap();
                std::fs::rename(root.join("d.away"), root.join("d")).unwrap();
                // A directory leaves the export while a lookup is in it.
                std::fs::rename(root.join("m"), out.join("m")).unwrap();
                std::fs::rename(out.join("m"), root.join("m")).unwrap();
            }
        })
    };
    // Bounded by work, not time: enough reads while the swapper runs, and
    // enough of them through the real directory.
    let (mut inside, mut refused) = (0, 0);
    while inside < 10 || inside + refused < 300 {
        assert!(
            inside + refused < 200_000,
            "no read went through in {refused} tries"
        );
        match svc.fs.read("d/secret") {
            Ok(data) => {
                assert_eq!(data, b"inside", "read through a swapped path");
                inside += 1;
            }
            Err(_) => refused += 1,
        }
        // From inside the moving directory, `..` twice leads to the
        // outside directory while it is away.
        if let Ok(data) = svc.fs.read("m/deeper/../../secret") {
            panic!("read {data:?} through a directory moved out");
        }
        if let Ok(data) = svc.fs.read("m/deeper/../../d/secret") {
            assert_eq!(data, b"inside");
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
}

#[test]
fn a_read_only_export_refuses_every_change() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), b"data").unwrap();
    std::fs::create_dir(dir.path().join("d")).unwrap();
    let svc = FsService::start(dir.path(), true);
    let fs = &svc.fs;
    assert!(fs.is_read_only().unwrap());
    assert_eq!(fs.read("f").unwrap(), b"data");
    let erofs = |r: Result<(), FsError>| assert_eq!(r.unwrap_err().errno(), EROFS);
    erofs(fs.open_with("f", OpenOptions::new().write(true)).map(drop));
    erofs(
        fs.open_with("f", OpenOptions::new().read(true).write(true))
            .map(drop),
    );
    erofs(fs.open_with("f", OpenOptions::new().append(true)).map(drop));
    erofs(
        fs.open_with("new", OpenOptions::new().write(true).create(true))
            .map(drop),
    );
    erofs(fs.create_dir("e", 0o755));
    erofs(fs.remove_dir("d"));
    erofs(fs.remove_file("f"));
    erofs(fs.rename("f", "g"));
    assert_ne!(fs.statfs().unwrap().flags & 1, 0, "statfs says ST_RDONLY");
    erofs(fs.symlink("f", "s"));
    erofs(fs.hard_link("f", "h"));
    assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), b"data");
    assert!(!dir.path().join("s").exists() && !dir.path().join("h").exists());
    assert!(!dir.path().join("new").exists());
}

/// Every holder of one open file's door shares its offset, as processes
/// do after `fork`; separate opens have their own.
#[test]
fn holders_of_one_open_file_share_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..=255).collect();
    std::fs::write(dir.path().join("f"), &data).unwrap();
    let svc = FsService::start(dir.path(), false);
    let a = FsClientPeer::start(svc.fs.door());
    let b = FsClientPeer::start(svc.fs.door());
    let mine = svc.fs.open("f").unwrap();
    let fa = a.peer.adopt(mine.door().clone()).unwrap();
    let fb = b.peer.adopt(mine.door().clone()).unwrap();
    let mut got = Vec::new();
    for i in 0..8 {
        let mut out = Vec::new();
        let peer = if i % 2 == 0 { &a.peer } else { &b.peer };
        peer.read(if i % 2 == 0 { fa } else { fb }, 16, &mut out).unwrap();
        got.extend_from_slice(&out);
        let mut buf = [0u8; 16];
        assert_eq!(mine.read_shared(&mut buf).unwrap(), 16);
        got.extend_from_slice(&buf);
    }
    assert_eq!(got, data, "the three holders read on from one offset");
    assert_eq!(a.peer.seek(fa, 0, 100).unwrap(), 100);
    let mut out = Vec::new();
    b.peer.read(fb, 4, &mut out).unwrap();
    assert_eq!(out, [100, 101, 102, 103], "a seek by one holder moves the others");

    // A separate open has an offset of its own.
    let own = a.peer.open(b"f".to_vec(), O_RDONLY, 0).unwrap();
    a.peer.read(own, 4, &mut out).unwrap();
    assert_eq!(out, [0, 1, 2, 3]);
}

/// Clients in other processes see each other's writes at once, appends
/// from several land whole and in some order, and a truncate is seen by
/// all.
#[test]
fn writes_by_one_client_are_seen_by_every_other() {
    let dir = tempfile::tempdir().unwrap();
    let svc = FsService::start(dir.path(), false);
    let peers: Vec<_> = (0..3).map(|_| FsClientPeer::start(svc.fs.door())).collect();
    let files: Vec<_> = peers
        .iter()
        .map(|p| p.peer.open(b"shared".to_vec(), O_RDWR | O_CREAT, 0).unwrap())
        .collect();
    peers[0].peer.write_at(files[0], 1000, b"written by 0").unwrap();
    for (p, &f) in peers.iter().zip(&files).skip(1) {
        let mut out = Vec::new();
        p.peer.read_at(f, 1000, 12, &mut out).unwrap();
        assert_eq!(out, b"written by 0");
        assert_eq!(
            p.peer.stat(f).unwrap().size,
            1012,
            "a write past the end extends the size"
        );
    }
    peers[2].peer.truncate(files[2], 10).unwrap();
    for (p, &f) in peers.iter().zip(&files) {
        assert_eq!(p.peer.stat(f).unwrap().size, 10, "a truncate is seen by all");
        let mut out = Vec::new();
        p.peer.read_at(f, 1000, 12, &mut out).unwrap();
        assert!(out.is_empty());
    }

    // O_APPEND from every client: each record lands whole, none is lost.
    let appends: Vec<_> = peers
        .iter()
        .map(|p| {
            p.peer
                .open(b"log".to_vec(), O_WRONLY | O_CREAT | O_APPEND, 0)
                .unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        for (i, (p, &f)) in peers.iter().zip(&appends).enumerate() {
            s.spawn(move || {
                for j in 0..50 {
                    let rec = format!("[{i}:{j:02}]");
                    assert_eq!(p.peer.write(f, rec.as_bytes()).unwrap(), 6);
                }
            });
        }
    });
    let log = String::from_utf8(std::fs::read(dir.path().join("log")).unwrap()).unwrap();
    assert_eq!(log.len(), 3 * 50 * 6);
    for i in 0..3 {
        let mine: Vec<_> = log
            .match_indices(&format!("[{i}:"))
            .map(|(at, _)| &log[at..at + 6])
            .collect();
        let want: Vec<_> = (0..50).map(|j| format!("[{i}:{j:02}]")).collect();
        assert_eq!(mine, want, "client {i}'s records, whole and in order");
    }
}

/// A client killed while it writes leaves a file whose size and contents
/// the other clients agree on; a killed service fails its clients' calls
/// with an error at once.
#[test]
fn a_killed_client_or_service_leaves_the_others_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let mut svc = FsService::start(dir.path(), false);
    let mut writer = FsClientPeer::start(svc.fs.door());
    let reader = FsClientPeer::start(svc.fs.door());
    let fw = writer
        .peer
        .open(b"f".to_vec(), O_WRONLY | O_CREAT | O_APPEND, 0)
        .unwrap();
    let fr = reader.peer.open(b"f".to_vec(), O_RDONLY, 0).unwrap();
    let record = vec![b'r'; 1 << 20];
    writer.peer.write_in_background(fw, record, 1000).unwrap();
    assert!(lintel_tests::eventually(Duration::from_secs(10), || {
        reader.peer.stat(fr).unwrap().size >= 4 << 20
    }));
    writer.kill();
    // A write call already in the service when its caller died still
    // lands (as a write(2) under way does); then the size holds still.
    let host = || std::fs::metadata(dir.path().join("f")).unwrap().len();
    assert!(lintel_tests::eventually(Duration::from_secs(10), || {
        let before = host();
        std::thread::sleep(Duration::from_millis(50));
        reader.peer.stat(fr).unwrap().size == before && host() == before
    }));
    let size = host();
    assert_eq!(size % (1 << 20), 0, "whole records only");
    let mut out = Vec::new();
    reader.peer.read_at(fr, 0, 4 << 20, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == b'r'), "no zeros where data was");
    assert_eq!(svc.fs.stat("f").unwrap().size, size, "the service goes on");

    let mine = svc.fs.open("f").unwrap();
    let copy = OpenOptions::new()
        .read(true)
        .io_path(lintel_fs::IoPath::Copy)
        .clone();
    let spliced = svc.fs.open_with("f", &copy).unwrap();
    let mut big = vec![0u8; 1 << 20];
    assert_eq!(spliced.read_at(&mut big, 0).unwrap(), 1 << 20);
    svc.kill();
    let start = Instant::now();
    let e = mine.read_at(&mut [0u8; 10], 0).unwrap_err();
    assert_eq!(e.errno(), EIO, "{e}");
    assert!(matches!(e, FsError::Stub(_)), "{e:?}");
    let e = spliced.read_at(&mut big, 0).unwrap_err();
    assert_eq!(e.errno(), EIO, "a spliced read of a dead service: {e}");
    let e = reader.peer.read(fr, 10, &mut out).unwrap_err();
    assert_eq!(e.errno(), EIO, "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "no call waits on a dead service"
    );
}

/// Calls the service answered for mapped and open files between two
/// readings of its counters (token grants, window moves, file calls).
fn calls(a: &lintel_fs::proto::Counters, b: &lintel_fs::proto::Counters) -> u64 {
    (b.grants - a.grants) + (b.windows - a.windows) + (b.file_calls - a.file_calls)
}

const AUTO: u8 = 0;
const COPY: u8 = 1;
const MAPPED: u8 = 2;

/// Clients on the mapped path and on the copy path, in three processes,
/// see each other's writes, size changes, appends and truncation.
#[test]
fn mapped_and_copy_clients_see_each_others_writes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), vec![b'.'; 200_000]).unwrap();
    let svc = FsService::start(dir.path(), false);
    let (a, b, c) = (
        FsClientPeer::start(svc.fs.door()),
        FsClientPeer::start(svc.fs.door()),
        FsClientPeer::start(svc.fs.door()),
    );
    let fa = a.peer.open(b"f".to_vec(), O_RDWR, MAPPED).unwrap();
    let fb = b.peer.open(b"f".to_vec(), O_RDWR, COPY).unwrap();
    let fc = c.peer.open(b"f".to_vec(), O_RDWR, AUTO).unwrap();
    assert!(a.peer.is_mapped(fa).unwrap() && c.peer.is_mapped(fc).unwrap());
    assert!(!b.peer.is_mapped(fb).unwrap());
    let read = |p: &FsClientPeer, f: u32, at: u64, len: u32| {
        let mut out = Vec::new();
        p.peer.read_at(f, at, len, &mut out).unwrap();
        out
    };
    for round in 0..20u64 {
        let at = round * 9_973 % 190_000;
        let tag = format!("round {round:02}");
        // Each writes in turn; the two others read it at once.
        let (w, fw, r1, f1, r2, f2) = match round % 3 {
            0 => (&a, fa, &b, fb, &c, fc),
            1 => (&b, fb, &c, fc, &a, fa),
            _ => (&c, fc, &a, fa, &b, fb),
        };
        assert_eq!(w.peer.write_at(fw, at, tag.as_bytes()).unwrap(), 8);
        assert_eq!(read(r1, f1, at, 8), tag.as_bytes(), "round {round}");
        assert_eq!(read(r2, f2, at, 8), tag.as_bytes(), "round {round}");
    }
    // A mapped write past the end extends the file for everyone.
    a.peer.write_at(fa, 300_000, b"tail").unwrap();
    assert_eq!(b.peer.stat(fb).unwrap().size, 300_004);
    assert_eq!(c.peer.stat(fc).unwrap().size, 300_004);
    assert_eq!(read(&b, fb, 299_998, 10), b"\0\0tail");
    // Truncation through the copy path is seen by the mapped clients, and
    // what was past the new end reads as nothing, then as zeros if the
    // file grows again.
    b.peer.truncate(fb, 100).unwrap();
    assert_eq!(a.peer.stat(fa).unwrap().size, 100);
    assert!(read(&c, fc, 150, 10).is_empty());
    c.peer.write_at(fc, 199, b"!").unwrap();
    assert_eq!(read(&a, fa, 95, 10), b".....\0\0\0\0\0");
    assert_eq!(read(&b, fb, 199, 1), b"!");
    // After sync, the host file holds it all.
    a.peer.sync(fa).unwrap();
    let host = std::fs::read(dir.path().join("f")).unwrap();
    assert_eq!(host.len(), 200);
    assert_eq!(&host[95..100], b".....");
    assert_eq!(host[199], b'!');

    // Appends from a mapped, a copy and an auto client land whole.
    let logs: Vec<_> = [(&a, MAPPED), (&b, COPY), (&c, AUTO)]
        .iter()
        .map(|(p, io)| {
            p.peer
                .open(b"log".to_vec(), O_RDWR | O_CREAT | O_APPEND, *io)
                .unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        for (i, (p, &f)) in [&a, &b, &c].into_iter().zip(&logs).enumerate() {
            s.spawn(move || {
                for j in 0..40 {
                    assert_eq!(p.peer.write(f, format!("<{i}:{j:02}>").as_bytes()).unwrap(), 6);
                }
            });
        }
    });
    let mut out = Vec::new();
    c.peer.read_at(logs[2], 0, 10_000, &mut out).unwrap();
    let log = String::from_utf8(out).unwrap();
    assert_eq!(log.len(), 3 * 40 * 6, "{log}");
    for i in 0..3 {
        let mine: Vec<_> = log
            .match_indices(&format!("<{i}:"))
            .map(|(at, _)| &log[at..at + 6])
            .collect();
        let want: Vec<_> = (0..40).map(|j| format!("<{i}:{j:02}>")).collect();
        assert_eq!(mine, want, "client {i}'s records, whole and in order");
    }
}

/// With its token and window in place, a client reads, seeks and stats
/// without a single call to the service.
#[test]
fn reads_seeks_and_stat_inside_the_window_make_no_call() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(dir.path().join("f"), &data).unwrap();
    let svc = FsService::start(dir.path(), false);
    let mut f = svc.fs.open("f").unwrap();
    assert!(f.is_mapped());
    let mut buf = [0u8; 100];
    f.read_exact(&mut buf).unwrap(); // takes the token and the first window
    let before = svc.fs.counters().unwrap();
    for i in 0..1000u64 {
        let at = (i * 37) % 60_000;
        assert_eq!(f.read_at(&mut buf, at).unwrap(), 100);
        assert_eq!(buf[..], data[at as usize..at as usize + 100]);
    }
    assert_eq!(f.seek(SeekFrom::Start(10)).unwrap(), 10);
    f.read_exact(&mut buf[..5]).unwrap();
    assert_eq!(buf[..5], data[10..15]);
    assert_eq!(f.seek(SeekFrom::End(-1)).unwrap(), 299_999);
    let st = f.metadata().unwrap();
    assert_eq!(st.size, 300_000);
    assert_eq!(st.ino, std::fs::metadata(dir.path().join("f")).unwrap().ino());
    let after = svc.fs.counters().unwrap();
    assert_eq!(
        calls(&before, &after),
        0,
        "no call while the window and the token serve"
    );
    // Reading on past the window moves it: one call.
    f.seek(SeekFrom::Start(90_000)).unwrap();
    f.read_exact(&mut buf).unwrap();
    assert_eq!(buf[..], data[90_000..90_100]);
    let last = svc.fs.counters().unwrap();
    assert_eq!(calls(&after, &last), 1, "one call to move the window");
    assert_eq!(last.windows - after.windows, 1);
    // A positional read elsewhere reads the cache in place: the pager maps
    // its range once, with no call.
    let n = f.read_at(&mut buf, 250_000).unwrap();
    assert_eq!(buf[..n], data[250_000..250_100]);
    let end = svc.fs.counters().unwrap();
    assert_eq!(calls(&last, &end), 0, "no call for a positional read");
    assert_eq!(end.faults - last.faults, 1, "one pager fault for its range");
}

/// A positional read through the window takes no lock while its token
/// rests here; a write by another open that takes the token meanwhile
/// must not show through half done. Each write replaces a whole block
/// with one byte value, so every read must see one value throughout.
#[test]
fn lock_free_positional_reads_never_see_a_write_half_done() {
    const BLOCK: usize = 4096;
    both_placements(|fs, host| {
        std::fs::write(host.join("f"), vec![0u8; 4 * BLOCK]).unwrap();
        let opts = OpenOptions::new().read(true).write(true).clone();
        let reader = fs.open_with("f", &opts).unwrap();
        let writer = fs.open_with("f", &opts).unwrap();
        assert!(reader.is_mapped() && writer.is_mapped());
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut i = 0u32;
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    writer
                        .write_at(&[(i % 251) as u8 + 1; BLOCK], BLOCK as u64)
                        .unwrap();
                    i += 1;
                }
            });
            // Until the reads have seen many writes land (the writer runs
            // until then, however the two threads are scheduled), or fail.
            struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
            let _stop = Stop(&done);
            let mut buf = vec![0u8; BLOCK];
            let (mut reads, mut seen) = (0u64, std::collections::BTreeSet::new());
            while seen.len() < 100 || reads < 50_000 {
                assert_eq!(reader.read_at(&mut buf, BLOCK as u64).unwrap(), BLOCK);
                let first = buf[0];
                assert!(
                    buf.iter().all(|&b| b == first),
                    "read {reads} saw a write half done: {first} then {:?}",
                    buf.iter().find(|&&b| b != first)
                );
                seen.insert(first);
                reads += 1;
            }
        });
    });
}

/// A client that holds the share lock, keeps its token active, or writes
/// garbage over its shared page is evicted after the timeout, whether
/// another client's read or its sync (which writes the holder's bytes out
/// and would leave it the token) runs into it; the client waiting for the
/// file goes on with the right bytes, and the evicted client's session
/// and file are dead.
#[test]
fn a_client_that_breaks_the_share_lock_is_evicted_and_the_others_go_on() {
    let timeout = Duration::from_millis(300);
    for (how, by_sync) in (0..3u8).flat_map(|how| [(how, false), (how, true)]) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"honest bytes").unwrap();
        let svc = FsService::start_with(dir.path(), false, timeout);
        let bad = FsClientPeer::start(svc.fs.door());
        let good = FsClientPeer::start(svc.fs.door());
        // Synced through the copy path and opened first (an open meeting
        // a holder would take the token back itself): the sync is what
        // meets the holder.
        let synced = by_sync.then(|| good.peer.open(b"f".to_vec(), O_RDWR, COPY).unwrap());
        bad.peer.misbehave(b"f".to_vec(), how).unwrap();
        if !by_sync {
            // (The probe's own read is in the way: it takes the token back.)
            assert_eq!(
                bad.peer.misbehaved_probe().unwrap(),
                (0, 0),
                "not evicted before it is in the way"
            );
        }
        let g = match synced {
            Some(g) => g,
            None => good.peer.open(b"f".to_vec(), O_RDWR, MAPPED).unwrap(),
        };
        let start = Instant::now();
        let mut out = Vec::new();
        if by_sync {
            good.peer.sync(g).unwrap();
            assert_eq!(
                bad.peer.misbehaved_probe().unwrap(),
                (EBADF, EBADF),
                "how {how}: the sync evicts the holder that broke the protocol"
            );
        }
        good.peer.read_at(g, 0, 12, &mut out).unwrap();
        assert_eq!(out, b"honest bytes", "how {how}, by sync {by_sync}");
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "bounded wait: {:?}",
            start.elapsed()
        );
        good.peer.write_at(g, 0, b"HONEST").unwrap();
        out.clear();
        good.peer.read_at(g, 0, 12, &mut out).unwrap();
        assert_eq!(out, b"HONEST bytes");
        assert_eq!(svc.fs.read("f").unwrap(), b"HONEST bytes", "the service goes on");
        assert_eq!(
            bad.peer.misbehaved_probe().unwrap(),
            (EBADF, EBADF),
            "how {how}, by sync {by_sync}: the evicted session and its file are revoked"
        );
    }
}

/// A client killed in the middle of mapped writes leaves a file whose size
/// and bytes the others agree on; nothing it committed is lost, nothing
/// reads as zeros.
#[test]
fn a_client_killed_during_mapped_writes_leaves_a_consistent_file() {
    let dir = tempfile::tempdir().unwrap();
    let svc = FsService::start(dir.path(), false);
    let mut writer = FsClientPeer::start(svc.fs.door());
    let reader = FsClientPeer::start(svc.fs.door());
    let fw = writer
        .peer
        .open(b"f".to_vec(), O_RDWR | O_CREAT | O_APPEND, MAPPED)
        .unwrap();
    assert!(writer.peer.is_mapped(fw).unwrap());
    let fr = reader.peer.open(b"f".to_vec(), O_RDONLY, MAPPED).unwrap();
    writer
        .peer
        .write_in_background(fw, vec![b'w'; 1000], 1_000_000)
        .unwrap();
    assert!(lintel_tests::eventually(Duration::from_secs(10), || {
        reader.peer.stat(fr).unwrap().size >= 300_000
    }));
    writer.kill();
    let size = reader.peer.stat(fr).unwrap().size;
    assert_eq!(
        size % 1000,
        0,
        "whole records: the size moves only when one is done"
    );
    let mut out = Vec::new();
    reader.peer.read_at(fr, 0, size as u32, &mut out).unwrap();
    assert_eq!(out.len() as u64, size);
    assert!(out.iter().all(|&b| b == b'w'), "no zeros where data was");
    assert_eq!(svc.fs.stat("f").unwrap().size, size);
    assert_eq!(
        std::fs::metadata(dir.path().join("f")).unwrap().len(),
        size,
        "written back"
    );
}

/// A killed service fails the mapped client's operations with EIO at
/// once: no hang, and no zeros for bytes it never paged in.
#[test]
fn a_killed_service_fails_mapped_clients_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), vec![b'x'; 4 << 20]).unwrap();
    let mut svc = FsService::start(dir.path(), false);
    let client = FsClientPeer::start(svc.fs.door());
    let f = client.peer.open(b"f".to_vec(), O_RDWR, MAPPED).unwrap();
    let mut out = Vec::new();
    client.peer.read_at(f, 0, 100, &mut out).unwrap();
    assert_eq!(out, vec![b'x'; 100]);
    svc.kill();
    let start = Instant::now();
    // What needs the service (a range it never mapped, beyond what its
    // pager may have mapped ahead of the first fault) fails at once.
    let beyond = (lintel_fs::MAP_AHEAD + 2) * 64 * 1024 * 4;
    assert_eq!(errno(client.peer.read_at(f, beyond, 100, &mut out)), EIO);
    // Bytes already mapped may still be read from the cache until the
    // client has noticed the death (they are the file's bytes, never
    // zeros); then everything fails with EIO.
    match client.peer.read_at(f, 0, 100, &mut out) {
        Ok(()) => assert_eq!(out, vec![b'x'; 100]),
        Err(e) => assert_eq!(e.errno(), EIO),
    }
    assert!(lintel_tests::eventually(Duration::from_secs(5), || {
        errno(client.peer.read_at(f, 0, 100, &mut out)) == EIO
    }));
    assert_eq!(errno(client.peer.write_at(f, 10, b"y")), EIO);
    assert_eq!(errno(client.peer.stat(f)), EIO);
    assert!(start.elapsed() < Duration::from_secs(30), "{:?}", start.elapsed());
}

/// A client writing through its own descriptor of the host file keeps
/// what it wrote when the service is killed, and once it knows of the
/// death its writes, reads, syncs and `stat`s fail with EIO, as calls do:
/// a service started again knows nothing of that descriptor.
#[test]
fn a_killed_service_fails_a_direct_writer_and_keeps_its_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut svc = FsService::start(dir.path(), false);
    let client = FsClientPeer::start(svc.fs.door());
    let f = client
        .peer
        .open(b"journal".to_vec(), O_RDWR | O_CREAT, AUTO)
        .unwrap();
    client.peer.write_at(f, 0, b"header").unwrap();
    client.peer.write_at(f, 6, b"-body").unwrap();
    client.peer.sync(f).unwrap();
    assert_eq!(svc.fs.counters().unwrap().direct, 1, "its own descriptor");
    svc.kill();
    assert_eq!(std::fs::read(dir.path().join("journal")).unwrap(), b"header-body");
    assert!(lintel_tests::eventually(Duration::from_secs(5), || {
        errno(client.peer.write_at(f, 11, b"!")) == EIO
    }));
    let mut out = Vec::new();
    assert_eq!(errno(client.peer.read_at(f, 0, 6, &mut out)), EIO);
    assert_eq!(errno(client.peer.sync(f)), EIO);
    assert_eq!(errno(client.peer.stat(f)), EIO);
    // (A write made before the client knew of the death landed, as on
    // any file: at most the one byte.)
    let host = std::fs::read(dir.path().join("journal")).unwrap();
    assert!(host == b"header-body" || host == b"header-body!", "{host:?}");
}

/// A writable export of `root` whose pager maps only what is faulted on
/// (`Service::with_map_ahead(0)`).
fn service_mapping_nothing_ahead(root: &Path) -> FsService {
    FsService::start_env(
        root,
        false,
        lintel_fs::LOCK_TIMEOUT,
        &[("LINTEL_FS_PEER_MAP_AHEAD", "0")],
    )
}

/// A view of a file has no window: each 64 KiB range is paged in by the
/// service's pager when first touched, with no call, and shows another
/// client's writes as they happen.
#[test]
fn a_view_is_paged_in_by_the_service_as_it_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("f"), &data).unwrap();
    // (Nothing mapped ahead of the faults: each is counted.)
    let svc = service_mapping_nothing_ahead(dir.path());
    let f = svc.fs.open("f").unwrap();
    let view = f.view().unwrap();
    let mut buf = [0u8; 100];
    view.read_at(0, &mut buf).unwrap(); // token and extent: two calls
    let before = svc.fs.counters().unwrap();
    for i in 1..16u64 {
        let at = i * 65_536 + 1234;
        assert_eq!(view.read_at(at, &mut buf).unwrap(), 100);
        assert_eq!(buf[..], data[at as usize..at as usize + 100]);
    }
    let after = svc.fs.counters().unwrap();
    assert_eq!(calls(&before, &after), 0, "paging in makes no call");
    assert_eq!(after.faults - before.faults, 15, "one fault per 64 KiB range");

    // Another process writes through its window: the view sees it.
    let writer = FsClientPeer::start(svc.fs.door());
    let w = writer.peer.open(b"f".to_vec(), O_RDWR, MAPPED).unwrap();
    writer.peer.write_at(w, 65_536 + 1234, b"fresh").unwrap();
    view.read_at(65_536 + 1234, &mut buf[..5]).unwrap();
    assert_eq!(&buf[..5], b"fresh");
}

/// The pager maps chunks of a file into a client ahead of its faults,
/// while it has none to serve: up to `MAP_AHEAD` chunks per chunk
/// faulted, from the one after the fault on. A read there then makes no
/// fault and no call, and finds the file's bytes.
#[test]
fn the_pager_maps_ahead_of_a_client_s_faults_as_far_as_its_budget() {
    const CHUNK: u64 = 64 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..(4u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.path().join("f"), &data).unwrap();
    let svc = FsService::start(dir.path(), false);
    let f = svc.fs.open("f").unwrap();
    let view = f.view().unwrap();
    let mut buf = [0u8; 100];
    let start = svc.fs.counters().unwrap();
    view.read_at(20 * CHUNK + 7, &mut buf).unwrap();
    assert_eq!(buf[..], data[20 * CHUNK as usize + 7..][..100]);
    let faulted = svc.fs.counters().unwrap();
    assert_eq!(faulted.faults - start.faults, 1);
    // The pager works on after the fault: wait for all it may do.
    let budget = lintel_fs::MAP_AHEAD;
    let deadline = Instant::now() + Duration::from_secs(30);
    while svc.fs.counters().unwrap().mapped_ahead - start.mapped_ahead < budget {
        assert!(Instant::now() < deadline, "the pager maps ahead");
        std::thread::sleep(Duration::from_millis(5));
    }
    let ahead = svc.fs.counters().unwrap();
    for c in 21..21 + budget {
        let at = c * CHUNK + 4000;
        assert_eq!(view.read_at(at, &mut buf).unwrap(), 100);
        assert_eq!(buf[..], data[at as usize..][..100]);
    }
    let read = svc.fs.counters().unwrap();
    assert_eq!(read.faults, ahead.faults, "the chunks ahead were mapped");
    assert_eq!(calls(&ahead, &read), 0);
    assert_eq!(
        read.mapped_ahead - start.mapped_ahead,
        budget,
        "no more than the budget one fault gives"
    );
    // The next chunk was not: one fault, and a budget again.
    view.read_at((21 + budget) * CHUNK, &mut buf).unwrap();
    assert_eq!(svc.fs.counters().unwrap().faults - read.faults, 1);

    // With no mapping ahead, faults are all there is.
    let quiet = service_mapping_nothing_ahead(dir.path());
    let f = quiet.fs.open("f").unwrap();
    let view = f.view().unwrap();
    for c in 0..4 {
        view.read_at(c * CHUNK, &mut buf).unwrap();
    }
    let c = quiet.fs.counters().unwrap();
    assert_eq!((c.faults, c.mapped_ahead), (4, 0));
}

/// A process's open descriptors and its pager threads (the server pool's
/// workers may grow under load and stay: not counted).
fn fds_and_threads(pid: u32) -> (usize, usize) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    let pagers = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.starts_with("lintel-fs-pager"))
                })
                .count()
        })
        .unwrap_or(0);
    (fds, pagers)
}

/// Clients that map files and die, or close them, leave nothing behind:
/// the service's descriptors and threads (its pager threads) and this
/// process's descriptors and shared mappings come back to where they were.
#[test]
fn sessions_of_dead_and_closing_clients_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), vec![b'z'; 300_000]).unwrap();
    let svc = FsService::start(dir.path(), false);
    let service = svc.child.id();
    let round = || {
        let mut c = FsClientPeer::start(svc.fs.door());
        let f = c.peer.open(b"f".to_vec(), O_RDWR, MAPPED).unwrap();
        assert!(c.peer.is_mapped(f).unwrap());
        c.peer.write_at(f, 200_000, b"round").unwrap();
        c.kill();
    };
    let settled = |want: (usize, usize)| {
        lintel_tests::eventually(Duration::from_secs(10), || fds_and_threads(service) == want)
    };
    let base = fds_and_threads(service);
    assert_eq!(base.1, 0, "no session yet");
    for _ in 0..8 {
        round();
    }
    assert!(
        settled(base),
        "the service holds {:?} (descriptors, threads) after dead clients, {base:?} before",
        fds_and_threads(service)
    );
    assert_eq!(
        svc.fs.read("f").unwrap()[200_000..200_005],
        *b"round",
        "the dead clients' writes were kept"
    );

    // In this process: open, map, view and close, over and over.
    let once = || {
        let f = svc.fs.open_with("f", &rw()).unwrap();
        assert!(f.is_mapped());
        f.write_at(b"here", 10).unwrap();
        let mut b = [0u8; 4];
        f.view().unwrap().read_at(10, &mut b).unwrap();
        assert_eq!(&b, b"here");
        f.close().unwrap();
    };
    once();
    let before = lintel_tests::fds_and_shared_maps();
    for _ in 0..20 {
        once();
    }
    // Other tests run beside this one in this process and open and map
    // for a while too; what they hold goes when they finish, a leak of one
    // per round stays as 20 more.
    let bounded = || {
        let now = lintel_tests::fds_and_shared_maps();
        now.0 < before.0 + 10 && now.1 < before.1 + 10
    };
    assert!(
        lintel_tests::eventually(Duration::from_secs(10), bounded),
        "descriptors and shared mappings of this process: {before:?} before 20 rounds, {:?} after",
        lintel_tests::fds_and_shared_maps()
    );
}

/// An export of a directory holding `f` ("bounded", 7 bytes) with room
/// for one mapped-window session; the directory goes with the first.
fn one_session_export() -> (tempfile::TempDir, lintel::Door) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), b"bounded").unwrap();
    let door = lintel_fs::Service::new(dir.path(), false)
        .unwrap()
        .with_max_sessions(1)
        .into_door();
    (dir, door)
}

/// A service keeps a bounded number of sessions: a client beyond it takes
/// the copy path, and a session that ends makes room.
#[test]
fn sessions_are_bounded_and_their_end_makes_room() {
    let (_dir, door) = one_session_export();
    let first = Fs::from_door(door.clone());
    let a = first.open("f").unwrap();
    assert!(a.is_mapped());
    let second = Fs::from_door(door.clone());
    let b = second.open("f").unwrap();
    assert!(!b.is_mapped(), "no room: the copy path");
    let mut buf = [0u8; 7];
    assert_eq!(b.read_at(&mut buf, 0).unwrap(), 7);
    assert_eq!(&buf, b"bounded");
    drop((a, first));
    let third = Fs::from_door(door);
    assert!(
        lintel_tests::eventually(Duration::from_secs(10), || third.open("f").unwrap().is_mapped()),
        "the first session's end made room"
    );
}

/// A client's session (its share of the service's room for them) is made
/// when its first window attaches, not at its first open: a client that
/// opens, looks and reads a little through calls leaves the room to
/// others, and one that maps later finds none and reads through calls.
#[test]
fn a_client_that_maps_nothing_takes_no_session() {
    let (_dir, door) = one_session_export();
    let looker = Fs::from_door(door.clone());
    let a = looker.open("f").unwrap();
    assert_eq!(a.metadata().unwrap().size, 7);
    let mut buf = [0u8; 7];
    assert_eq!(a.read_at(&mut buf, 0).unwrap(), 7);
    let mapper = Fs::from_door(door);
    let b = mapper.open("f").unwrap();
    assert!(b.is_mapped(), "the looker took no session: room for this one");
    assert!(!a.is_mapped(), "no room left: the copy path");
    buf.fill(0);
    assert_eq!(a.read_at(&mut buf, 0).unwrap(), 7);
    assert_eq!(&buf, b"bounded");
}

/// A client process holding the token of file `f`, with 10,000 bytes
/// written through its window and not yet written back; and its file.
fn token_holder(svc: &FsService) -> (FsClientPeer, u32) {
    let holder = FsClientPeer::start(svc.fs.door());
    let h = holder.peer.open(b"f".to_vec(), O_RDWR | O_CREAT, MAPPED).unwrap();
    assert!(holder.peer.is_mapped(h).unwrap());
    holder.peer.write_at(h, 0, &vec![b'h'; 10_000]).unwrap();
    (holder, h)
}

/// An open with O_TRUNC while another process holds the file's token with
/// bytes written through its window: the truncation wins (the holder's
/// bytes are written back first, then cut), as on one Unix host.
#[test]
fn a_truncating_open_comes_after_the_holders_writes() {
    let dir = tempfile::tempdir().unwrap();
    let svc = FsService::start(dir.path(), false);
    let (holder, h) = token_holder(&svc);
    let t = svc.fs.create("f").unwrap(); // O_WRONLY | O_CREAT | O_TRUNC
    assert_eq!(t.metadata().unwrap().size, 0);
    assert_eq!(
        holder.peer.stat(h).unwrap().size,
        0,
        "the holder sees the truncation"
    );
    assert_eq!(
        std::fs::metadata(dir.path().join("f")).unwrap().len(),
        0,
        "and so does the host"
    );
    let mut out = Vec::new();
    holder.peer.read_at(h, 0, 10, &mut out).unwrap();
    assert!(out.is_empty());
}

/// An open that answers with the file's metadata (`open_with_stat`, what
/// `lintel-run`'s `open` asks) reports what a client holding the file's
/// token wrote through its window and has not yet written back: the
/// metadata the open read on its way is the answer only when no client
/// holds the token.
#[test]
fn an_open_reports_the_size_a_holders_window_writes_made() {
    let dir = tempfile::tempdir().unwrap();
    let svc = FsService::start(dir.path(), false);
    let (holder, h) = token_holder(&svc);
    let read = OpenOptions::new()
        .read(true)
        .io_path(lintel_fs::IoPath::Copy)
        .clone();
    let (_, st) = svc.fs.open_with_stat("f", &read).unwrap();
    assert_eq!(st.size, 10_000, "the holder's writes are in the open's answer");
    holder.peer.write_at(h, 10_000, &vec![b'i'; 2_000]).unwrap();
    let (f, st) = svc.fs.open_with_stat("f", &read).unwrap();
    assert_eq!(st.size, 12_000, "and so are its later ones");
    assert_eq!(f.metadata().unwrap(), st, "as a stat of the open file says");
    drop(holder);
    std::fs::write(dir.path().join("f"), b"host").unwrap();
    let (_, st) = svc.fs.open_with_stat("f", &read).unwrap();
    assert_eq!(st.size, 4, "with no holder, the host's file as it is");
}

/// A file read through a pager fault, let go of, and another file mapped
/// at once (at the same address and slot) reads whole: the pager's note
/// that a range is mapped belongs to the mapping it resolved, never to
/// the next one. (The next one once inherited it, skipped its fill, and
/// read past the end of its empty cache: SIGBUS, seen with git under
/// load. Here the pager is made to note late, and the client waits for it
/// before it reads.)
#[test]
fn a_new_mapping_never_inherits_the_last_ones_pages() {
    let dir = tempfile::tempdir().unwrap();
    let big: Vec<u8> = (0..200_000u32).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(dir.path().join("big"), &big).unwrap();
    let rounds = 40usize;
    let small: Vec<Vec<u8>> = (0..rounds)
        .map(|k| (0..661u32).map(|i| (i as u8).wrapping_mul(k as u8 + 3)).collect())
        .collect();
    for (k, data) in small.iter().enumerate() {
        std::fs::write(dir.path().join(format!("s{k}")), data).unwrap();
    }
    let svc = FsService::start_env(
        dir.path(),
        false,
        lintel_fs::LOCK_TIMEOUT,
        &[("LINTEL_FS_PAGER_DELAY_US", "5000")],
    );
    let fs = &svc.fs;
    for (i, want) in small.iter().enumerate() {
        let f = fs.open("big").unwrap();
        assert!(f.is_mapped());
        // A positional read in the first 64 KiB: a fault the pager resolves.
        let at = (i * 7919) % 60_000;
        let mut b = [0u8; 1];
        assert_eq!(f.read_at(&mut b, at as u64).unwrap(), 1);
        assert_eq!(b[0], big[at]);
        drop(f);
        // A file never mapped before, mapped where `big` was; read once the
        // pager has noted its fault.
        let mut g = fs.open(format!("s{i}")).unwrap();
        assert!(g.is_mapped());
        std::thread::sleep(Duration::from_millis(20));
        let mut got = Vec::new();
        g.read_to_end(&mut got).unwrap();
        assert_eq!(&got, want, "round {i}");
    }
}

/// Byte-range locks are the service's, per open file: two opens conflict
/// as two processes' would, a waiting lock is had once the holder lets go,
/// `test_lock` names the holder's range, and closing the holder's file
/// frees its locks. Over both placements, for handles on the copy path
/// (locks through calls), mapped ones (locks on the open's own host
/// open file description, without a call) and one of each.
#[test]
fn byte_range_locks_conflict_between_open_files_and_go_with_them() {
    use lintel_fs::IoPath::{Copy, Mapped};
    for (pa, pb) in [(Copy, Copy), (Mapped, Mapped), (Mapped, Copy), (Copy, Mapped)] {
        both_placements(|fs, _root| byte_range_locks(fs, pa, pb));
    }
}

fn byte_range_locks(fs: &Fs, pa: lintel_fs::IoPath, pb: lintel_fs::IoPath) {
    use lintel_fs::LockKind::{Read, Unlock, Write};
    let case = format!("{pa:?} against {pb:?}");
    fs.write("db", &[0u8; 4096]).unwrap();
    let a = fs.open_with("db", rw().io_path(pa)).unwrap();
    let b = fs.open_with("db", rw().io_path(pb)).unwrap();
    assert_eq!(a.is_mapped(), pa == lintel_fs::IoPath::Mapped, "{case}");
    assert_eq!(b.is_mapped(), pb == lintel_fs::IoPath::Mapped, "{case}");
    let calls = fs.counters().unwrap().file_calls;
    a.lock(Write, 100, 10, false).unwrap();
    if a.is_mapped() {
        assert_eq!(fs.counters().unwrap().file_calls, calls, "{case}: no call");
    }
    assert_eq!(errno(b.lock(Read, 105, 1, false)), libc::EAGAIN, "{case}");
    b.lock(Read, 110, 0, false).unwrap();
    let h = b
        .test_lock(Write, 0, 200)
        .unwrap()
        .expect("a's lock is in the way");
    assert_eq!((h.kind, h.start, h.len), (Write, 100, 10), "{case}");
    assert_eq!(a.test_lock(Read, 0, 100).unwrap(), None, "{case}");
    // A waiting lock is had when the holder lets go.
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        a.lock(Unlock, 0, 0, false).unwrap();
        a
    });
    let start = Instant::now();
    b.lock(Write, 100, 10, true).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(50), "{case}: it waited");
    let a = t.join().unwrap();
    assert_eq!(errno(a.lock(Read, 100, 1, false)), libc::EAGAIN, "{case}");
    // `flock` is apart from the byte-range locks, and conflicts the same.
    b.flock(Write, false).unwrap();
    assert_eq!(errno(a.flock(Read, false)), libc::EAGAIN, "{case}");
    // Closing the holder's file frees its locks.
    drop(b);
    assert!(
        lintel_tests::eventually(Duration::from_secs(5), || a.lock(Write, 0, 0, false).is_ok()
            && a.flock(Read, false).is_ok()),
        "{case}: the closed file's locks are gone"
    );
    assert_eq!(errno(a.lock(Read, u64::MAX, 1, false)), libc::EINVAL, "{case}");
    a.lock(Unlock, 0, 0, false).unwrap();
    a.flock(Unlock, false).unwrap();
}

#[test]
fn large_reads_come_through_a_pipe_and_match_the_file() {
    both_placements(|fs, host| {
        let data: Vec<u8> = (0..(5 << 20) + 77)
            .map(|i: u32| (i.wrapping_mul(2654435761) >> 11) as u8)
            .collect();
        std::fs::write(host.join("big"), &data).unwrap();
        let before = fs.counters().unwrap();
        // The copy path (a mapped file reads pieces up to a megabyte
        // through its window).
        let copy = OpenOptions::new()
            .read(true)
            .io_path(lintel_fs::IoPath::Copy)
            .clone();
        let mut f = fs.open_with("big", &copy).unwrap();
        // Sequential reads at the shared offset, in pieces that do not
        // line up with pages, then past the end.
        let mut got = Vec::new();
        let mut piece = vec![0u8; 200_003];
        loop {
            let n = f.read(&mut piece).unwrap();
            if n == 0 {
                break;
            }
            assert!(
                n == piece.len() || got.len() + n == data.len(),
                "short only at the end"
            );
            got.extend_from_slice(&piece[..n]);
        }
        assert!(got == data, "sequential spliced reads give the file");
        // Positional reads larger than a pipe, at odd offsets; the offset
        // stays where it was.
        let mut big = vec![0u8; 3 << 20];
        assert_eq!(f.read_at(&mut big, 12_345).unwrap(), 3 << 20);
        assert!(big == data[12_345..12_345 + (3 << 20)]);
        assert_eq!(f.read_at(&mut big, data.len() as u64 - 1000).unwrap(), 1000);
        assert!(big[..1000] == data[data.len() - 1000..]);
        assert_eq!(f.read_at(&mut big, data.len() as u64 + 5).unwrap(), 0);
        assert_eq!(f.stream_position().unwrap(), data.len() as u64);
        let after = fs.counters().unwrap();
        assert!(
            after.spliced_bytes - before.spliced_bytes >= data.len() as u64 + (3 << 20),
            "the large reads were spliced ({} bytes)",
            after.spliced_bytes - before.spliced_bytes
        );

        // A write through another open is seen by the next large read, and
        // a truncation by the one after.
        let w = fs
            .open_with("big", &OpenOptions::new().write(true).clone())
            .unwrap();
        w.write_at(&[0xAB; 70_000], 1_000_000).unwrap();
        assert_eq!(f.read_at(&mut big[..100_000], 990_000).unwrap(), 100_000);
        assert!(big[..10_000] == data[990_000..1_000_000]);
        assert!(big[10_000..80_000].iter().all(|&b| b == 0xAB));
        assert!(big[80_000..100_000] == data[1_070_000..1_090_000]);
        w.set_len(1_050_000).unwrap();
        assert_eq!(f.read_at(&mut big[..100_000], 990_000).unwrap(), 60_000);

        // A write-only open cannot be read, spliced or not.
        assert_eq!(errno(w.read_at(&mut big[..100_000], 0)), EBADF);
    });
}

#[test]
fn pipes_a_client_attaches_are_checked_and_bounded() {
    use lintel_fs::proto::{OpenFile, OpenFileClient};
    use std::os::fd::OwnedFd;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), vec![7u8; 100_000]).unwrap();
    let svc = FsService::start(dir.path(), false);
    let f = svc.fs.open("f").unwrap();
    let raw = OpenFileClient::from_door(f.door().clone());
    let pipe = || rustix::pipe::pipe().unwrap();
    // Not a pipe, and the wrong end of one: refused.
    let file = OwnedFd::from(std::fs::File::open(dir.path().join("f")).unwrap());
    assert_eq!(errno(raw.attach_pipe(file)), EINVAL);
    let (r, _w) = pipe();
    assert_eq!(errno(raw.attach_pipe(r)), EINVAL);
    // A pipe number never attached, and a pipe left full: refused, the
    // service unblocked.
    assert_eq!(errno(raw.read_spliced_at(99, 0, 10)), EINVAL);
    let (r, w) = pipe();
    let n = raw.attach_pipe(w).unwrap();
    assert_eq!(raw.read_spliced_at(n, 0, 65_536).unwrap(), 65_536);
    let start = Instant::now();
    assert_eq!(
        errno(raw.read_spliced_at(n, 0, 60_000)),
        EINVAL,
        "never blocks on a full pipe"
    );
    assert!(start.elapsed() < Duration::from_secs(30));
    drop(r);
    // Pipes are bounded per open file; those whose reader is gone make
    // room again.
    let mut kept = Vec::new();
    let mut refused = false;
    for _ in 0..=lintel_fs::MAX_PIPES {
        let (r, w) = pipe();
        match raw.attach_pipe(w) {
            Ok(_) => kept.push(r),
            Err(e) => {
                assert_eq!(e.errno(), EINVAL, "{e}");
                refused = true;
                break;
            }
        }
    }
    assert!(refused && kept.len() <= lintel_fs::MAX_PIPES);
    kept.pop();
    let (_r, w) = pipe();
    let m = raw.attach_pipe(w).expect("a pipe whose reader closed makes room");
    assert_ne!(m, n, "a number is never given out twice");
    assert_eq!(
        errno(raw.read_spliced_at(n, 0, 10)),
        EINVAL,
        "a dropped pipe's number names nothing"
    );
    // The file still reads right through the call and through pipes.
    let mut buf = vec![0u8; 100_000];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 100_000);
    assert!(buf.iter().all(|&b| b == 7));

    // The export as a whole holds a bounded number, over all open files.
    let mut opens = Vec::new();
    let mut readers = Vec::new();
    'fill: for _ in 0..=(lintel_fs::MAX_EXPORT_PIPES as usize / lintel_fs::MAX_PIPES + 1) {
        let o = OpenFileClient::from_door(svc.fs.open("f").unwrap().door().clone());
        for _ in 0..lintel_fs::MAX_PIPES {
            let (r, w) = pipe();
            match o.attach_pipe(w) {
                Ok(_) => readers.push(r),
                Err(e) => {
                    assert_eq!(e.errno(), EINVAL, "{e}");
                    break 'fill;
                }
            }
        }
        opens.push(o);
    }
    assert!(
        readers.len() + kept.len() < lintel_fs::MAX_EXPORT_PIPES as usize,
        "{} pipes attached",
        readers.len() + kept.len() + 1
    );
    let fresh = OpenFileClient::from_door(svc.fs.open("f").unwrap().door().clone());
    let (_r2, w) = pipe();
    assert_eq!(errno(fresh.attach_pipe(w)), EINVAL, "the export is full");
    drop(opens);
    drop(readers);
    let mut kept_reader = None;
    assert!(
        lintel_tests::eventually(Duration::from_secs(10), || {
            let (r, w) = pipe();
            kept_reader = Some(r);
            fresh.attach_pipe(w).is_ok()
        }),
        "the pipes of closed open files make room"
    );
}

/// A write-out (here for a `stat` of the file) writes back the pages a
/// client wrote through its window, not the span between the lowest and
/// highest of them: a database that rewrites its first page and appends
/// pays for those pages per commit, not for the whole file. The host file
/// gets every byte written, and the writer keeps its token: after the
/// first round, no write asks for it again.
#[test]
fn a_write_out_writes_back_the_pages_written_not_the_span_between() {
    both_placements(|fs, host| {
        let mut data: Vec<u8> = (0..4u32 << 20)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        std::fs::write(host.join("db"), &data).unwrap();
        let f = fs.open_with("db", &rw()).unwrap();
        assert!(f.is_mapped());
        for round in 0..3u8 {
            let before = fs.counters().unwrap();
            for at in [10usize, 2 << 20, (4 << 20) - 200 + usize::from(round)] {
                let piece = [0xC0 | round; 100];
                f.write_at(&piece, at as u64).unwrap();
                data[at..at + 100].copy_from_slice(&piece);
            }
            assert_eq!(fs.stat("db").unwrap().size, data.len() as u64);
            let written = fs.counters().unwrap().written_back - before.written_back;
            assert!(
                (300..=3 * 4096).contains(&written),
                "round {round}: {written} bytes written back for three writes of 100"
            );
            let on_host = std::fs::read(host.join("db")).unwrap();
            let first = on_host.iter().zip(&data).position(|(a, b)| a != b);
            assert_eq!((on_host.len(), first), (data.len(), None), "round {round}");
            if round > 0 {
                let grants = fs.counters().unwrap().grants - before.grants;
                assert_eq!(
                    grants, 0,
                    "round {round}: the write-out took the writer's token away"
                );
            }
        }
        // Read back through the handle after the last write-out: the token
        // and the window it kept serve the bytes.
        let mut back = vec![0u8; 100];
        f.read_at(&mut back, 2 << 20).unwrap();
        assert_eq!(back, data[2 << 20..(2 << 20) + 100]);
    });
}

/// A handle that holds its file's token syncs with no call: it writes
/// back what it wrote through its window itself, and the host file has
/// every byte, past its old end too. Taking the token back afterwards
/// finds nothing left to write. A reader holding the token syncs without
/// a call too.
#[test]
fn a_holder_syncs_without_a_call() {
    both_placements(|fs, host| {
        let mut data = vec![b'.'; 300_000];
        std::fs::write(host.join("db"), &data).unwrap();
        let opts = rw().io_path(lintel_fs::IoPath::Mapped).clone();
        let f = fs.open_with("db", &opts).unwrap();
        assert!(f.is_mapped());
        for (round, at) in [5usize, 150_000, 299_950].into_iter().enumerate() {
            let piece = [b'a' + round as u8; 100];
            assert_eq!(f.write_at(&piece, at as u64).unwrap(), 100);
            data.resize(data.len().max(at + 100), 0);
            data[at..at + 100].copy_from_slice(&piece);
            let before = fs.counters().unwrap();
            if round % 2 == 0 {
                f.sync_data().unwrap();
            } else {
                f.sync_all().unwrap();
            }
            let after = fs.counters().unwrap();
            assert_eq!(
                after.file_calls, before.file_calls,
                "round {round}: the sync made a call"
            );
            assert_eq!(
                after.written_back, before.written_back,
                "written back here, not by the service"
            );
            assert!(
                std::fs::read(host.join("db")).unwrap() == data,
                "round {round}: the host file"
            );
        }
        // Taking the token back (another open's read) finds nothing to write.
        let before = fs.counters().unwrap();
        assert!(fs.read("db").unwrap() == data);
        let after = fs.counters().unwrap();
        assert!(after.recalls > before.recalls, "the token was taken back");
        assert_eq!(
            after.written_back, before.written_back,
            "nothing was left to write"
        );
        drop(f);

        let r = fs
            .open_with(
                "db",
                OpenOptions::new().read(true).io_path(lintel_fs::IoPath::Mapped),
            )
            .unwrap();
        let mut head = [0u8; 10];
        assert_eq!(r.read_at(&mut head, 0).unwrap(), 10, "the reader takes the token");
        let before = fs.counters().unwrap();
        r.sync_data().unwrap();
        assert_eq!(
            fs.counters().unwrap().file_calls,
            before.file_calls,
            "a reader's sync"
        );
    });
}

/// A handle read or written a few times in all takes no window (a cache
/// mapping, a token, a pager registration). One that writes at offsets
/// takes its own descriptor of the host file at its first such write (one
/// call): its writes and reads at offsets, syncs and `stat`s make none
/// after it, and the file gets no window while it is open anywhere. One
/// that writes at the shared offset pays through calls until its
/// `ATTACH_AFTER`th, and its window serves from then on.
#[test]
fn a_handle_used_a_few_times_attaches_no_window() {
    both_placements(|fs, host| {
        let before = fs.counters().unwrap();
        let f = fs.open_with("journal", &rw()).unwrap();
        f.write_at(b"header..", 0).unwrap();
        let asked = fs.counters().unwrap();
        assert_eq!(
            asked.direct - before.direct,
            1,
            "its descriptor, at the first write"
        );
        f.write_at(b"record", 8).unwrap();
        let mut back = [0u8; 14];
        assert_eq!(f.read_at(&mut back, 0).unwrap(), 14);
        assert_eq!(&back, b"header..record");
        f.sync_data().unwrap();
        f.sync_all().unwrap();
        assert_eq!(f.metadata().unwrap().size, 14);
        let mid = fs.counters().unwrap();
        assert_eq!(calls(&asked, &mid), 0, "no call after it");
        assert_eq!(
            (mid.grants - before.grants, mid.windows - before.windows),
            (0, 0),
            "no token, no window"
        );
        assert_eq!(std::fs::read(host.join("journal")).unwrap(), b"header..record");
        // A second open of the file meanwhile gets no window, and each
        // sees the other's writes.
        let g = fs.open_with("journal", &rw()).unwrap();
        assert!(!g.is_mapped(), "no window while the file's I/O is the host's");
        g.write_at(b"R", 8).unwrap();
        assert_eq!(f.read_at(&mut back, 0).unwrap(), 14);
        assert_eq!(&back, b"header..Record");
        drop((f, g));

        let mid = fs.counters().unwrap();
        let f = fs.open_with("log", &rw()).unwrap();
        for i in 0..lintel_fs::ATTACH_AFTER as u8 + 2 {
            f.write_shared(&[b'0' + i]).unwrap();
        }
        let after = fs.counters().unwrap();
        assert!(
            after.grants > mid.grants,
            "the window taken at the {}th write",
            lintel_fs::ATTACH_AFTER
        );
        let calls_then = after.file_calls;
        f.write_shared(b"!").unwrap();
        assert_eq!(
            fs.counters().unwrap().file_calls,
            calls_then,
            "then writes make no call"
        );
        drop(f);
        assert_eq!(std::fs::read(host.join("log")).unwrap(), b"0123456789:;<=>?@A!");
    });
}

/// A handle that a `stat` through it found to be a large regular file
/// takes its window at its first read, where a smaller one, or one not
/// asked, reads through calls first; and windows, closed, are detached,
/// so that a process opening more files in turn than a session has
/// descriptors gets a window for each.
#[test]
fn a_large_file_stat_through_its_handle_takes_its_window_at_its_first_read() {
    both_placements(|fs, host| {
        let large = lintel_fs::ATTACH_LARGE as usize + 4096;
        std::fs::write(host.join("large"), vec![7u8; large]).unwrap();
        std::fs::write(host.join("small"), vec![5u8; 200 << 10]).unwrap();
        let mut buf = vec![0u8; 16 << 10];

        // (name, stat first, grants and read calls at the first read)
        for (name, stat, want) in [
            ("large", true, (1, 0)),
            ("small", true, (0, 1)),
            ("large", false, (0, 1)),
        ] {
            let f = fs.open(name).unwrap();
            if stat {
                let size = std::fs::metadata(host.join(name)).unwrap().len();
                assert_eq!(f.metadata().unwrap().size, size);
            }
            let before = fs.counters().unwrap();
            assert_eq!(f.read_shared(&mut buf).unwrap(), buf.len());
            let after = fs.counters().unwrap();
            assert_eq!(
                (after.grants - before.grants, after.file_calls - before.file_calls),
                want,
                "{name}, stat first: {stat}: (1, 0) is the window at the first read, (0, 1) a read call"
            );
            assert!(buf.iter().all(|&b| b == if name == "large" { 7 } else { 5 }));
        }

        // A window closed is detached.
        let before = fs.counters().unwrap();
        let f = fs.open("large").unwrap();
        f.metadata().unwrap();
        assert_eq!(f.read_at(&mut buf[..1], 0).unwrap(), 1);
        drop(f);
        let deadline = Instant::now() + Duration::from_secs(20);
        while fs.counters().unwrap().detached == before.detached {
            assert!(Instant::now() < deadline, "the window let go was never detached");
            std::thread::sleep(Duration::from_millis(1));
        }

        // More windows in turn than a session has descriptors: each is
        // let go at its close.
        for i in 0..lintel_fs::token::SLOTS + 16 {
            let f = fs.open("large").unwrap();
            f.metadata().unwrap();
            let before = fs.counters().unwrap();
            assert_eq!(f.read_at(&mut buf[..1], i as u64).unwrap(), 1);
            assert_eq!(
                fs.counters().unwrap().grants - before.grants,
                1,
                "window {i} attached"
            );
        }
    });
}

/// A handle's own descriptor of the host file answers as Linux does: a
/// write at an offset through an open to append lands at the end, one
/// through an open for reading is `EBADF`. A file with a window gets none:
/// a writer at offsets then writes through calls, and the window shows
/// what it wrote.
#[test]
fn a_handle_s_own_descriptor_answers_as_linux_and_only_where_no_window_is() {
    use std::os::unix::fs::FileExt;
    both_placements(|fs, host| {
        // Linux first, on a file of its own.
        std::fs::write(host.join("native"), b"abc").unwrap();
        let native = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .open(host.join("native"))
            .unwrap();
        native.write_at(b"XY", 0).unwrap();
        let linux = std::fs::read(host.join("native")).unwrap();
        let linux_ro = std::fs::File::open(host.join("native"))
            .unwrap()
            .write_at(b"Z", 0);

        std::fs::write(host.join("served"), b"abc").unwrap();
        let before = fs.counters().unwrap();
        let f = fs
            .open_with("served", OpenOptions::new().read(true).append(true))
            .unwrap();
        f.write_at(b"XY", 0).unwrap();
        assert_eq!(fs.counters().unwrap().direct - before.direct, 1);
        assert_eq!(
            std::fs::read(host.join("served")).unwrap(),
            linux,
            "appended, as Linux does"
        );
        let ro = fs.open_with("served", OpenOptions::new().read(true)).unwrap();
        assert_eq!(
            errno(ro.write_at(b"Z", 0)),
            linux_ro.unwrap_err().raw_os_error().unwrap(),
            "a write through an open for reading"
        );
        drop((f, ro));

        // A file with a window: the writer's descriptor is refused.
        std::fs::write(host.join("mapped"), vec![b'.'; 8192]).unwrap();
        let reader = fs.open("mapped").unwrap();
        assert!(reader.is_mapped());
        let mut b = [0u8; 4];
        reader.read_at(&mut b, 100).unwrap();
        let before = fs.counters().unwrap();
        let w = fs.open_with("mapped", &rw()).unwrap();
        w.write_at(b"news", 100).unwrap();
        let after = fs.counters().unwrap();
        assert_eq!(after.direct, before.direct, "none where a window is");
        assert!(calls(&before, &after) >= 2, "asked, then wrote through a call");
        reader.read_at(&mut b, 100).unwrap();
        assert_eq!(&b, b"news");
    });
}

/// Threads reading one open file at its shared offset each get the next
/// bytes: every 8-byte word of the file comes to exactly one of them,
/// whichever way each read goes (inside the share lock without a call,
/// or with the token taken back by another open's calls and asked for
/// again). The words hold their own offsets.
#[test]
fn threads_reading_at_one_shared_offset_never_read_a_word_twice() {
    both_placements(|fs, host| {
        const WORDS: u64 = 48 << 10; // 384 KiB: the window moves
        let data: Vec<u8> = (0..WORDS).flat_map(|w| (w * 8).to_le_bytes()).collect();
        std::fs::write(host.join("f"), &data).unwrap();
        let f = fs.open_with("f", OpenOptions::new().read(true)).unwrap();
        assert!(f.is_mapped());
        let other = fs
            .open_with("f", OpenOptions::new().read(true).mapped_max(0))
            .unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        let seen: Vec<Vec<u64>> = std::thread::scope(|s| {
            // Another open's copy-path calls take the token back now and then.
            s.spawn(|| {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    other.metadata().unwrap();
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
            });
            let readers: Vec<_> = (0..3)
                .map(|_| {
                    s.spawn(|| {
                        let mut got = Vec::new();
                        let mut w = [0u8; 8];
                        loop {
                            match f.read_shared(&mut w).unwrap() {
                                0 => return got,
                                8 => got.push(u64::from_le_bytes(w)),
                                n => panic!("a read of {n} bytes of an 8-byte word"),
                            }
                        }
                    })
                })
                .collect();
            let seen = readers.into_iter().map(|r| r.join().unwrap()).collect();
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            seen
        });
        for got in &seen {
            assert!(got.windows(2).all(|p| p[0] < p[1]), "each thread reads forwards");
        }
        let mut all: Vec<u64> = seen.concat();
        all.sort_unstable();
        let want: Vec<u64> = (0..WORDS).map(|w| w * 8).collect();
        assert_eq!(all.len(), want.len(), "words read in all");
        assert!(all == want, "every word once");
    });
}

/// A `stat` of a file whose token a client holds shows what that client
/// wrote through its window (written out to the host first), and leaves
/// it the token: its next write through the window asks for nothing.
#[test]
fn a_stat_writes_out_a_holder_s_window_and_leaves_it_the_token() {
    both_placements(|fs, host| {
        std::fs::write(host.join("f"), vec![b'.'; 10_000]).unwrap();
        let opts = rw().io_path(lintel_fs::IoPath::Mapped).clone();
        let f = fs.open_with("f", &opts).unwrap();
        assert!(f.is_mapped());
        assert_eq!(f.write_at(b"window", 20_000).unwrap(), 6);
        let before = fs.counters().unwrap();
        assert_eq!(fs.stat("f").unwrap().size, 20_006, "the holder's size");
        let on_host = std::fs::read(host.join("f")).unwrap();
        assert_eq!(on_host.len(), 20_006);
        assert_eq!(&on_host[20_000..], b"window", "written out before the look");
        assert!(
            on_host[10_000..20_000].iter().all(|&b| b == 0),
            "a hole, as on Linux"
        );
        assert_eq!(f.write_at(b"again", 0).unwrap(), 5);
        let after = fs.counters().unwrap();
        assert_eq!(after.grants, before.grants, "the holder kept its token");
        assert_eq!(after.recalls, before.recalls, "nothing was taken back");
        // The write after the look is the file's too.
        assert_eq!(fs.read("f").unwrap()[..5], *b"again");
    });
}

/// A long sequential read of a mapped file waits for a splice only at its
/// start: after each pipeful the service fills the handle's second pipe
/// with the next one while the first is drained. The bytes are the
/// file's, also where another open wrote inside a pipeful already filled
/// ahead.
#[test]
fn a_long_read_finds_each_next_pipeful_filled_ahead() {
    both_placements(|fs, host| {
        let mut data: Vec<u8> = (0..(5 << 20) + 123)
            .map(|i: u32| (i.wrapping_mul(2654435761) >> 11) as u8)
            .collect();
        std::fs::write(host.join("f"), &data).unwrap();
        let opts = OpenOptions::new().read(true).mapped_max(4096).clone();
        let mut f = fs.open_with("f", &opts).unwrap();
        assert!(f.is_mapped());
        let before = fs.counters().unwrap();
        let mut piece = vec![0u8; 64 << 10];
        let mut got = Vec::new();
        while got.len() < 3 << 19 {
            let n = f.read(&mut piece).unwrap();
            assert_eq!(n, piece.len(), "full reads inside the file");
            got.extend_from_slice(&piece);
        }
        // Past the first pipeful (under 1 MiB): the service filled the
        // one after the second while this read drained the second. Another
        // open writes inside it.
        let at = got.len() + 600_000;
        let w = fs
            .open_with("f", &OpenOptions::new().write(true).clone())
            .unwrap();
        w.write_at(&[0xA5; 30_000], at as u64).unwrap();
        data[at..at + 30_000].fill(0xA5);
        read_rest(&mut f, &mut piece, &mut got);
        assert_eq!(got.len(), data.len());
        let first = got.iter().zip(&data).position(|(a, b)| a != b);
        assert_eq!(
            first, None,
            "the first byte read that is not the file's (written at {at})"
        );
        let after = fs.counters().unwrap();
        let filled = after.filled_ahead - before.filled_ahead;
        let on_the_spot = after.splices - before.splices - filled;
        assert!(filled >= 2, "{filled} pipefuls filled ahead");
        // The first pipeful, and the first after the write (the token went
        // to the writer and back, so what was filled is not used).
        assert!(on_the_spot <= 3, "{on_the_spot} pipefuls spliced on the spot");
    });
}

/// Read `f` at its offset to its end in pieces of `piece.len()` bytes,
/// onto `got`.
fn read_rest(f: &mut lintel_fs::File, piece: &mut [u8], got: &mut Vec<u8>) {
    loop {
        let n = f.read(piece).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&piece[..n]);
    }
}

/// A read-only export's files, which hand out no host descriptor, read
/// ahead at every size: a long sequential read waits for a splice only at
/// its start.
#[test]
fn a_read_only_export_s_long_reads_fill_ahead_too() {
    let data: Vec<u8> = (0..(5 << 20) + 123)
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect();
    let check = |fs: &Fs| {
        let opts = OpenOptions::new().read(true).mapped_max(4096).clone();
        let mut f = fs.open_with("f", &opts).unwrap();
        assert!(f.is_mapped());
        let before = fs.counters().unwrap();
        let mut piece = vec![0u8; 20_000];
        let mut got = Vec::new();
        read_rest(&mut f, &mut piece, &mut got);
        assert_eq!(got.len(), data.len());
        let first = got.iter().zip(&data).position(|(a, b)| a != b);
        assert_eq!(first, None, "the first byte read that is not the file's");
        let after = fs.counters().unwrap();
        let filled = after.filled_ahead - before.filled_ahead;
        let on_the_spot = after.splices - before.splices - filled;
        assert!(filled >= 2, "{filled} pipefuls filled ahead");
        assert!(on_the_spot <= 2, "{on_the_spot} pipefuls spliced on the spot");
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), &data).unwrap();
    let local = Fs::from_door(lintel_fs::Service::new(dir.path(), true).unwrap().into_door());
    check(&local);
    let remote = FsService::start(dir.path(), true);
    check(&remote.fs);
}

/// Long positional reads of a mapped file, its token here and nothing
/// dirty, read the host file itself: no splice and no call each. Another
/// open's write in the middle takes the token back first, so the bytes
/// read are the file's, the written ones included. (A read-only export
/// hands out no host descriptor: there they take a call and a splice.)
#[test]
fn long_positional_reads_read_the_host_file_while_the_token_is_here() {
    both_placements(|fs, host| {
        let mut data: Vec<u8> = (0..(3 << 20) + 123)
            .map(|i: u32| (i.wrapping_mul(2654435761) >> 11) as u8)
            .collect();
        std::fs::write(host.join("f"), &data).unwrap();
        let opts = OpenOptions::new().read(true).mapped_max(4096).clone();
        let f = fs.open_with("f", &opts).unwrap();
        assert!(f.is_mapped());
        let before = fs.counters().unwrap();
        let mut piece = vec![0u8; 64 << 10];
        let len = data.len();
        let read_all = |got: &mut Vec<u8>, piece: &mut [u8]| {
            // Backwards, so that no read ahead at an offset could serve it.
            let mut at = len;
            let mut parts = Vec::new();
            while at > 0 {
                let from = at.saturating_sub(piece.len());
                let n = f.read_at(&mut piece[..at - from], from as u64).unwrap();
                assert_eq!(n, at - from, "full reads inside the file");
                parts.push(piece[..n].to_vec());
                at = from;
            }
            got.clear();
            for p in parts.iter().rev() {
                got.extend_from_slice(p);
            }
        };
        let mut got = Vec::new();
        read_all(&mut got, &mut piece);
        assert!(got == data, "the file's bytes");
        let w = fs
            .open_with("f", &OpenOptions::new().write(true).clone())
            .unwrap();
        w.write_at(&[0xA5; 30_000], 1_000_000).unwrap();
        data[1_000_000..1_030_000].fill(0xA5);
        read_all(&mut got, &mut piece);
        let first = got.iter().zip(&data).position(|(a, b)| a != b);
        assert_eq!(first, None, "the first byte read that is not the file's");
        let after = fs.counters().unwrap();
        assert_eq!(after.splices, before.splices, "no splice: the host file was read");
        assert!(after.recalls > before.recalls, "the write took the token back");
        // The other open's write, and at most a call or two of ours.
        assert!(
            after.file_calls - before.file_calls <= 3,
            "{} calls on open files for {} reads",
            after.file_calls - before.file_calls,
            2 * got.len().div_ceil(piece.len())
        );
    });
}

/// Reads of a mapped file at its offset in 20,000-byte pieces, from the
/// host file or, with `pipes`, through the read-ahead pipes (a call per
/// pipeful), make no call each and never return bytes older than a
/// write, a truncation or a seek since.
fn changes_since_are_seen(fs: &Fs, host: &Path, pipes: bool) {
    let data: Vec<u8> = (0..(3 << 20) + 5)
        .map(|i: u32| (i.wrapping_mul(2246822519) >> 9) as u8)
        .collect();
    std::fs::write(host.join("f"), &data).unwrap();
    // Pieces above 4 KiB skip the window: they read the host file, or,
    // from `stream_min` up, drain the pipe.
    let stream_min = if pipes { 4096 } else { lintel_fs::STREAM_MIN };
    let opts = OpenOptions::new()
        .read(true)
        .write(true)
        .mapped_max(4096)
        .stream_min(stream_min)
        .clone();
    let mut f = fs.open_with("f", &opts).unwrap();
    assert!(f.is_mapped());
    let before = fs.counters().unwrap();
    let mut piece = vec![0u8; 20_000];
    let mut got = Vec::new();
    while got.len() < 1 << 20 {
        let n = f.read(&mut piece).unwrap();
        assert_eq!(n, piece.len(), "full reads inside the file");
        got.extend_from_slice(&piece);
    }
    assert!(got == data[..got.len()]);
    let after = fs.counters().unwrap();
    let reads = got.len() / piece.len();
    if pipes {
        assert!(
            after.splices - before.splices <= 3,
            "{reads} reads took {} splices: no read ahead",
            after.splices - before.splices
        );
    } else {
        assert_eq!(after.splices, before.splices, "no splice: the host file was read");
        assert!(
            after.file_calls - before.file_calls <= 3,
            "{reads} reads took {} calls",
            after.file_calls - before.file_calls
        );
    }

    // Another open writes just ahead of the offset (inside what was
    // read ahead), then truncates: both are seen by the next reads.
    let at = got.len() as u64;
    let w = fs
        .open_with("f", &OpenOptions::new().write(true).clone())
        .unwrap();
    w.write_at(&[0x5A; 30_000], at + 10_000).unwrap();
    assert_eq!(f.read(&mut piece).unwrap(), piece.len());
    assert!(piece[..10_000] == data[at as usize..at as usize + 10_000]);
    assert!(
        piece[10_000..].iter().all(|&b| b == 0x5A),
        "a write since the read ahead is seen"
    );
    // Truncated and written anew: the host's pages are new ones (the
    // pipe holds the old ones, which no longer are the file's).
    let at = at + piece.len() as u64;
    let n = f.read(&mut piece[..1000]).unwrap();
    assert_eq!(n, 1000, "reads ahead again");
    let at = at + 1000;
    w.set_len(at).unwrap();
    w.write_at(&[0x77; 20_000], at).unwrap();
    w.set_len(at + 15_000).unwrap();
    assert_eq!(f.read(&mut piece).unwrap(), 15_000, "a truncation since is seen");
    assert!(
        piece[..15_000].iter().all(|&b| b == 0x77),
        "bytes written since are seen"
    );
    assert_eq!(f.read(&mut piece).unwrap(), 0);

    // A seek, and this handle's own writes through its window, are
    // seen too.
    w.set_len(0).unwrap();
    w.write_at(&data, 0).unwrap();
    f.seek(SeekFrom::Start(100_000)).unwrap();
    assert_eq!(f.read(&mut piece).unwrap(), piece.len());
    assert!(piece[..] == data[100_000..120_000]);
    f.write_all(&[0xC3; 1000]).unwrap(); // through the window: 1000 ≤ 4096
    f.seek(SeekFrom::Start(119_000)).unwrap();
    assert_eq!(f.read(&mut piece).unwrap(), piece.len());
    assert!(piece[..1000] == data[119_000..120_000]);
    assert!(
        piece[1000..2000].iter().all(|&b| b == 0xC3),
        "our own window write is seen"
    );
    assert!(piece[2000..] == data[121_000..139_000]);
    // With the token here and no write since, a seek alone (no call)
    // leaves what the pipe holds behind.
    let read_here = |f: &mut lintel_fs::File, at: u64, piece: &mut [u8]| {
        f.seek(SeekFrom::Start(at)).unwrap();
        assert_eq!(f.read(piece).unwrap(), piece.len());
        assert!(
            piece[..] == data[at as usize..at as usize + piece.len()],
            "read at {at} after a seek"
        );
    };
    read_here(&mut f, 500_000, &mut piece);
    read_here(&mut f, 400_000, &mut piece);
    read_here(&mut f, 420_000, &mut piece);
}

#[test]
fn long_reads_at_the_offset_see_every_change_made_since() {
    both_placements(|fs, host| changes_since_are_seen(fs, host, false));
}

#[test]
fn reading_ahead_sees_every_change_made_since() {
    both_placements(|fs, host| changes_since_are_seen(fs, host, true));
}

/// A shared mapping of a served file maps the host file: its writes are
/// seen by every client's calls and theirs by it, and no window (the
/// service's cache, which the mapping does not see) is handed out for the
/// file any more.
#[test]
fn a_shared_mapping_and_every_client_see_one_copy() {
    use rustix::mm::{mmap, munmap, MapFlags, ProtFlags};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), vec![b'.'; 100_000]).unwrap();
    let svc = FsService::start(dir.path(), false);
    let other = FsClientPeer::start(svc.fs.door());
    let fo = other.peer.open(b"f".to_vec(), O_RDWR, AUTO).unwrap();
    assert!(other.peer.is_mapped(fo).unwrap());
    // The other client holds the token with a write only in its window.
    other.peer.write_at(fo, 10, b"window").unwrap();

    let f = svc.fs.open_with("f", &rw()).unwrap();
    let fd = f.map_descriptor().unwrap();
    let len = 100_000;
    // SAFETY: a fresh shared mapping of a file descriptor; the kernel picks
    // the address, and nothing else in this process uses the range.
    let p = unsafe {
        mmap(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            &fd,
            0,
        )
    }
    .unwrap() as *mut u8;
    // SAFETY: `p` maps `len` bytes, readable and writable, until the
    // `munmap` below; this test is its only user.
    let map = unsafe { std::slice::from_raw_parts_mut(p, len) };
    assert_eq!(
        &map[10..16],
        b"window",
        "the window's bytes were written back first"
    );

    map[1000..1005].copy_from_slice(b"MAPPD");
    let mut out = Vec::new();
    other.peer.read_at(fo, 1000, 5, &mut out).unwrap();
    assert_eq!(out, b"MAPPD", "the other client reads what the mapping wrote");
    let grants = svc.fs.counters().unwrap().grants;
    other.peer.write_at(fo, 2000, b"calls").unwrap();
    assert_eq!(
        &map[2000..2005],
        b"calls",
        "the mapping sees the other client's write"
    );
    other.peer.read_at(fo, 3000, 10, &mut out).unwrap();
    assert_eq!(
        svc.fs.counters().unwrap().grants,
        grants,
        "no token is granted for the file any more"
    );
    // SAFETY: unmapping the mapping made above, no longer used.
    unsafe { munmap(p.cast(), len) }.unwrap();
    assert_eq!(
        &std::fs::read(dir.path().join("f")).unwrap()[1000..1005],
        b"MAPPD"
    );

    // A write-only open hands out no descriptor.
    let wo = svc.fs.open_with("f", OpenOptions::new().write(true)).unwrap();
    assert_eq!(errno(wo.map_descriptor()), 13);
}

/// A read-only export maps files shared too, through a descriptor that
/// can change nothing: the file on a read-only mount of its own, made
/// directly where the service may clone mounts and in a user namespace of
/// its own where it may not (forced here by a knob, since CI runs as
/// root). The mapping is the host's page cache, and windows go on.
#[test]
fn a_read_only_export_maps_shared_through_a_descriptor_that_changes_nothing() {
    use rustix::mm::{mmap, munmap, MapFlags, ProtFlags};
    use std::os::unix::fs::{FileExt, PermissionsExt};
    for env in [&[][..], &[("LINTEL_FS_RO_VIA_USERNS", "1")][..]] {
        let ro = tempfile::tempdir().unwrap();
        std::fs::write(ro.path().join("f"), vec![b'a'; 10_000]).unwrap();
        let svc = FsService::start_env(ro.path(), true, lintel_fs::LOCK_TIMEOUT, env);
        let f = svc.fs.open("f").unwrap();
        let fd = f.map_descriptor().unwrap_or_else(|e| panic!("{env:?}: {e}"));
        // SAFETY: a fresh read-only shared mapping; the kernel picks the
        // address, and nothing else in this process uses the range.
        let p = unsafe {
            mmap(
                std::ptr::null_mut(),
                10_000,
                ProtFlags::READ,
                MapFlags::SHARED,
                &fd,
                0,
            )
        }
        .unwrap() as *const u8;
        // SAFETY: `p` maps 10,000 readable bytes until the `munmap` below.
        let map = unsafe { std::slice::from_raw_parts(p, 10_000) };
        assert!(map.iter().all(|&b| b == b'a'));
        // The host changes the file in place: the mapping sees it at once.
        std::fs::OpenOptions::new()
            .write(true)
            .open(ro.path().join("f"))
            .unwrap()
            .write_all_at(b"HOST", 500)
            .unwrap();
        assert_eq!(&map[500..504], b"HOST", "{env:?}: one copy, the host's");
        // Nothing about the file can be changed through the descriptor.
        let erofs = Some(EROFS);
        let raw = |r: rustix::io::Result<()>| r.err().map(|e| e.raw_os_error());
        assert_eq!(
            raw(rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o777))),
            erofs,
            "{env:?}"
        );
        assert_eq!(raw(rustix::fs::fchown(&fd, None, None)), erofs, "{env:?}");
        let now = rustix::fs::Timestamps {
            last_access: rustix::fs::Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            },
            last_modification: rustix::fs::Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            },
        };
        assert_eq!(raw(rustix::fs::futimens(&fd, &now)), erofs, "{env:?}");
        assert!(
            rustix::io::write(&fd, b"x").is_err(),
            "{env:?}: opened for reading only"
        );
        let reopen = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        assert_eq!(
            std::fs::OpenOptions::new()
                .write(true)
                .open(&reopen)
                .err()
                .and_then(|e| e.raw_os_error()),
            erofs,
            "{env:?}: nor reopened for writing"
        );
        let mode = std::fs::metadata(ro.path().join("f"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644, "{env:?}: the file is as it was");
        // SAFETY: unmapping the mapping made above, no longer used.
        unsafe { munmap(p as *mut _, 10_000) }.unwrap();
        // The file's windows go on (nobody writes through the service).
        let mut buf = [0u8; 4];
        assert!(f.is_mapped());
        assert_eq!(f.read_at(&mut buf, 500).unwrap(), 4);
        let before = svc.fs.counters().unwrap();
        f.read_at(&mut buf, 600).unwrap();
        assert_eq!(
            calls(&before, &svc.fs.counters().unwrap()),
            0,
            "{env:?}: still windowed"
        );
        // A directory is not mapped.
        std::fs::create_dir(ro.path().join("d")).unwrap();
        assert_eq!(
            errno(svc.fs.open("d").unwrap().map_descriptor()),
            EINVAL,
            "{env:?}"
        );
    }
}

/// A spliced read given up on (its deadline passed while the service
/// waited on a client that keeps the file) leaves nothing in its pipe: the
/// service's late splice must not become the bytes of a later read.
#[test]
fn a_spliced_read_given_up_leaves_nothing_behind() {
    let data: Vec<u8> = (0..600_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
        .collect();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), &data).unwrap();
    let svc = FsService::start_with(dir.path(), false, Duration::from_millis(500));
    let bad = FsClientPeer::start(svc.fs.door());
    let copy = OpenOptions::new()
        .read(true)
        .io_path(lintel_fs::IoPath::Copy)
        .clone();
    let f = svc.fs.open_with("f", &copy).unwrap();
    let mut buf = vec![0u8; 100_000];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), buf.len(), "the pipe is attached");

    // A client takes the file's share lock and keeps it: the service waits
    // out its timeout before it evicts it and splices.
    bad.peer.misbehave(b"f".to_vec(), 0).unwrap();
    let late = lintel::deadline::within(Duration::from_millis(50), || f.read_at(&mut buf, 0));
    assert!(late.is_err(), "the deadline passed first");
    assert!(
        lintel_tests::eventually(Duration::from_secs(10), || bad.peer.misbehaved_probe().unwrap()
            == (EBADF, EBADF)),
        "the client in the way is evicted"
    );
    std::thread::sleep(Duration::from_millis(200)); // the late splice lands
    assert_eq!(f.read_at(&mut buf, 300_000).unwrap(), buf.len());
    assert!(buf == data[300_000..400_000], "a later read gets its own bytes");
}

/// Two small writes far apart into an existing file change those bytes
/// and no other: the window between them, which nobody read or wrote,
/// keeps its bytes on the host (it once came back as zeros).
#[test]
fn writes_far_apart_in_an_existing_file_change_no_other_byte() {
    for io in [
        lintel_fs::IoPath::Auto,
        lintel_fs::IoPath::Mapped,
        lintel_fs::IoPath::Copy,
    ] {
        both_placements(|fs, root| {
            use std::os::unix::fs::FileExt;
            let mut want = lintel_tests::noise(0x5eed, 300_000);
            std::fs::write(root.join("f"), &want).unwrap();
            let f = fs
                .open_with("f", OpenOptions::new().read(true).write(true).io_path(io))
                .unwrap();
            f.write_all_at(&[0xAA; 10], 250_000).unwrap();
            f.write_all_at(&[0xBB; 10], 10).unwrap();
            f.sync_all().unwrap();
            f.close().unwrap();
            want[250_000..250_010].fill(0xAA);
            want[10..20].fill(0xBB);
            let host = std::fs::read(root.join("f")).unwrap();
            assert_eq!(host.len(), want.len(), "{io:?}");
            let first = host.iter().zip(&want).position(|(a, b)| a != b);
            assert_eq!(
                first, None,
                "{io:?}: the host file differs from byte {first:?} on"
            );
            assert_eq!(
                fs.read("f").unwrap(),
                want,
                "{io:?}: read back through the service"
            );
        });
    }
}

/// One-byte reads on the copy path move the shared offset by one byte
/// each and return the bytes in order (the service once read ahead into
/// its reply buffer's spare room and moved the offset that far).
#[test]
fn small_copy_path_reads_move_the_offset_by_what_they_read() {
    both_placements(|fs, root| {
        let data = lintel_tests::noise(7, 4000);
        std::fs::write(root.join("f"), &data).unwrap();
        let copy = OpenOptions::new()
            .read(true)
            .io_path(lintel_fs::IoPath::Copy)
            .clone();
        let opened = fs.open_with("f", &copy).unwrap();
        let passed = lintel_fs::File::from_door(fs.open_with("f", &copy).unwrap().door().clone());
        for mut f in [opened, passed] {
            f.seek(SeekFrom::Start(1000)).unwrap();
            let mut got = Vec::new();
            for _ in 0..10 {
                let mut b = [0u8; 1];
                assert_eq!(f.read(&mut b).unwrap(), 1);
                got.push(b[0]);
            }
            assert_eq!(got, data[1000..1010]);
            assert_eq!(f.stream_position().unwrap(), 1010);
            f.seek(SeekFrom::Start(0)).unwrap();
            let mut b = [0u8; 1];
            f.read_exact(&mut b).unwrap();
            assert_eq!(f.stream_position().unwrap(), 1, "one byte read, one byte on");
        }
    });
}

/// A client appending records through its window and killed at a random
/// point: the file holds every record it finished (whole records, its
/// bytes, on the host too), and the next reader is not kept waiting for
/// the share-lock timeout. Killed mid-operation, it once lost everything
/// since its token was granted (the service took the dead client for a
/// misbehaving one and evicted it), leaving an empty file.
#[test]
fn a_mapped_writer_killed_mid_write_keeps_every_record_it_finished() {
    for round in 0..12u64 {
        let dir = tempfile::tempdir().unwrap();
        let svc = FsService::start(dir.path(), false);
        let mut writer = FsClientPeer::start(svc.fs.door());
        let fw = writer
            .peer
            .open(b"f".to_vec(), O_RDWR | O_CREAT | O_APPEND, MAPPED)
            .unwrap();
        assert!(writer.peer.is_mapped(fw).unwrap());
        writer
            .peer
            .write_in_background(fw, vec![b'w'; 1000], 1_000_000)
            .unwrap();
        let goal = 2000 + round * 250;
        assert!(lintel_tests::eventually(Duration::from_secs(60), || {
            writer.peer.written().unwrap() >= goal
        }));
        let finished = writer.peer.written().unwrap();
        writer.kill();
        let size = svc.fs.stat("f").unwrap().size;
        assert!(
            size >= finished * 1000,
            "round {round}: {finished} records finished, {size} bytes kept"
        );
        assert!(size.is_multiple_of(1000), "round {round}: whole records only");
        let all = svc.fs.read("f").unwrap();
        assert_eq!(all.len() as u64, size);
        assert!(
            all.iter().all(|&b| b == b'w'),
            "round {round}: no zeros where data was"
        );
        let host = std::fs::read(dir.path().join("f")).unwrap();
        assert_eq!(host, all, "round {round}: written back to the host");
        assert_eq!(
            svc.fs.counters().unwrap().evictions,
            0,
            "round {round}: a dead client is not a misbehaving one"
        );
    }
}

/// The service killed while a client appends records through its window
/// (or through the copy path): every record the client finished is on
/// the host afterwards, whole, as a finished `write(2)` outlives any
/// process on Linux. Through a window, such records once lived only in
/// the dead service's cache, and the host file stayed empty.
#[test]
fn a_killed_service_loses_no_finished_write() {
    for (round, io) in [AUTO, MAPPED, COPY, AUTO, MAPPED, AUTO, MAPPED, MAPPED]
        .into_iter()
        .enumerate()
    {
        let dir = tempfile::tempdir().unwrap();
        let mut svc = FsService::start(dir.path(), false);
        let writer = FsClientPeer::start(svc.fs.door());
        let fw = writer
            .peer
            .open(b"f".to_vec(), O_RDWR | O_CREAT | O_APPEND, io)
            .unwrap();
        writer
            .peer
            .write_in_background(fw, vec![b'w'; 1000], 1_000_000)
            .unwrap();
        let goal = 600 + 400 * round as u64;
        assert!(lintel_tests::eventually(Duration::from_secs(60), || {
            writer.peer.written().unwrap() >= goal
        }));
        svc.kill();
        // The writer stops at its first failed write; whatever it
        // finished must reach the host. The one write in flight failed
        // (`PeerDied`) and may have landed in part: the kernel cuts a
        // `write` short when its writer is killed, here the service.
        let host = dir.path().join("f");
        let mut last = (0, 0);
        let kept = lintel_tests::eventually(Duration::from_secs(60), || {
            let finished = writer.peer.written().unwrap();
            let bytes = std::fs::read(&host).unwrap();
            last = (finished, bytes.len() as u64);
            bytes.len() as u64 >= finished * 1000
                && bytes.len() as u64 <= (finished + 1) * 1000
                && bytes.iter().all(|&b| b == b'w')
        });
        assert!(
            kept,
            "round {round}, path {io}: {} records finished, {} bytes on the host",
            last.0, last.1
        );
    }
}

/// A descriptor to `exec` a served file by: refused as `execve` refuses
/// the host file (asked of Linux, by starting it), and holding what a
/// client wrote through its window (the token is taken back first).
#[test]
fn an_exec_descriptor_is_refused_as_execve_refuses_and_holds_window_writes() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let put = |rel: &str, mode: u32| {
        std::fs::write(dir.path().join(rel), b"#!/bin/sh\necho hi\n").unwrap();
        std::fs::set_permissions(dir.path().join(rel), std::fs::Permissions::from_mode(mode)).unwrap();
    };
    put("prog", 0o755);
    put("plain", 0o644);
    std::fs::create_dir(dir.path().join("d")).unwrap();
    std::os::unix::fs::symlink("prog", dir.path().join("link")).unwrap();
    let svc = FsService::start(dir.path(), false);
    for rel in ["plain", "d", "missing", "plain/below", "d/missing"] {
        let native = std::process::Command::new(dir.path().join(rel))
            .spawn()
            .err()
            .and_then(|e| e.raw_os_error())
            .unwrap_or(0);
        assert_ne!(native, 0, "{rel} runs natively");
        assert_eq!(errno(svc.fs.exec_descriptor(rel)), native, "{rel}");
    }

    let other = FsClientPeer::start(svc.fs.door());
    let fo = other.peer.open(b"prog".to_vec(), O_RDWR, AUTO).unwrap();
    assert!(other.peer.is_mapped(fo).unwrap());
    other.peer.write_at(fo, 10, b"window").unwrap();
    for rel in ["prog", "link"] {
        let fd = svc.fs.exec_descriptor(rel).unwrap();
        let mut head = [0u8; 16];
        assert_eq!(rustix::io::pread(&fd, &mut head, 0).unwrap(), 16);
        assert_eq!(
            &head[10..16],
            b"window",
            "{rel}: the window's bytes were written back first"
        );
        assert_eq!(
            rustix::fs::fcntl_getfl(&fd).unwrap() & rustix::fs::OFlags::ACCMODE,
            rustix::fs::OFlags::RDONLY,
            "read-only"
        );
    }
}

/// A vectored call checks its offset against its buffers' whole length
/// before it moves anything, as Linux does: 10 bytes short of the largest
/// offset (a file on tmpfs may sit there), a `readv` and a `writev` of 1
/// and 19 bytes answer as the kernel does for the same file natively, and
/// nothing is written. (Each buffer's own read or write fit; the first
/// `writev` wrote its first byte.)
#[test]
fn vectored_calls_near_the_largest_offset_answer_as_linux() {
    use std::io::{IoSlice, IoSliceMut, Read, Seek, SeekFrom, Write};
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("no /dev/shm (tmpfs): ext4 refuses such offsets at the seek");
        return;
    }
    let at = i64::MAX as u64 - 10;
    let native_dir = tempfile::tempdir_in(shm).unwrap();
    let mut native = std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(native_dir.path().join("f"))
        .unwrap();
    native.seek(SeekFrom::Start(at)).unwrap();
    let (mut a, mut b) = ([0u8; 1], [0u8; 19]);
    let read = native.read_vectored(&mut [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)]);
    let wrote = native.write_vectored(&[IoSlice::new(&a), IoSlice::new(&b)]);
    let (read, wrote) = (
        read.map_err(|e| e.raw_os_error()),
        wrote.map_err(|e| e.raw_os_error()),
    );
    assert_eq!(
        read,
        Err(Some(22)),
        "Linux: readv past the largest offset is EINVAL"
    );
    for served in [false, true] {
        let dir = tempfile::tempdir_in(shm).unwrap();
        let svc;
        let fs = if served {
            svc = FsService::start(dir.path(), false);
            svc.fs.clone()
        } else {
            Fs::from_door(lintel_fs::Service::new(dir.path(), false).unwrap().into_door())
        };
        let f = fs.open_with("f", &rw()).unwrap();
        assert_eq!(f.seek_shared(SeekFrom::Start(at)).unwrap(), at);
        let r = f.read_vectored_shared(&mut [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)]);
        let w = f.write_vectored_shared(&[IoSlice::new(&a), IoSlice::new(&b)]);
        let errno_of = |e: FsError| Some(e.errno());
        assert_eq!(
            r.map_err(errno_of),
            read,
            "readv, served by another process: {served}"
        );
        assert_eq!(
            w.map_err(errno_of),
            wrote,
            "writev, served by another process: {served}"
        );
        assert_eq!(
            f.seek_shared(SeekFrom::Current(0)).unwrap(),
            at,
            "the offset did not move"
        );
        assert_eq!(
            std::fs::metadata(dir.path().join("f")).unwrap().len(),
            0,
            "nothing was written"
        );
    }
}
