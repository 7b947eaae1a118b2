//! The message limit of the calling domain: this test binary sets its own
//! (1 MiB) at the start of every test, so it has a file to itself.

use lintel::{CallError, Door, Reply, Request};
use lintel_tests::{m, Peer};

const LIMIT: usize = 1 << 20;

#[test]
fn our_limit_refuses_arguments_and_results_in_both_placements() {
    lintel::set_max_message(LIMIT);
    let peer = Peer::start("plain");
    let local = Door::create(0, |r: Request<'_>, reply: &mut Reply| {
        reply
            .data
            .extend((0..u64::from_le_bytes(r.data[..8].try_into().unwrap())).map(|i| i as u8));
        Ok(())
    });
    // Arguments above our limit: refused before anything is sent.
    let big = vec![0u8; LIMIT + 1];
    let want = CallError::TooLarge {
        what: "arguments",
        len: LIMIT + 1,
        max: LIMIT,
    };
    assert_eq!(peer.ctl.call(&big, &[], &mut Reply::new()).unwrap_err(), want);
    assert_eq!(local.call(&big, &[], &mut Reply::new()).unwrap_err(), want);
    // A result above our limit (the peer allows 1 GiB): refused before
    // anything is allocated for it, in both placements.
    let n = (LIMIT + 10) as u64;
    let mut reply = Reply::new();
    let e = lintel_tests::call(&peer.ctl, m::BIG, &n.to_le_bytes(), &[]).unwrap_err();
    assert_eq!(
        e,
        CallError::TooLarge {
            what: "result",
            len: LIMIT + 10,
            max: LIMIT
        }
    );
    let e = local.call(&n.to_le_bytes(), &[], &mut reply).unwrap_err();
    assert_eq!(
        e,
        CallError::TooLarge {
            what: "result",
            len: LIMIT + 10,
            max: LIMIT
        }
    );
    assert!(reply.data.is_empty());
    // At the limit, both go through.
    let n = LIMIT as u64;
    let r = lintel_tests::call(&peer.ctl, m::BIG, &n.to_le_bytes(), &[]).unwrap();
    assert_eq!(r.data.len(), LIMIT);
    local.call(&n.to_le_bytes(), &[], &mut reply).unwrap();
    assert_eq!(reply.data.len(), LIMIT);
}
