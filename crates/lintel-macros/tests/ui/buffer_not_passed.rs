use lintel::stub::StubError;

#[lintel::interface]
pub trait Svc {
    fn put(&self, #[buffer] data: Vec<u8>) -> Result<(), StubError>;
}

fn main() {}
