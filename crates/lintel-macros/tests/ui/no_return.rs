#[lintel::interface]
pub trait Svc {
    fn poke(&self, x: u32);
}

fn main() {}
