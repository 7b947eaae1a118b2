//! Generated clients keep the trait's own parameter names, whatever they
//! are: names the generated code also uses for its locals (`r`, `reply`,
//! `e`, `__bytes`, …) must not change what a call sends, and patterns that
//! are not plain names (`mut x`, `_`, tuples) still work. Each call runs
//! co-located and marshalled (through a forwarding door, so the client
//! encodes and the server's dispatch decodes).

#![allow(non_snake_case, clippy::too_many_arguments)]

use lintel::stub::{StubError, Wire};
use lintel::{Door, Fault, Reply, Request};

#[derive(Debug, Clone, PartialEq, Wire)]
pub enum ClashError {
    Stub(StubError),
}

impl From<StubError> for ClashError {
    fn from(e: StubError) -> Self {
        ClashError::Stub(e)
    }
}

#[lintel::interface]
pub trait Clash {
    /// Parameters named like the locals of the client and the dispatch.
    fn locals(
        &self,
        r: u32,
        reply: &[u8],
        e: &mut Vec<u8>,
        b: u64,
        d: u8,
        n: u16,
        method: &str,
        req: i32,
        v: bool,
    ) -> Result<String, ClashError>;
    /// Parameters named like the client's double-underscore locals.
    fn underscored(
        &self,
        __bytes: u32,
        __doors: u32,
        __items: u32,
        __held: u32,
        __w: u32,
        __r: &mut [u8],
        __res: u32,
        __out: &mut Vec<u8>,
    ) -> Result<u32, ClashError>;
    /// More of them, and the names the generated parameters used to have.
    fn more(
        &self,
        __local: u8,
        __srv: u8,
        __call: u8,
        #[inout] __reply: &mut Vec<u8>,
        __v: u8,
        _datum: u8,
        __a0: u8,
        __a1: u8,
        METHOD: u8,
    ) -> Result<u32, ClashError>;
    /// Patterns that are not plain names, in a method with a default body.
    fn patterns(&self, (a, b): (u32, u32), mut x: u32, _: u32) -> Result<u32, ClashError> {
        x += 1;
        Ok(a * 100 + b * 10 + x)
    }
    /// Two ignored parameters.
    fn ignored(&self, _: u8, _: &str) -> Result<(), ClashError>;
}

struct Imp;

impl Clash for Imp {
    fn locals(
        &self,
        r: u32,
        reply: &[u8],
        e: &mut Vec<u8>,
        b: u64,
        d: u8,
        n: u16,
        method: &str,
        req: i32,
        v: bool,
    ) -> Result<String, ClashError> {
        e.extend_from_slice(reply);
        e.push(d);
        Ok(format!("{r} {b} {n} {method} {req} {v}"))
    }
    fn underscored(
        &self,
        a: u32,
        b: u32,
        c: u32,
        d: u32,
        e: u32,
        f: &mut [u8],
        g: u32,
        h: &mut Vec<u8>,
    ) -> Result<u32, ClashError> {
        f.iter_mut().for_each(|x| *x += 1);
        h.extend_from_slice(b"out");
        Ok(a + 10 * b + 100 * c + 1000 * d + 10_000 * e + 100_000 * g)
    }
    fn more(
        &self,
        a: u8,
        b: u8,
        c: u8,
        d: &mut Vec<u8>,
        e: u8,
        f: u8,
        g: u8,
        h: u8,
        i: u8,
    ) -> Result<u32, ClashError> {
        d.push(b'!');
        Ok([a, b, c, e, f, g, h, i].iter().fold(0, |s, &x| s * 10 + x as u32))
    }
    fn ignored(&self, _: u8, _: &str) -> Result<(), ClashError> {
        Ok(())
    }
}

fn check(c: &ClashClient) {
    let mut e = b"stale".to_vec();
    let s = c.locals(1, b"ab", &mut e, 2, b'c', 3, "m", -4, true).unwrap();
    assert_eq!(s, "1 2 3 m -4 true");
    assert_eq!(e, b"abc");

    let mut slice = [1u8, 2];
    let mut out = b"stale".to_vec();
    assert_eq!(c.underscored(1, 2, 3, 4, 5, &mut slice, 6, &mut out), Ok(654_321));
    assert_eq!(slice, [2, 3]);
    assert_eq!(out, b"out");

    let mut inout = b"hi".to_vec();
    assert_eq!(c.more(1, 2, 3, &mut inout, 4, 5, 6, 7, 8), Ok(12_345_678));
    assert_eq!(inout, b"hi!");

    assert_eq!(c.patterns((1, 2), 3, 9), Ok(124));
    assert_eq!(c.ignored(0, ""), Ok(()));
}

#[test]
fn colocated_calls_keep_their_arguments() {
    check(&ClashServer::serve(Imp));
}

#[test]
fn marshalled_calls_keep_their_arguments() {
    let inner = ClashServer::door(Imp);
    let fwd = Door::create(0, move |req: Request<'_>, reply: &mut Reply| {
        inner.call(req.data, &req.doors, reply).map_err(|_| Fault(1))
    });
    check(&ClashClient::from_door(fwd));
}
