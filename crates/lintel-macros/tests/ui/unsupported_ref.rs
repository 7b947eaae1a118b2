use lintel::stub::StubError;

#[lintel::interface]
pub trait Svc {
    fn sum(&self, xs: &Vec<u32>) -> Result<u32, StubError>;
}

fn main() {}
