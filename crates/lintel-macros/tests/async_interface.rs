//! One interface, served by an async implementation (`NotesAsyncServer`)
//! and by a blocking one, called by the awaited client (`NotesAsyncClient`)
//! and the blocking one (`NotesClient`): every pairing gives the same
//! results, co-located and with the server in another process (this test
//! binary started again as the peer).

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use lintel::stub::{StubError, Wire};

#[derive(Debug, Clone, PartialEq, Wire)]
pub enum NotesError {
    Missing,
    Stub(StubError),
}

impl From<StubError> for NotesError {
    fn from(e: StubError) -> Self {
        NotesError::Stub(e)
    }
}

#[lintel::interface]
pub trait Notes {
    /// Keep `text` under `key`; the number of notes kept.
    fn put(&self, key: &str, text: &[u8]) -> Result<u64, NotesError>;
    /// The note under `key`, into `out`.
    fn get(&self, key: &str, out: &mut Vec<u8>) -> Result<(), NotesError>;
    /// The keys, after `wait_ms` milliseconds.
    fn keys(&self, wait_ms: u64) -> Result<Vec<String>, NotesError>;
}

#[derive(Default)]
struct AsyncNotes(Mutex<HashMap<String, Vec<u8>>>);

impl NotesAsync for AsyncNotes {
    async fn put(&self, key: &str, text: &[u8]) -> Result<u64, NotesError> {
        tokio::task::yield_now().await;
        let mut m = self.0.lock().unwrap();
        m.insert(key.into(), text.into());
        Ok(m.len() as u64)
    }
    async fn get(&self, key: &str, out: &mut Vec<u8>) -> Result<(), NotesError> {
        let m = self.0.lock().unwrap();
        out.extend_from_slice(m.get(key).ok_or(NotesError::Missing)?);
        Ok(())
    }
    async fn keys(&self, wait_ms: u64) -> Result<Vec<String>, NotesError> {
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        let mut k: Vec<String> = self.0.lock().unwrap().keys().cloned().collect();
        k.sort();
        Ok(k)
    }
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn exercise_async(c: &NotesAsyncClient) {
    assert_eq!(c.put("a", b"one").await, Ok(1));
    assert_eq!(c.put("b", b"two").await, Ok(2));
    let mut out = b"stale".to_vec();
    c.get("a", &mut out).await.unwrap();
    assert_eq!(out, b"one");
    assert_eq!(c.get("zz", &mut out).await, Err(NotesError::Missing));
    assert_eq!(c.keys(20).await, Ok(vec!["a".to_string(), "b".to_string()]));
}

fn exercise_blocking(c: &NotesClient) {
    assert_eq!(c.put("c", b"three"), Ok(3));
    let mut out = Vec::new();
    c.get("c", &mut out).unwrap();
    assert_eq!(out, b"three");
    assert_eq!(c.get("zz", &mut out), Err(NotesError::Missing));
    assert_eq!(c.keys(5).map(|k| k.len()), Ok(3));
}

#[test]
fn an_async_implementation_served_here_answers_both_clients() {
    let rt = multi_thread();
    let door = NotesAsyncServer::new(AsyncNotes::default()).into_door_on(rt.handle().clone());
    let awaited = NotesAsyncClient::from_door(door.clone());
    let caller = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    caller.block_on(exercise_async(&awaited));
    // From a thread outside any runtime, the blocking client blocks on it.
    exercise_blocking(&NotesClient::from_door(door));
}

#[test]
fn a_blocking_implementation_answers_the_awaited_client() {
    #[derive(Default)]
    struct Blocking(Mutex<HashMap<String, Vec<u8>>>);
    impl Notes for Blocking {
        fn put(&self, key: &str, text: &[u8]) -> Result<u64, NotesError> {
            let mut m = self.0.lock().unwrap();
            m.insert(key.into(), text.into());
            Ok(m.len() as u64)
        }
        fn get(&self, key: &str, out: &mut Vec<u8>) -> Result<(), NotesError> {
            out.extend_from_slice(self.0.lock().unwrap().get(key).ok_or(NotesError::Missing)?);
            Ok(())
        }
        fn keys(&self, wait_ms: u64) -> Result<Vec<String>, NotesError> {
            std::thread::sleep(Duration::from_millis(wait_ms));
            let mut k: Vec<String> = self.0.lock().unwrap().keys().cloned().collect();
            k.sort();
            Ok(k)
        }
    }
    let client: NotesAsyncClient = NotesServer::serve(Blocking::default()).into();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(exercise_async(&client));
}

/// The peer's side; does nothing unless started by the test below.
#[test]
#[ignore = "run by the other tests as their peer process"]
fn peer() {
    if !lintel::boot::is_spawned() {
        return;
    }
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let rt = multi_thread();
    let door = NotesAsyncServer::new(AsyncNotes::default()).into_door_on(rt.handle().clone());
    let _parent = lintel::boot::join(&[door]).expect("join");
    loop {
        std::thread::park();
    }
}

#[test]
fn an_async_implementation_in_another_process_answers_both_clients() {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["peer", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .stdout(Stdio::null());
    let s = lintel::boot::spawn(&mut cmd, &[]).expect("spawn peer");
    let mut child = s.child;
    let door = s.doors.into_iter().next().expect("the peer offers a door");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(exercise_async(&NotesAsyncClient::from_door(door.clone())));
    exercise_blocking(&NotesClient::from_door(door));
    let _ = child.kill();
    let _ = child.wait();
}
