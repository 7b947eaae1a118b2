//! A test interface exercising every parameter kind, its implementation,
//! and one conformance routine run against every placement.

#![allow(dead_code)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use lintel::stub::{StubError, Wire};
use std::os::fd::OwnedFd;

use lintel::{Buffer, CallError, Door, Loan, Sealed};

#[derive(Debug, Clone, PartialEq, Wire)]
pub enum ProbeError {
    Refused(String),
    Code { code: u32, detail: Vec<u16> },
    Stub(StubError),
}

impl From<StubError> for ProbeError {
    fn from(e: StubError) -> Self {
        ProbeError::Stub(e)
    }
}

impl ProbeError {
    pub fn call(&self) -> Option<&CallError> {
        match self {
            ProbeError::Stub(e) => e.call_error(),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Wire)]
pub struct Point {
    pub x: i32,
    pub y: i32,
}

#[derive(Debug, Clone, PartialEq, Wire)]
pub struct Tagged<T>(pub T, pub Option<char>);

#[lintel::interface]
pub trait Probe {
    fn null(&self) -> Result<(), ProbeError>;
    fn add(&self, a: u64, b: i32, neg: bool, f: f64) -> Result<f64, ProbeError>;
    fn point(&self, p: Point, arr: [u8; 4], t: Tagged<u16>) -> Result<(Point, u32), ProbeError>;
    fn echo_bytes(&self, data: &[u8], out: &mut Vec<u8>) -> Result<usize, ProbeError>;
    fn shout(&self, s: &str) -> Result<String, ProbeError>;
    fn inc_slice(&self, buf: &mut [u8]) -> Result<(), ProbeError>;
    fn append(&self, #[inout] buf: &mut Vec<u8>, extra: &[u8]) -> Result<u32, ProbeError>;
    fn fail(&self, how: u8) -> Result<u8, ProbeError>;
    fn make_counter(&self, start: u64) -> Result<CounterClient, ProbeError>;
    fn call_counter(&self, c: CounterClient, times: u32) -> Result<u64, ProbeError>;
    fn door_echo(&self, d: Door, c: Option<CounterClient>) -> Result<(Door, bool), ProbeError>;
    fn big(&self, n: u32, out: &mut Vec<u8>) -> Result<(), ProbeError>;
    fn revoke_counters(&self) -> Result<u32, ProbeError>;
    fn last_ptr(&self) -> Result<u64, ProbeError>;
    fn panics(&self) -> Result<(), ProbeError>;
    fn pid(&self) -> Result<u32, ProbeError>;
    /// Lengths of a loan and a snapshot passed by reference, a plain value
    /// between them, and the sum of their bytes (copied out of the loan).
    fn by_reference(
        &self,
        #[buffer] loan: Buffer,
        tag: u8,
        #[buffer] snap: Sealed,
    ) -> Result<(u64, u8, u64, u64), ProbeError>;
    /// File descriptors both ways: appends `!` to `file`, returns a new
    /// file holding its bytes reversed, and the bytes of `extra` (passed
    /// as a `#[buffer]` parameter).
    fn descriptors(&self, file: OwnedFd, #[buffer] extra: OwnedFd) -> Result<(OwnedFd, Vec<u8>), ProbeError>;
    /// The time left before the call's deadline, in ms (`u64::MAX`: none).
    fn remaining_ms(&self) -> Result<u64, ProbeError>;
    /// Sleeps `ms` (not alertably), then returns it.
    fn sleep_ms(&self, ms: u64) -> Result<u64, ProbeError>;
    /// The number of items (which take no bytes) it was given.
    fn count_units(&self, units: Vec<()>) -> Result<u64, ProbeError>;
}

#[lintel::interface]
pub trait Counter {
    fn next(&self) -> Result<u64, ProbeError>;
}

/// A newer version of `Probe`: a client of it calling an old server.
#[lintel::interface]
pub trait ProbeV2 {
    fn null(&self) -> Result<(), ProbeError>;
    fn added_later(&self, x: u32) -> Result<u32, ProbeError>;
}

pub struct Count(pub AtomicU64);

impl Counter for Count {
    fn next(&self) -> Result<u64, ProbeError> {
        Ok(self.0.fetch_add(1, SeqCst))
    }
}

#[derive(Default)]
pub struct ProbeImpl {
    made: Mutex<Vec<Door>>,
    last_ptr: AtomicU64,
}

impl Probe for ProbeImpl {
    fn null(&self) -> Result<(), ProbeError> {
        Ok(())
    }
    fn add(&self, a: u64, b: i32, neg: bool, f: f64) -> Result<f64, ProbeError> {
        let s = a as f64 + b as f64 + f;
        Ok(if neg { -s } else { s })
    }
    fn point(&self, p: Point, arr: [u8; 4], t: Tagged<u16>) -> Result<(Point, u32), ProbeError> {
        let q = Point {
            x: p.y + t.0 as i32,
            y: p.x + t.1.map_or(0, |c| c as i32),
        };
        Ok((q, u32::from_le_bytes(arr)))
    }
    fn echo_bytes(&self, data: &[u8], out: &mut Vec<u8>) -> Result<usize, ProbeError> {
        self.last_ptr.store(data.as_ptr() as u64, SeqCst);
        out.extend_from_slice(data);
        Ok(data.len())
    }
    fn shout(&self, s: &str) -> Result<String, ProbeError> {
        Ok(s.to_uppercase())
    }
    fn inc_slice(&self, buf: &mut [u8]) -> Result<(), ProbeError> {
        buf.iter_mut().for_each(|b| *b = b.wrapping_add(1));
        Ok(())
    }
    fn append(&self, buf: &mut Vec<u8>, extra: &[u8]) -> Result<u32, ProbeError> {
        buf.extend_from_slice(extra);
        Ok(buf.len() as u32)
    }
    fn fail(&self, how: u8) -> Result<u8, ProbeError> {
        match how {
            0 => Ok(0),
            1 => Err(ProbeError::Refused("no".into())),
            2 => Err(ProbeError::Code {
                code: 7,
                detail: vec![1, 2, 3],
            }),
            _ => Err(ProbeError::Stub(StubError::Call(CallError::Revoked))),
        }
    }
    fn make_counter(&self, start: u64) -> Result<CounterClient, ProbeError> {
        let c = CounterServer::serve(Count(AtomicU64::new(start)));
        self.made.lock().unwrap().push(c.door().clone());
        Ok(c)
    }
    fn call_counter(&self, c: CounterClient, times: u32) -> Result<u64, ProbeError> {
        let mut last = 0;
        for _ in 0..times {
            last = c.next()?;
        }
        Ok(last)
    }
    fn door_echo(&self, d: Door, c: Option<CounterClient>) -> Result<(Door, bool), ProbeError> {
        Ok((d, c.is_some()))
    }
    fn big(&self, n: u32, out: &mut Vec<u8>) -> Result<(), ProbeError> {
        out.resize(n as usize, 0xab);
        Ok(())
    }
    fn revoke_counters(&self) -> Result<u32, ProbeError> {
        let made = std::mem::take(&mut *self.made.lock().unwrap());
        for d in &made {
            d.revoke().unwrap();
        }
        Ok(made.len() as u32)
    }
    fn last_ptr(&self) -> Result<u64, ProbeError> {
        Ok(self.last_ptr.load(SeqCst))
    }
    fn panics(&self) -> Result<(), ProbeError> {
        panic!("probe asked to panic")
    }
    fn pid(&self) -> Result<u32, ProbeError> {
        Ok(std::process::id())
    }
    fn descriptors(&self, file: OwnedFd, extra: OwnedFd) -> Result<(OwnedFd, Vec<u8>), ProbeError> {
        let mut bytes = file_bytes(&file);
        rustix::io::pwrite(&file, b"!", bytes.len() as u64)
            .map_err(|e| ProbeError::Refused(e.to_string()))?;
        bytes.reverse();
        Ok((file_with(&bytes), file_bytes(&extra)))
    }
    fn remaining_ms(&self) -> Result<u64, ProbeError> {
        Ok(lintel::deadline::remaining().map_or(u64::MAX, |d| d.as_millis() as u64))
    }
    fn sleep_ms(&self, ms: u64) -> Result<u64, ProbeError> {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        Ok(ms)
    }
    fn count_units(&self, units: Vec<()>) -> Result<u64, ProbeError> {
        Ok(units.len() as u64)
    }
    fn by_reference(&self, loan: Buffer, tag: u8, snap: Sealed) -> Result<(u64, u8, u64, u64), ProbeError> {
        let bytes = match &loan {
            Buffer::Loaned(l) => l.to_vec(),
            Buffer::Loan(l) => l.as_slice().to_vec(),
            Buffer::Sealed(s) => s.as_slice().to_vec(),
            Buffer::Fd(_) => return Err(ProbeError::Refused("a descriptor".into())),
        };
        let sum = bytes.iter().chain(snap.as_slice()).map(|&b| b as u64).sum();
        Ok((loan.len() as u64, tag, snap.len() as u64, sum))
    }
}

/// All of a file's bytes, read from its start.
pub fn file_bytes(fd: &OwnedFd) -> Vec<u8> {
    let mut all = Vec::new();
    let mut chunk = [0u8; 256];
    while let Ok(n @ 1..) = rustix::io::pread(fd, &mut chunk, all.len() as u64) {
        all.extend_from_slice(&chunk[..n]);
    }
    all
}

/// A memfd holding `bytes`.
pub fn file_with(bytes: &[u8]) -> OwnedFd {
    let fd = rustix::fs::memfd_create("probe", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::io::pwrite(&fd, bytes, 0).unwrap();
    fd
}

/// Where the server runs, relative to the caller.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Placement {
    Colocated,
    Remote,
}

fn stub(e: &ProbeError) -> &StubError {
    match e {
        ProbeError::Stub(s) => s,
        other => panic!("expected a stub error, got {other:?}"),
    }
}

/// Every parameter kind and every error, with the same expectations
/// wherever the server is.
/// The message limit both domains of these tests set (the peer through
/// `LINTEL_MAX_MESSAGE`), so the size checks are exercised at a limit small
/// enough to reach.
pub const LIMIT: usize = 1 << 20;

pub fn exercise(p: &ProbeClient, placement: Placement) {
    lintel::set_max_message(LIMIT);
    let door = p.door().clone();
    assert_eq!(door.is_local(), placement == Placement::Colocated);
    let pid = p.pid().unwrap();
    assert_eq!(pid == std::process::id(), placement == Placement::Colocated);

    // Plain values.
    p.null().unwrap();
    assert_eq!(p.add(40, -3, false, 0.5), Ok(37.5));
    assert_eq!(p.add(1, 1, true, 1.0), Ok(-3.0));
    let (q, n) = p
        .point(Point { x: 1, y: 2 }, [1, 0, 0, 0], Tagged(10, Some('\u{1}')))
        .unwrap();
    assert_eq!(q, Point { x: 12, y: 2 });
    assert_eq!(n, 1);

    // In bytes, out buffer (cleared first, even if it held something).
    let mut out = b"stale".to_vec();
    let data: Vec<u8> = (0..=255u8).collect();
    assert_eq!(p.echo_bytes(&data, &mut out), Ok(256));
    assert_eq!(out, data);
    let same_memory = p.last_ptr().unwrap() == data.as_ptr() as u64;
    assert_eq!(
        same_memory,
        placement == Placement::Colocated,
        "co-located calls do not copy"
    );
    assert_eq!(p.echo_bytes(b"", &mut out), Ok(0));
    assert!(out.is_empty());

    // Strings.
    assert_eq!(p.shout("héllo").as_deref(), Ok("HÉLLO"));

    // In-out, fixed length and growable.
    let mut buf = [0u8, 1, 255];
    p.inc_slice(&mut buf).unwrap();
    assert_eq!(buf, [1, 2, 0]);
    let mut v = b"ab".to_vec();
    assert_eq!(p.append(&mut v, b"cd"), Ok(4));
    assert_eq!(v, b"abcd");

    // The service's own errors round-trip, including a stub error it
    // chose to return.
    assert_eq!(p.fail(0), Ok(0));
    assert_eq!(p.fail(1), Err(ProbeError::Refused("no".into())));
    assert_eq!(
        p.fail(2),
        Err(ProbeError::Code {
            code: 7,
            detail: vec![1, 2, 3]
        })
    );
    assert_eq!(
        p.fail(3),
        Err(ProbeError::Stub(StubError::Call(CallError::Revoked)))
    );

    // Typed doors as results and parameters, both directions.
    let c = p.make_counter(100).unwrap();
    assert_eq!(c.door().is_local(), placement == Placement::Colocated);
    assert_eq!(c.next(), Ok(100));
    assert_eq!(p.call_counter(c.clone(), 2), Ok(102));
    assert_eq!(c.next(), Ok(103));
    let mine = CounterServer::serve(Count(AtomicU64::new(5)));
    assert_eq!(p.call_counter(mine.clone(), 3), Ok(7));
    assert_eq!(mine.next(), Ok(8));
    let (back, had) = p.door_echo(door.clone(), Some(mine.clone())).unwrap();
    assert!(had);
    assert_eq!(ProbeClient::from_door(back).pid(), Ok(pid));
    let (back, had) = p.door_echo(door.clone(), None).unwrap();
    assert!(!had);
    assert_eq!(back.is_local(), placement == Placement::Colocated);
    // (A door of ours sent to a remote server and returned to us in the
    // reply is exercised by `own_door_returned` in cross_process.rs.)

    // Buffers by reference: a loan (a `Loaned` across domains, still our
    // `Loan` co-located) and a sealed snapshot, around a plain value.
    let mut loan = Loan::new(300_000).unwrap();
    loan.as_mut_slice().fill(2);
    let snap = Sealed::from_slice(&[3u8; 1000]).unwrap();
    assert_eq!(
        p.by_reference(Buffer::Loan(loan), 9, snap),
        Ok((300_000, 9, 1000, 600_000 + 3000))
    );

    // File descriptors, as arguments and in results, by value and as a
    // `#[buffer]` parameter: the receiver's descriptor names the same file.
    let file = file_with(b"abc");
    let (rev, extra) = p
        .descriptors(file.try_clone().unwrap(), file_with(b"xyz"))
        .unwrap();
    assert_eq!(file_bytes(&rev), b"cba");
    assert_eq!(extra, b"xyz");
    assert_eq!(file_bytes(&file), b"abc!", "the server wrote to our file");

    // Size limits: the same errors in both placements, at the message
    // limit (data above the vanilla path's 5 KiB travel in bulk).
    let huge = vec![0u8; LIMIT];
    let e = p.echo_bytes(&huge, &mut out).unwrap_err();
    assert!(
        matches!(
            stub(&e),
            StubError::Call(CallError::TooLarge {
                what: "arguments",
                ..
            })
        ),
        "{e:?}"
    );
    // Largest result that fits: tag, length, bytes.
    let max = (LIMIT - 1 - 4) as u32;
    p.big(max, &mut out).unwrap();
    assert_eq!(out.len(), max as usize);
    let e = p.big(max + 1, &mut out).unwrap_err();
    assert!(
        matches!(
            stub(&e),
            StubError::Call(CallError::TooLarge { what: "result", .. })
        ),
        "{e:?}"
    );
    // The result never arrived: the out buffer reads empty in both placements.
    assert!(out.is_empty(), "{placement:?}: out holds {} bytes", out.len());
    // Arguments that just fit: method number, length, bytes.
    let fits = vec![1u8; LIMIT - 4 - 4];
    let mut sink = Vec::new();
    assert_eq!(
        p.shout(std::str::from_utf8(&fits).unwrap()).map(|s| s.len()),
        Ok(fits.len())
    );
    let e = p
        .echo_bytes(&[fits.as_slice(), b"x"].concat(), &mut sink)
        .unwrap_err();
    assert!(
        matches!(stub(&e), StubError::Call(CallError::TooLarge { .. })),
        "{e:?}"
    );

    // A panic in the implementation is reported, and the server lives on.
    assert_eq!(p.panics().unwrap_err().call(), Some(&CallError::Panicked));
    p.null().unwrap();

    // A method the server's version lacks.
    let v2 = ProbeV2Client::from_door(door.clone());
    v2.null().unwrap();
    assert_eq!(
        v2.added_later(1),
        Err(ProbeError::Stub(StubError::UnknownMethod {
            interface: "ProbeV2".into(),
            method: "added_later".into()
        }))
    );

    // Malformed requests are refused before user code runs.
    let add = ProbeServer::METHODS.iter().find(|m| m.0 == "add").unwrap().1;
    let mut reply = lintel::Reply::new();
    let fault = CallError::Fault(lintel::stub::FAULT_BAD_REQUEST);
    assert_eq!(door.call(&add.to_le_bytes(), &[], &mut reply), Err(fault.clone()));
    assert_eq!(door.call(&[1, 2], &[], &mut reply), Err(fault.clone()));
    let null = lintel::stub::method_number("null");
    assert_eq!(
        door.call(&[&null.to_le_bytes()[..], &[0]].concat(), &[], &mut reply),
        Err(fault.clone())
    );
    assert_eq!(
        door.call(&null.to_le_bytes(), std::slice::from_ref(&door), &mut reply),
        Err(fault.clone())
    );
    let shout = lintel::stub::method_number("shout");
    let bad_utf8 = [&shout.to_le_bytes()[..], &1u32.to_le_bytes(), &[0xff]].concat();
    assert_eq!(door.call(&bad_utf8, &[], &mut reply), Err(fault));
    assert_eq!(
        door.call(&0xdead_beefu32.to_le_bytes(), &[], &mut reply),
        Err(CallError::Fault(lintel::stub::FAULT_UNKNOWN_METHOD))
    );
    // A well-formed raw call works.
    door.call(&null.to_le_bytes(), &[], &mut reply).unwrap();
    assert_eq!(reply.data, [0]);

    // Revocation is reported as the service's error.
    assert_eq!(p.revoke_counters(), Ok(1));
    assert_eq!(c.next().unwrap_err().call(), Some(&CallError::Revoked));
}

/// Deadlines and the item cap, with the same results wherever the server
/// is: a typed client over a bounded door (`with_timeout`) or under a
/// deadline scope runs its call under that deadline, fails it before it
/// runs once the deadline has passed, and gets `TimedOut` from a handler
/// that returns after it; a sequence argument over `stub::MAX_ITEMS` fails
/// with `StubError::TooManyItems`, naming the count and the cap.
pub fn deadlines_and_caps(p: &ProbeClient) {
    use std::time::Duration;
    let timed_out = ProbeError::Stub(StubError::Call(CallError::TimedOut));
    assert_eq!(p.remaining_ms(), Ok(u64::MAX), "no deadline");
    let bounded = ProbeClient::from_door(p.door().with_timeout(Duration::from_secs(60)));
    let left = bounded.remaining_ms().unwrap();
    assert!(
        left > 0 && left <= 60_000,
        "the handle's bound reaches the implementation: {left} ms"
    );
    let left = lintel::deadline::within(Duration::from_secs(30), || p.remaining_ms()).unwrap();
    assert!(
        left > 0 && left <= 30_000,
        "a scope's deadline reaches it: {left} ms"
    );
    let passed = ProbeClient::from_door(p.door().with_timeout(Duration::ZERO));
    assert_eq!(passed.null(), Err(timed_out.clone()), "a bound of zero");
    assert_eq!(
        lintel::deadline::within(Duration::ZERO, || p.null()),
        Err(timed_out.clone()),
        "a passed deadline"
    );
    let short = ProbeClient::from_door(p.door().with_timeout(Duration::from_millis(50)));
    assert_eq!(short.sleep_ms(200), Err(timed_out), "a handler that returns late");
    assert_eq!(short.sleep_ms(0), Ok(0), "one in time");

    let cap = lintel::stub::MAX_ITEMS;
    assert_eq!(p.count_units(vec![(); cap]), Ok(cap as u64), "at the cap");
    assert_eq!(
        p.count_units(vec![(); cap + 1]),
        Err(ProbeError::Stub(StubError::TooManyItems {
            interface: "Probe".into(),
            method: "count_units".into(),
            len: cap + 1,
            max: cap,
        })),
        "over the cap"
    );
    let msg = StubError::TooManyItems {
        interface: "Probe".into(),
        method: "count_units".into(),
        len: cap + 1,
        max: cap,
    }
    .to_string();
    assert!(
        msg.contains(&(cap + 1).to_string()) && msg.contains(&cap.to_string()),
        "{msg}"
    );
}
