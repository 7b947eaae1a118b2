//! The generated stubs with the server in the caller's own domain.

mod common;

use common::*;
use lintel::CallError;
use lintel::stub::StubError;

#[test]
fn every_parameter_kind_colocated() {
    let p = ProbeServer::serve(ProbeImpl::default());
    exercise(&p, Placement::Colocated);
}

#[test]
fn deadlines_and_caps_colocated() {
    deadlines_and_caps(&ProbeServer::serve(ProbeImpl::default()));
}

#[test]
fn untyped_local_call_goes_through_dispatch() {
    // A handler that is not a ProbeServer (here: a closure forwarding to
    // one) makes the client marshal even though the door is local.
    let inner = ProbeServer::door(ProbeImpl::default());
    let fwd = lintel::Door::create(0, move |req: lintel::Request<'_>, reply: &mut lintel::Reply| {
        inner
            .call(req.data, &req.doors, reply)
            .map_err(|_| lintel::Fault(1))
    });
    let p = ProbeClient::from_door(fwd);
    let data = [1u8, 2, 3];
    let mut out = Vec::new();
    assert_eq!(p.echo_bytes(&data, &mut out), Ok(3));
    assert_eq!(out, data);
    assert_ne!(
        p.last_ptr().unwrap(),
        data.as_ptr() as u64,
        "marshalled, so copied"
    );
    assert_eq!(p.add(1, 2, false, 0.0), Ok(3.0));
}

#[test]
fn revoked_door_colocated() {
    let p = ProbeServer::serve(ProbeImpl::default());
    p.door().revoke().unwrap();
    assert_eq!(
        p.null(),
        Err(ProbeError::Stub(StubError::Call(CallError::Revoked)))
    );
}

#[test]
fn method_numbers_are_fnv1a_of_names() {
    for (name, num) in ProbeServer::METHODS {
        assert_eq!(*num, lintel::stub::method_number(name));
    }
    assert_eq!(ProbeServer::METHODS.len(), 21);
    assert_eq!(ProbeClient::INTERFACE, "Probe");
    // The methods both versions have share their numbers.
    assert!(
        ProbeV2Server::METHODS
            .iter()
            .all(|m| m.0 != "null" || ProbeServer::METHODS.contains(m))
    );
}

#[test]
fn server_keeps_a_shared_implementation() {
    let imp = std::sync::Arc::new(ProbeImpl::default());
    let p = ProbeClient::from_door(ProbeServer::from_arc(imp.clone()).into_door());
    p.echo_bytes(b"x", &mut Vec::new()).unwrap();
    assert_eq!(imp.last_ptr(), p.last_ptr());
}
