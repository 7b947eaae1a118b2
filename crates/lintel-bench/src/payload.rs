//! The error of the benchmark's own services (`placement`, `lrpc`): lintel's failures, or a
//! payload that arrived wrong (which fails the case).

use lintel::stub::{StubError, Wire};

#[derive(Debug, PartialEq, Wire)]
pub enum PayloadError {
    Stub(StubError),
    BadPayload,
}

impl From<StubError> for PayloadError {
    fn from(e: StubError) -> Self {
        PayloadError::Stub(e)
    }
}
