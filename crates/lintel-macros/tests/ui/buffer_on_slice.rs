use lintel::stub::StubError;

#[lintel::interface]
pub trait Svc {
    fn put(&self, #[buffer] data: &[u8]) -> Result<(), StubError>;
}

fn main() {}
