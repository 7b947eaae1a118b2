use lintel::stub::StubError;

pub struct Opaque;

#[lintel::interface]
pub trait Svc {
    fn put(&self, o: Opaque) -> Result<(), StubError>;
}

fn main() {}
