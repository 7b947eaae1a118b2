use lintel::stub::StubError;

// These two names hash to the same 32-bit FNV-1a value.
#[lintel::interface]
pub trait Svc {
    fn m_qxuz(&self) -> Result<(), StubError>;
    fn m_nglfe(&self) -> Result<(), StubError>;
}

fn main() {}
