use lintel::stub::StubError;

#[lintel::interface]
pub trait Svc {
    fn sum(&self, xs: impl Iterator<Item = u32>) -> Result<u32, StubError>;
}

fn main() {}
