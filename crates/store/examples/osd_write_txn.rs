//! The engine's share of an OSD's 4 KiB write, without the network: each transaction is what
//! `OsdCore` commits for a `write_full` of 4 KiB to a new object — touch, truncate and write of
//! the object, and one PG log entry in the log object's omap, with the oldest 64 entries trimmed
//! every 64 writes once the log holds 575 — on a RAM store, batches of 16 made durable together.
//!
//!   cargo run --release -p shoal-store --example osd_write_txn [-- SECONDS [PGS]]
//!
//! Prints transactions per second and the CPU time per transaction, the figure to compare
//! between builds (the wall clock on a shared VM includes time the host took the CPU away).

use std::time::{Duration, Instant};

use shoal_store::engine::MemEngine;
use shoal_store::{Durability, ObjectStore, Transaction};

const LOG_KEEP: usize = 512;
const TRIM: usize = 64;

/// CPU time of this thread: the engine runs on the caller's thread for a RAM store.
fn cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into the pointer it is given, which is valid.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let pgs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(32);
    let store = MemEngine::new_mem(8 << 30).expect("a RAM store");
    let mut logs: Vec<std::collections::VecDeque<u64>> = vec![Default::default(); pgs as usize];
    let data = vec![0x5au8; 4096];
    let (t0, c0) = (Instant::now(), cpu_time());
    let mut n: u64 = 0;
    while t0.elapsed().as_secs_f64() < seconds {
        let pg = n % pgs;
        let coll = format!("pg.1.{pg:x}");
        let log_coll = format!("pglog.1.{pg:x}");
        let obj = format!("bench_data_{n}");
        let mut txn = Transaction::new();
        if n < pgs {
            txn.create_collection(&coll);
            txn.create_collection(&log_coll);
            txn.touch(&log_coll, "log");
        }
        txn.touch(&coll, &obj).truncate(&coll, &obj, 0);
        txn.write(&coll, &obj, 0, data.clone());
        let log = &mut logs[pg as usize];
        let version = n + 1;
        if log.len() >= LOG_KEEP + TRIM - 1 {
            let oldest: Vec<Vec<u8>> = log.drain(..TRIM).map(|v| key(v).to_vec()).collect();
            txn.omap_remove(&log_coll, "log", oldest);
        }
        let mut value = Vec::with_capacity(20 + obj.len());
        value.extend_from_slice(&n.to_be_bytes());
        value.extend_from_slice(&n.to_be_bytes());
        value.extend_from_slice(&1u32.to_be_bytes());
        value.extend_from_slice(obj.as_bytes());
        txn.omap_set(&log_coll, "log", vec![(key(version).to_vec(), value)]);
        log.push_back(version);
        store.commit(txn, Durability::Deferred).expect("commit");
        n += 1;
        if n.is_multiple_of(16) {
            store.sync().expect("sync");
        }
    }
    let (wall, cpu) = (t0.elapsed(), cpu_time() - c0);
    println!(
        "{{\"txns\": {n}, \"txns_per_s\": {:.0}, \"cpu_us_per_txn\": {:.2}, \"wall_us_per_txn\": {:.2}}}",
        n as f64 / wall.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / n as f64,
        wall.as_secs_f64() * 1e6 / n as f64
    );
}

fn key(version: u64) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..4].copy_from_slice(&1u32.to_be_bytes());
    k[4..].copy_from_slice(&version.to_be_bytes());
    k
}
