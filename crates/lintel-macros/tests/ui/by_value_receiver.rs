use lintel::stub::StubError;

#[lintel::interface]
pub trait Svc {
    fn take(self) -> Result<u32, StubError>;
}

fn main() {}
