#[lintel::interface]
pub trait Svc {
    fn get(&self) -> u32;
}

fn main() {}
