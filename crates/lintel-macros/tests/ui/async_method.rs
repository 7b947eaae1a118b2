use lintel::stub::StubError;

#[lintel::interface]
pub trait Svc {
    async fn get(&self) -> Result<u32, StubError>;
}

fn main() {}
