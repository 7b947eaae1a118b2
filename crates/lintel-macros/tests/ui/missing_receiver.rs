use lintel::stub::StubError;

#[lintel::interface]
pub trait Svc {
    fn ping(x: u32) -> Result<u32, StubError>;
}

fn main() {}
