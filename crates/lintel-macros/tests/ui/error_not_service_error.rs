#[lintel::interface]
pub trait Svc {
    fn get(&self) -> Result<u32, String>;
}

fn main() {}
