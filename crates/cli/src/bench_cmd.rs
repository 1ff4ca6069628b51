//! `shoal bench`: `rados bench` for Shoal. N operations in flight for S seconds, live
//! progress each second, then throughput and latency percentiles.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::{Args, ValueEnum};
use serde::Serialize;
use shoal_proto::osd::ObjOp;

use crate::conf::ConfArgs;

#[derive(Clone, Copy, Debug, ValueEnum, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Write new objects.
    Write,
    /// Read the objects a previous `write` run left, in order.
    Seq,
    /// Read those objects at random.
    Rand,
}

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    conf: ConfArgs,
    #[arg(long, short = 'p', default_value = "data")]
    pool: String,
    /// How long to run, in seconds (SIGINT or SIGTERM ends the run sooner, with its report).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Object size, e.g. 4M or 4096.
    #[arg(short = 'b', long = "block-size", default_value = "4M", value_parser = crate::conf::parse_size_arg)]
    block_size: u64,
    /// Operations in flight.
    #[arg(short = 't', long = "threads", default_value_t = 16)]
    in_flight: usize,
    /// Remove the written objects at the end (by default they stay for `seq` and `rand`).
    #[arg(long)]
    cleanup: bool,
    /// `write`: stop after this many objects (or `--seconds`, whichever comes first), e.g. to
    /// load a data set of a known size.
    #[arg(long)]
    objects: Option<u64>,
    /// Names of the objects: this prefix and a number. Runs with different prefixes leave
    /// separate sets (`seq` and `rand` read the set of the prefix given).
    #[arg(long, default_value = "bench_obj_")]
    prefix: String,
    /// Add a per-second breakdown (ops and latency percentiles of the operations that completed
    /// in each second of the run) to the report: shows a stall that the run's percentiles hide.
    #[arg(long)]
    timeline: bool,
    #[arg(long)]
    json: bool,
    workload: Workload,
}

/// One second of a run: the operations that completed in it.
#[derive(Serialize)]
struct Second {
    second: u32,
    ops: u64,
    lat_ms_p50: f64,
    lat_ms_p99: f64,
    lat_ms_max: f64,
}

#[derive(Serialize)]
struct Report {
    workload: Workload,
    pool: String,
    block_size: u64,
    in_flight: usize,
    seconds: f64,
    ops: u64,
    bytes: u64,
    mb_per_s: f64,
    ops_per_s: f64,
    lat_ms_avg: f64,
    lat_ms_p50: f64,
    lat_ms_p99: f64,
    lat_ms_max: f64,
    lat_ms_min: f64,
    errors: u64,
    /// The first failure, so a run with errors says why.
    first_error: Option<String>,
    /// With `--timeline`: one entry per second of the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    timeline: Option<Vec<Second>>,
}

/// Objects a write run names: a prefix and a number, so that `seq`/`rand` find them.
fn object_name(prefix: &str, i: u64) -> String {
    format!("{prefix}{i}")
}

/// Latencies are kept in a fixed histogram (1 µs buckets up to 100 ms, then 1 ms buckets up to
/// 10 s): memory is bounded however long the run, and percentiles are exact to the bucket.
struct Histogram {
    fine: Vec<u64>,
    coarse: Vec<u64>,
    sum_us: u64,
    max_us: u64,
    min_us: u64,
    count: u64,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram { fine: vec![0; 100_000], coarse: vec![0; 10_000], sum_us: 0, max_us: 0, min_us: u64::MAX, count: 0 }
    }
    fn record(&mut self, us: u64) {
        if us < 100_000 {
            self.fine[us as usize] += 1;
        } else {
            self.coarse[((us / 1000) as usize).min(9_999)] += 1;
        }
        self.sum_us += us;
        self.max_us = self.max_us.max(us);
        self.min_us = self.min_us.min(us);
        self.count += 1;
    }
    fn percentile_ms(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = rank_of(self.count, q);
        let mut seen = 0;
        for (us, n) in self.fine.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return us as f64 / 1000.0;
            }
        }
        for (ms, n) in self.coarse.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return ms as f64;
            }
        }
        self.max_us as f64 / 1000.0
    }
}

/// The 1-based rank of quantile `q` among `count` samples (nearest rank, at least 1).
fn rank_of(count: u64, q: f64) -> u64 {
    ((count as f64) * q).ceil().max(1.0) as u64
}

/// Per-second figures from the latencies (µs) of the operations completed in each second.
fn timeline_of(seconds: Vec<Vec<u32>>) -> Vec<Second> {
    seconds
        .into_iter()
        .enumerate()
        .map(|(i, mut lat)| {
            lat.sort_unstable();
            let at = |q: f64| {
                if lat.is_empty() {
                    return 0.0;
                }
                let rank = usize::try_from(rank_of(lat.len() as u64, q)).unwrap_or(usize::MAX);
                f64::from(lat[rank.min(lat.len()) - 1]) / 1000.0
            };
            Second {
                second: u32::try_from(i).unwrap_or(u32::MAX),
                ops: lat.len() as u64,
                lat_ms_p50: at(0.50),
                lat_ms_p99: at(0.99),
                lat_ms_max: lat.last().map_or(0.0, |us| f64::from(*us) / 1000.0),
            }
        })
        .collect()
}

pub fn run(args: &BenchArgs) -> Result<ExitCode> {
    if args.in_flight == 0 || args.in_flight > 1024 {
        bail!("-t must be between 1 and 1024, got {}", args.in_flight);
    }
    if args.block_size == 0 {
        bail!("-b must be positive");
    }
    if args.objects == Some(0) {
        bail!("--objects must be positive");
    }
    if args.objects.is_some() && args.workload != Workload::Write {
        bail!("--objects applies to `write` only (`seq` and `rand` read what a write left)");
    }
    shoal_client::validate_object_name(&object_name(&args.prefix, u64::MAX))
        .map_err(|e| anyhow::anyhow!("--prefix {:?} makes invalid object names: {e}", args.prefix))?;
    let mut cfg = args.conf.cluster()?;
    cfg.max_in_flight = args.in_flight.max(16);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let client = runtime.block_on(shoal_client::Client::connect(cfg))?;
    let pool = client.pool(&args.pool)?;
    if args.block_size > pool.max_object_bytes {
        bail!(
            "-b {} exceeds pool {}'s maximum object size of {} bytes",
            args.block_size,
            pool.name,
            pool.max_object_bytes
        );
    }
    // For reads: how many objects a previous write run left.
    let existing = if args.workload == Workload::Write {
        0
    } else {
        let mut n = 0u64;
        while runtime
            .block_on(client.op(&args.pool, &object_name(&args.prefix, n), vec![ObjOp::Stat], Vec::new()))
            .is_ok()
        {
            n += 1;
            if n >= 1_000_000 {
                break;
            }
        }
        if n == 0 {
            bail!("no objects from a `shoal bench ... write` run in pool {}; run that first", args.pool);
        }
        n
    };
    // One shared buffer: every write sends it by reference, as `rados bench` sends its own.
    let payload = bytes::Bytes::from(shoal_util::pattern::xorshift_bytes(0x5eed, args.block_size as usize));
    let duration = Duration::from_secs(args.seconds.max(1));
    let next = Arc::new(AtomicU64::new(0));
    let done_ops = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let timeline = args.timeline;
    let hist = runtime.block_on(async {
        // A signal ends the run like the deadline does: operations in flight finish, none start,
        // and the report covers what ran (so a script can run a probe for as long as it needs).
        let stopper = {
            let stop = stop.clone();
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::spawn(async move {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
                stop.store(true, Ordering::Relaxed);
            })
        };
        let mut tasks = Vec::new();
        for worker in 0..args.in_flight {
            let client = client.clone();
            let pool = args.pool.clone();
            let payload = payload.clone();
            let next = next.clone();
            let done_ops = done_ops.clone();
            let workload = args.workload;
            let bs = args.block_size;
            let prefix = args.prefix.clone();
            let max_objects = args.objects.filter(|_| workload == Workload::Write).unwrap_or(u64::MAX);
            let stop = stop.clone();
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut errors = 0u64;
                let mut first_error: Option<String> = None;
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (worker as u64 + 1);
                while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= max_objects {
                        break;
                    }
                    let t = Instant::now();
                    let r = match workload {
                        Workload::Write => {
                            let op = ObjOp::WriteFull { len_bytes: bs };
                            client.op_bytes(&pool, &object_name(&prefix, i), vec![op], payload.clone()).await
                        }
                        Workload::Seq | Workload::Rand => {
                            let n = if workload == Workload::Seq {
                                i % existing
                            } else {
                                rng ^= rng << 13;
                                rng ^= rng >> 7;
                                rng ^= rng << 17;
                                rng % existing
                            };
                            let op = ObjOp::Read { offset: 0, len_bytes: bs };
                            client.op(&pool, &object_name(&prefix, n), vec![op], Vec::new()).await
                        }
                    };
                    match r {
                        Ok(_) => {
                            // The second the operation completed in, beside its latency: 8 bytes
                            // per operation, as before the timeline (latencies over 71 minutes
                            // are clamped).
                            let us = u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX);
                            let second = u32::try_from(started.elapsed().as_secs()).unwrap_or(u32::MAX);
                            lat.push((second, us));
                            done_ops.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert_with(|| e.to_string());
                        }
                    }
                }
                (lat, errors, first_error)
            }));
        }
        // Progress once a second, like rados bench.
        let progress = {
            let done_ops = done_ops.clone();
            let bs = args.block_size;
            let quiet = args.json;
            tokio::spawn(async move {
                let mut last = 0u64;
                let mut sec = 0;
                if !quiet {
                    eprintln!("{:>5} {:>10} {:>12} {:>10}", "sec", "ops", "cur MB/s", "cur op/s");
                }
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    sec += 1;
                    let now = done_ops.load(Ordering::Relaxed);
                    if !quiet {
                        let d = now - last;
                        eprintln!("{sec:>5} {now:>10} {:>12.1} {d:>10}", (d * bs) as f64 / 1e6);
                    }
                    last = now;
                }
            })
        };
        let mut hist = Histogram::new();
        let mut seconds: Vec<Vec<u32>> = Vec::new();
        let mut errors = 0;
        let mut first_error = None;
        for t in tasks {
            if let Ok((lat, e, first)) = t.await {
                for (second, us) in lat {
                    hist.record(u64::from(us));
                    if timeline {
                        // Bounded by the run's length: one slot per second it lasted.
                        let slot = second as usize;
                        if seconds.len() <= slot {
                            seconds.resize_with(slot + 1, Vec::new);
                        }
                        seconds[slot].push(us);
                    }
                }
                errors += e;
                first_error = first_error.or(first);
            }
        }
        progress.abort();
        stopper.abort();
        Ok::<_, anyhow::Error>((hist, seconds, errors, first_error))
    });
    let (hist, seconds, errors, first_error) = hist?;
    let secs = started.elapsed().as_secs_f64();
    let ops = hist.count;
    let bytes = ops * args.block_size;
    let report = Report {
        workload: args.workload,
        pool: args.pool.clone(),
        block_size: args.block_size,
        in_flight: args.in_flight,
        seconds: secs,
        ops,
        bytes,
        mb_per_s: bytes as f64 / secs / 1e6,
        ops_per_s: ops as f64 / secs,
        lat_ms_avg: if ops > 0 { hist.sum_us as f64 / ops as f64 / 1000.0 } else { 0.0 },
        lat_ms_p50: hist.percentile_ms(0.50),
        lat_ms_p99: hist.percentile_ms(0.99),
        lat_ms_max: hist.max_us as f64 / 1000.0,
        lat_ms_min: if ops > 0 { hist.min_us as f64 / 1000.0 } else { 0.0 },
        errors,
        first_error,
        timeline: args.timeline.then(|| timeline_of(seconds)),
    };
    if args.cleanup && args.workload == Workload::Write {
        let written = next.load(Ordering::Relaxed).min(args.objects.unwrap_or(u64::MAX));
        runtime.block_on(async {
            for i in 0..written {
                let _ = client.op(&args.pool, &object_name(&args.prefix, i), vec![ObjOp::Remove], Vec::new()).await;
            }
        });
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("Total time run:         {:.2} s", report.seconds);
        println!("Total {:?} ops:        {}", report.workload, report.ops);
        println!("Object size:            {}", report.block_size);
        println!("Bandwidth (MB/s):       {:.1}", report.mb_per_s);
        println!("IOPS:                   {:.0}", report.ops_per_s);
        println!("Latency avg (ms):       {:.3}", report.lat_ms_avg);
        println!("Latency p50 (ms):       {:.3}", report.lat_ms_p50);
        println!("Latency p99 (ms):       {:.3}", report.lat_ms_p99);
        println!("Latency max (ms):       {:.3}", report.lat_ms_max);
        for s in report.timeline.iter().flatten() {
            println!(
                "  second {:>4}: {:>7} ops  p50 {:>8.3}  p99 {:>8.3}  max {:>8.3} ms",
                s.second, s.ops, s.lat_ms_p50, s.lat_ms_p99, s.lat_ms_max
            );
        }
        if let Some(first) = &report.first_error {
            println!("Errors:                 {errors} (first: {first})");
        }
    }
    Ok(if errors > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}
