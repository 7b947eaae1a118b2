#[derive(lintel::stub::Wire)]
pub union Bits {
    a: u32,
    b: f32,
}

fn main() {}
