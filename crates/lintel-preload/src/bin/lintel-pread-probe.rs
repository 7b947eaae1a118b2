//! `lintel-pread-probe FILE N [warm]`: N one-byte `pread(2)`s at
//! scattered offsets of FILE, through libc (so a preloaded library sees
//! them). The `unix` benchmark runs it natively and under `lintel-run`;
//! it prints the sum of the bytes read (the two runs must agree) and the
//! time per call in ns. With `warm`, every page of the file is read once
//! first, untimed: the N calls then find the file paged in (served: in
//! the service's cache, and mapped).
#![forbid(unsafe_code)]

use std::os::unix::fs::FileExt;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(n)) = (args.get(1), args.get(2).and_then(|n| n.parse::<u64>().ok())) else {
        eprintln!("usage: lintel-pread-probe FILE N [warm]");
        std::process::exit(2);
    };
    let f = std::fs::File::open(path).unwrap_or_else(|e| {
        eprintln!("lintel-pread-probe: {path}: {e}");
        std::process::exit(1)
    });
    let size = f.metadata().map(|m| m.len()).unwrap_or(0).max(1);
    let mut b = [0u8; 1];
    if args.get(3).map(String::as_str) == Some("warm") {
        for at in (0..size).step_by(4096) {
            let _ = f.read_at(&mut b, at);
        }
    }
    let mut sum = 0u64;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let start = std::time::Instant::now();
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if f.read_at(&mut b, x % size).unwrap_or(0) == 1 {
            sum += b[0] as u64;
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / n.max(1) as f64;
    println!("{sum} {ns:.1}");
}
