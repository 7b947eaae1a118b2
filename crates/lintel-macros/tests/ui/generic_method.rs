use lintel::stub::StubError;

#[lintel::interface]
pub trait Svc {
    fn put<T>(&self, v: T) -> Result<(), StubError>;
}

fn main() {}
