use lintel::stub::StubError;

#[lintel::interface(version = 2)]
pub trait Svc {
    fn get(&self) -> Result<u32, StubError>;
}

fn main() {}
