use lintel::stub::StubError;

#[lintel::interface]
pub trait Svc {
    type Item;
    fn get(&self) -> Result<u32, StubError>;
}

fn main() {}
