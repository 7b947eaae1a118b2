use lintel::stub::StubError;

#[lintel::interface]
pub trait Svc {
    fn bump(&mut self) -> Result<u32, StubError>;
}

fn main() {}
