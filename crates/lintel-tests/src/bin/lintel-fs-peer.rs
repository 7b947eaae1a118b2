//! A domain the file-service tests start: `serve ROOT [read-only]` exports
//! ROOT and offers its door; `client` takes the export door it is offered
//! and serves `lintel_tests::fs::FsPeer`, doing file operations on the
//! test's behalf.
#![forbid(unsafe_code)]

use std::sync::Arc;

use lintel::Door;
use lintel_fs::{File, Fs, FsError, Stat};
use lintel_tests::fs::{FsPeer, FsPeerServer};
use parking_lot::Mutex;

fn main() {
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let args: Vec<String> = std::env::args().collect();
    let _keep = match args.get(1).map(String::as_str) {
        Some("serve") => {
            let root = args.get(2).expect("serve ROOT");
            let read_only = args.get(3).map(String::as_str) == Some("read-only");
            let door = lintel_fs::Service::new(root, read_only)
                .expect("export the root")
                .into_door();
            lintel::boot::join(std::slice::from_ref(&door)).expect("join the test");
            Some(door)
        }
        Some("client") => {
            let mut door = None;
            // The export is kept before the control door is offered: the
            // test may call as soon as it has the door.
            lintel::boot::join_with(|given| {
                let export = given.first().cloned().map(Fs::from_door);
                let d = FsPeerServer::door(Client {
                    export,
                    files: Mutex::new(Vec::new()),
                });
                door = Some(d.clone());
                vec![d]
            })
            .expect("join the test");
            door
        }
        other => panic!("unknown role {other:?}"),
    };
    loop {
        std::thread::park();
    }
}

struct Client {
    export: Option<Fs>,
    files: Mutex<Vec<Arc<File>>>,
}

impl Client {
    fn file(&self, n: u32) -> Result<Arc<File>, FsError> {
        self.files.lock().get(n as usize).cloned().ok_or(FsError::Closed)
    }

    fn keep(&self, f: File) -> u32 {
        let mut files = self.files.lock();
        files.push(Arc::new(f));
        (files.len() - 1) as u32
    }
}

impl FsPeer for Client {
    fn open(&self, path: Vec<u8>, flags: u32) -> Result<u32, FsError> {
        use std::os::unix::ffi::OsStrExt;
        let fs = self.export.as_ref().ok_or(FsError::Closed)?;
        let path = std::ffi::OsStr::from_bytes(&path);
        let f = fs.open_with(
            path,
            lintel_fs::OpenOptions::new()
                .custom_flags(flags)
                .read(flags & 3 != 1)
                .write(flags & 3 != 0),
        )?;
        Ok(self.keep(f))
    }

    fn adopt(&self, file: Door) -> Result<u32, FsError> {
        Ok(self.keep(File::from_door(file)))
    }

    fn read(&self, file: u32, len: u32, out: &mut Vec<u8>) -> Result<(), FsError> {
        out.resize(len as usize, 0);
        let n = self.file(file)?.read_shared(out)?;
        out.truncate(n);
        Ok(())
    }

    fn write(&self, file: u32, data: &[u8]) -> Result<u64, FsError> {
        Ok(self.file(file)?.write_shared(data)? as u64)
    }

    fn read_at(&self, file: u32, at: u64, len: u32, out: &mut Vec<u8>) -> Result<(), FsError> {
        out.resize(len as usize, 0);
        let n = self.file(file)?.read_at(out, at)?;
        out.truncate(n);
        Ok(())
    }

    fn write_at(&self, file: u32, at: u64, data: &[u8]) -> Result<u64, FsError> {
        Ok(self.file(file)?.write_at(data, at)? as u64)
    }

    fn seek(&self, file: u32, whence: u8, delta: i64) -> Result<u64, FsError> {
        use std::io::SeekFrom;
        let pos = match whence {
            0 => SeekFrom::Start(delta as u64),
            1 => SeekFrom::Current(delta),
            _ => SeekFrom::End(delta),
        };
        self.file(file)?.seek_shared(pos)
    }

    fn stat(&self, file: u32) -> Result<Stat, FsError> {
        self.file(file)?.metadata()
    }

    fn truncate(&self, file: u32, len: u64) -> Result<(), FsError> {
        self.file(file)?.set_len(len)
    }

    fn sync(&self, file: u32) -> Result<(), FsError> {
        self.file(file)?.sync_all()
    }

    fn write_in_background(&self, file: u32, data: Vec<u8>, times: u32) -> Result<(), FsError> {
        let f = self.file(file)?;
        std::thread::spawn(move || {
            for _ in 0..times {
                if f.write_shared(&data).is_err() {
                    return;
                }
            }
        });
        Ok(())
    }
}
