//! Loopback throughput, printed and never asserted (timings depend on the machine and its load).
//!
//! `cargo run --release -p shoal-net --example loopback_bench`

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use shoal_net::Connection;
use tokio::task::JoinSet;

const IN_FLIGHT: usize = 16;
const RUN: Duration = Duration::from_secs(3);

/// Runs `IN_FLIGHT` loops of acknowledged calls with `len`-byte payloads for `RUN`; returns
/// (calls, seconds).
async fn run(conn: &Connection, len: usize) -> (u64, f64) {
    let started = Instant::now();
    let mut loops = JoinSet::new();
    for _ in 0..IN_FLIGHT {
        let conn = conn.clone();
        loops.spawn(async move {
            let mut calls = 0u64;
            let data = vec![0x5au8; len];
            while started.elapsed() < RUN {
                // A fresh payload per call, as a writer would hand over its buffer.
                conn.call(ACK, data.clone()).await.unwrap();
                calls += 1;
            }
            calls
        });
    }
    let mut calls = 0;
    while let Some(n) = loops.join_next().await {
        calls += n.unwrap();
    }
    (calls, started.elapsed().as_secs_f64())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = TestServer::start().await;
    let mut cfg = server.client_config();
    cfg.max_in_flight = IN_FLIGHT;
    let conn = Connection::connect(server.addr, &cfg).await.unwrap();

    let (calls, secs) = run(&conn, 4096).await;
    println!("4 KiB calls, {IN_FLIGHT} in flight: {:.0} calls/s ({calls} in {secs:.2} s)", calls as f64 / secs);

    let (calls, secs) = run(&conn, 4 << 20).await;
    println!(
        "4 MiB calls, {IN_FLIGHT} in flight: {:.0} MB/s ({calls} calls in {secs:.2} s)",
        calls as f64 * (4 << 20) as f64 / secs / 1e6
    );
    server.stop().await;
}
