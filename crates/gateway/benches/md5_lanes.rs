//! MD5 throughput of one stream and of 1-16 streams hashed together through the widest kernel
//! this machine has (decision 0022); docs/BENCHMARKS.md records its output.
//!
//! `cargo bench -p shoal-gateway --bench md5_lanes`

use std::time::Instant;

use shoal_gateway::md5lanes::kernel::{self, INIT};

const STREAM_MIB: usize = 4;
const ROUNDS: usize = 4;

fn main() {
    let data = vec![7u8; STREAM_MIB << 20];
    let started = Instant::now();
    let mut state = INIT;
    for _ in 0..ROUNDS {
        kernel::compress(&mut state, &data);
    }
    let one = (ROUNDS * STREAM_MIB) as f64 / started.elapsed().as_secs_f64();
    println!("one stream: {one:.0} MiB/s; lanes on this machine: {}", kernel::lane_count());
    // The RustCrypto `md-5` crate's hasher over the same bytes, for comparison.
    let started = Instant::now();
    for _ in 0..ROUNDS {
        std::hint::black_box(<md5::Md5 as md5::Digest>::digest(&data));
    }
    let crate_one = (ROUNDS * STREAM_MIB) as f64 / started.elapsed().as_secs_f64();
    println!("one stream, md-5 crate: {crate_one:.0} MiB/s");
    for streams in [1usize, 2, 4, 8, 16] {
        let slices: Vec<&[u8]> = (0..streams).map(|_| &data[..]).collect();
        let mut states = vec![INIT; streams];
        let started = Instant::now();
        for _ in 0..ROUNDS {
            kernel::compress_lanes(&mut states, &slices);
        }
        let all = (ROUNDS * STREAM_MIB * streams) as f64 / started.elapsed().as_secs_f64();
        println!("{streams:>2} streams together: {all:.0} MiB/s in all ({:.1}x one stream)", all / one);
        // Keeps the work from being optimized away.
        assert_ne!(states[0], INIT, "the states advanced");
    }
}
