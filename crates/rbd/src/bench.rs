//! `shoal rbd bench`: a load generator over one open image, as `rbd bench` is — a number of
//! concurrent workers issuing fixed-size reads or writes, sequential or random, until a total
//! is moved. Reports operations and bytes per second and latency percentiles.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use futures::StreamExt;

use crate::error::RbdError;
use crate::image::Image;
use crate::manage::Progress;

/// Operations one run may issue at most (bounds the latency record: 4 bytes each).
pub const MAX_OPS: u64 = 16 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchConfig {
    pub write: bool,
    pub io_size_bytes: u64,
    pub io_threads: usize,
    pub io_total_bytes: u64,
    pub random: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BenchReport {
    pub ops: u64,
    pub bytes: u64,
    pub elapsed_s: f64,
    pub ops_per_s: f64,
    pub bytes_per_s: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

/// A small deterministic generator (xorshift64*), so runs are repeatable.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Runs the load on `image`; `progress` gets operations done of operations to issue.
pub async fn run(image: &Image, cfg: BenchConfig, progress: Progress<'_>) -> Result<BenchReport, RbdError> {
    let size = image.size_bytes();
    if cfg.io_size_bytes == 0 || cfg.io_size_bytes > size || cfg.io_size_bytes > 32 << 20 {
        return Err(RbdError::Invalid(format!(
            "io size {} must be between 1 byte and the smaller of the image size ({size}) and 32 MiB",
            cfg.io_size_bytes
        )));
    }
    if cfg.io_threads == 0 || cfg.io_threads > 1024 {
        return Err(RbdError::Invalid(format!("io threads {} must be 1 to 1024", cfg.io_threads)));
    }
    let ops = cfg.io_total_bytes / cfg.io_size_bytes;
    if ops == 0 || ops > MAX_OPS {
        return Err(RbdError::Invalid(format!(
            "io total {} makes {ops} operations of {} bytes; 1 to {MAX_OPS} are allowed",
            cfg.io_total_bytes, cfg.io_size_bytes
        )));
    }
    let slots = size / cfg.io_size_bytes;
    let payload = bytes::Bytes::from(vec![0x5au8; cfg.io_size_bytes as usize]);
    let issued = AtomicU64::new(0);
    let started = Instant::now();
    let worker = |w: usize| {
        let (issued, payload) = (&issued, &payload);
        async move {
            let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (w as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            let mut latencies_us = Vec::new();
            loop {
                let i = issued.fetch_add(1, Ordering::Relaxed);
                if i >= ops {
                    return Ok::<_, RbdError>(latencies_us);
                }
                let slot = if cfg.random { next_random(&mut rng) % slots } else { i % slots };
                let offset = slot * cfg.io_size_bytes;
                let t = Instant::now();
                if cfg.write {
                    image.write(offset, payload.clone()).await?;
                } else {
                    image.read(offset, cfg.io_size_bytes).await?;
                }
                latencies_us.push(t.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
                if i.is_multiple_of(1024) {
                    progress(i, ops);
                }
            }
        }
    };
    let mut workers = futures::stream::iter((0..cfg.io_threads).map(worker)).buffer_unordered(cfg.io_threads);
    let mut all: Vec<u32> = Vec::with_capacity(ops as usize);
    while let Some(r) = workers.next().await {
        all.extend(r?);
    }
    let elapsed_s = started.elapsed().as_secs_f64().max(1e-9);
    progress(ops, ops);
    all.sort_unstable();
    let pct = |p: f64| all.get(((all.len() as f64 - 1.0) * p).round() as usize).copied().map_or(0, u64::from);
    let bytes = ops * cfg.io_size_bytes;
    Ok(BenchReport {
        ops,
        bytes,
        elapsed_s,
        ops_per_s: ops as f64 / elapsed_s,
        bytes_per_s: bytes as f64 / elapsed_s,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        max_us: all.last().copied().map_or(0, u64::from),
    })
}
