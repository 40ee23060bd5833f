use std::time::Instant;
fn main() {
    let data: Vec<u8> = (0..1024 * 1024).map(|i| (i * 13) as u8).collect();
    let mut acc = 0u32;
    let t = Instant::now();
    for _ in 0..2000 {
        acc ^= crc32fast::hash(&data);
    }
    let dt = t.elapsed().as_secs_f64();
    println!(
        "crc32fast {:.2} GB/s ({acc})",
        2000.0 * data.len() as f64 / dt / 1e9
    );
    let mut acc = 0u32;
    let t = Instant::now();
    for _ in 0..2000 {
        for c in data.chunks(1024) {
            acc ^= crc32fast::hash(c);
        }
    }
    let dt = t.elapsed().as_secs_f64();
    println!(
        "crc32fast 1KiB chunks {:.2} GB/s ({acc})",
        2000.0 * data.len() as f64 / dt / 1e9
    );
}
