//! `shoal rbd ...`: block images, as Ceph's `rbd` tool manages them. Every command has `--json`.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::json;
use shoal_rbd::{Layout, bench, header, lock, manage, snap, transfer};

use crate::conf::{ConfArgs, parse_size_arg};

#[derive(Args)]
pub struct Common {
    #[command(flatten)]
    pub conf: ConfArgs,
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand)]
pub enum RbdCommand {
    /// Create a thin image: `shoal rbd create POOL/IMAGE --size 10G`.
    Create {
        #[command(flatten)]
        c: Common,
        /// POOL/IMAGE.
        spec: String,
        #[arg(long, value_parser = parse_size_arg)]
        size: u64,
        /// Bytes per data object (a power of two, 4K to 32M).
        #[arg(long, default_value = "4M", value_parser = parse_size_arg)]
        object_size: u64,
        /// Bytes per stripe unit (default: the object size, no striping).
        #[arg(long, value_parser = parse_size_arg)]
        stripe_unit: Option<u64>,
        /// Objects a stripe goes round (default 1).
        #[arg(long, default_value_t = 1)]
        stripe_count: u64,
    },
    /// Images of a pool.
    Ls {
        #[command(flatten)]
        c: Common,
        pool: String,
    },
    /// Size, layout and features of an image.
    Info {
        #[command(flatten)]
        c: Common,
        spec: String,
    },
    /// Grow an image (shrinking needs --allow-shrink: it discards the data past the new end).
    Resize {
        #[command(flatten)]
        c: Common,
        spec: String,
        #[arg(long, value_parser = parse_size_arg)]
        size: u64,
        #[arg(long)]
        allow_shrink: bool,
    },
    /// Remove an image and all its data.
    Rm {
        #[command(flatten)]
        c: Common,
        spec: String,
    },
    /// Provisioned and used bytes of an image.
    Du {
        #[command(flatten)]
        c: Common,
        spec: String,
    },
    /// The exclusive lock a writer holds on an image: `ls`, `break`.
    #[command(subcommand)]
    Lock(LockCommand),
    /// Write an image (or a snapshot, POOL/IMAGE@SNAP) to a file (sparse) or `-` (stdout).
    Export {
        #[command(flatten)]
        c: Common,
        spec: String,
        path: String,
    },
    /// Create an image from a file or `-` (stdin, which needs --size); all-zero chunks are not
    /// written (the image stays thin).
    Import {
        #[command(flatten)]
        c: Common,
        path: String,
        spec: String,
        /// The image size (default: the file's size).
        #[arg(long, value_parser = parse_size_arg)]
        size: Option<u64>,
        #[arg(long, default_value = "4M", value_parser = parse_size_arg)]
        object_size: u64,
    },
    /// Load an image like `rbd bench`: `--io-type write|read --io-size 4K --io-threads 16
    /// --io-total 1G --io-pattern seq|rand`.
    Bench {
        #[command(flatten)]
        c: Common,
        spec: String,
        #[arg(long, value_parser = ["write", "read"])]
        io_type: String,
        #[arg(long, default_value = "4K", value_parser = parse_size_arg)]
        io_size: u64,
        #[arg(long, default_value_t = 16)]
        io_threads: usize,
        #[arg(long, default_value = "1G", value_parser = parse_size_arg)]
        io_total: u64,
        #[arg(long, default_value = "seq", value_parser = ["seq", "rand"])]
        io_pattern: String,
    },
    /// Snapshots: `create`, `ls`, `rm`, `rollback`, `protect`, `unprotect`.
    #[command(subcommand)]
    Snap(SnapCommand),
    /// Create a copy-on-write clone of a protected snapshot: `clone POOL/IMAGE@SNAP POOL/CHILD`.
    Clone {
        #[command(flatten)]
        c: Common,
        /// POOL/IMAGE@SNAP (protected).
        parent: String,
        /// POOL/CHILD (the same pool).
        child: String,
    },
    /// Copy everything a clone reads from its parent into it, and detach it from the parent.
    Flatten {
        #[command(flatten)]
        c: Common,
        spec: String,
    },
    /// Clones of an image (of one of its snapshots with POOL/IMAGE@SNAP).
    Children {
        #[command(flatten)]
        c: Common,
        spec: String,
    },
}

#[derive(Subcommand)]
pub enum SnapCommand {
    /// Take a snapshot: `snap create POOL/IMAGE@SNAP` (nothing is copied; a server writing the
    /// image adopts it before this returns).
    Create {
        #[command(flatten)]
        c: Common,
        spec: String,
        /// How long to wait for the image's live writer to adopt the snapshot.
        #[arg(long, default_value_t = 30)]
        wait_s: u64,
    },
    /// Snapshots of an image.
    Ls {
        #[command(flatten)]
        c: Common,
        spec: String,
    },
    /// Remove a snapshot (and the clones of objects only it kept).
    Rm {
        #[command(flatten)]
        c: Common,
        spec: String,
        #[arg(long, default_value_t = 30)]
        wait_s: u64,
    },
    /// Make the image what it was at the snapshot (refused while a server holds the image).
    Rollback {
        #[command(flatten)]
        c: Common,
        spec: String,
    },
    /// Protect a snapshot so that it can be cloned (and cannot be removed).
    Protect {
        #[command(flatten)]
        c: Common,
        spec: String,
    },
    /// Unprotect a snapshot (refused while clones use it).
    Unprotect {
        #[command(flatten)]
        c: Common,
        spec: String,
    },
}

#[derive(Subcommand)]
pub enum LockCommand {
    /// Who holds the image's lock, since when, and whether its lease has lapsed.
    Ls {
        #[command(flatten)]
        c: Common,
        spec: String,
    },
    /// Remove the image's lock whoever holds it (its holder, if alive, stops writing).
    Break {
        #[command(flatten)]
        c: Common,
        spec: String,
    },
}

/// Splits `POOL/IMAGE`.
pub fn parse_spec(spec: &str) -> Result<(&str, &str)> {
    match spec.split_once('/') {
        Some((pool, image)) if !pool.is_empty() && !image.is_empty() && !image.contains('@') => Ok((pool, image)),
        _ => bail!("{spec:?} is not POOL/IMAGE"),
    }
}

const BYTES_TEMPLATE: &str = "{msg} [{bar:30}] {bytes}/{total_bytes} ({eta} left)";

/// Splits `POOL/IMAGE[@SNAP]`.
pub fn parse_snap_spec(spec: &str) -> Result<(&str, &str, Option<&str>)> {
    let (image, snap) = match spec.split_once('@') {
        Some((image, snap)) if !snap.is_empty() && !snap.contains(['@', '/']) => (image, Some(snap)),
        Some(_) => bail!("{spec:?} is not POOL/IMAGE@SNAP"),
        None => (spec, None),
    };
    let (pool, name) = parse_spec(image)?;
    Ok((pool, name, snap))
}

/// Splits `POOL/IMAGE@SNAP` (the snapshot required).
fn parse_snap_required(spec: &str) -> Result<(&str, &str, &str)> {
    match parse_snap_spec(spec)? {
        (pool, name, Some(snap)) => Ok((pool, name, snap)),
        _ => bail!("{spec:?} names no snapshot: use POOL/IMAGE@SNAP"),
    }
}

/// A progress callback feeding `bar`.
fn feed(bar: &indicatif::ProgressBar) -> impl Fn(u64, u64) + Sync + '_ {
    move |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    }
}

/// Reports a finished action on `spec`: `{"WHAT": spec}` for `--json`, else `WHAT spec`.
fn report_done(json_out: bool, what: &str, spec: &str) {
    if json_out {
        println!("{}", json!({ what: spec }));
    } else {
        println!("{what} {spec}");
    }
}

fn snap_json(s: &shoal_rbd::SnapInfo) -> serde_json::Value {
    json!({
        "id": s.id,
        "name": s.name,
        "size_bytes": s.size_bytes,
        "protected": s.protected,
        "created_unix_s": s.created_unix_s,
    })
}

fn progress_bar(json: bool, what: &str) -> indicatif::ProgressBar {
    bar_with(json, what, "{msg} [{bar:30}] {pos}/{len} objects ({eta} left)")
}

/// A progress bar on stderr with `template` (hidden for `--json`).
fn bar_with(hidden: bool, what: &str, template: &str) -> indicatif::ProgressBar {
    if hidden {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(template).unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message(what.to_string());
    bar
}

fn info_json(info: &shoal_rbd::ImageInfo, pool: &str) -> serde_json::Value {
    let l = info.spec.layout;
    json!({
        "pool": pool,
        "name": info.spec.name,
        "id": info.spec.id,
        "size_bytes": info.size_bytes,
        "object_size_bytes": l.object_size_bytes,
        "stripe_unit_bytes": l.stripe_unit_bytes,
        "stripe_count": l.stripe_count,
        "objects": l.object_count(info.size_bytes),
        "features": info.spec.features,
        "created_unix_s": info.spec.created_unix_s,
        "snapshots": info.snaps.len(),
        "parent": info.parent.as_ref().map(|p| json!({
            "image": p.image_name, "snapshot": p.snap_name, "overlap_bytes": p.overlap_bytes,
        })),
    })
}

pub fn run(cmd: &RbdCommand) -> Result<ExitCode> {
    let c = match cmd {
        RbdCommand::Create { c, .. }
        | RbdCommand::Ls { c, .. }
        | RbdCommand::Info { c, .. }
        | RbdCommand::Resize { c, .. }
        | RbdCommand::Rm { c, .. }
        | RbdCommand::Du { c, .. }
        | RbdCommand::Lock(LockCommand::Ls { c, .. } | LockCommand::Break { c, .. })
        | RbdCommand::Snap(
            SnapCommand::Create { c, .. }
            | SnapCommand::Ls { c, .. }
            | SnapCommand::Rm { c, .. }
            | SnapCommand::Rollback { c, .. }
            | SnapCommand::Protect { c, .. }
            | SnapCommand::Unprotect { c, .. },
        )
        | RbdCommand::Export { c, .. }
        | RbdCommand::Import { c, .. }
        | RbdCommand::Bench { c, .. }
        | RbdCommand::Clone { c, .. }
        | RbdCommand::Flatten { c, .. }
        | RbdCommand::Children { c, .. } => c,
    };
    let blocking = c.conf.connect()?;
    let client = blocking.client().clone();
    blocking.runtime().block_on(async move {
        match cmd {
            RbdCommand::Create { spec, size, object_size, stripe_unit, stripe_count, .. } => {
                let (pool, name) = parse_spec(spec)?;
                let layout = Layout {
                    object_size_bytes: *object_size,
                    stripe_unit_bytes: stripe_unit.unwrap_or(*object_size),
                    stripe_count: *stripe_count,
                };
                let info = header::create(&client, pool, name, *size, layout, None).await.with_context(|| format!("creating {spec}"))?;
                if c.json {
                    println!("{}", info_json(&info, pool));
                } else {
                    println!("created {spec}: {} bytes, id {}", info.size_bytes, info.spec.id);
                }
            }
            RbdCommand::Ls { pool, .. } => {
                let names = header::list(&client, pool).await.with_context(|| format!("listing images of {pool}"))?;
                if c.json {
                    println!("{}", json!({ "pool": pool, "images": names }));
                } else {
                    for n in names {
                        println!("{n}");
                    }
                }
            }
            RbdCommand::Info { spec, .. } => {
                let (pool, name) = parse_spec(spec)?;
                let info = header::open(&client, pool, name).await.with_context(|| format!("reading {spec}"))?;
                if c.json {
                    println!("{}", info_json(&info, pool));
                } else {
                    let l = info.spec.layout;
                    println!("rbd image '{name}':");
                    println!("\tsize {} bytes in {} objects", info.size_bytes, l.object_count(info.size_bytes));
                    println!("\tobject size {} bytes", l.object_size_bytes);
                    println!("\tstripe unit {} bytes, stripe count {}", l.stripe_unit_bytes, l.stripe_count);
                    println!("\tid {}", info.spec.id);
                    println!("\tfeatures: {}", info.spec.features.join(", "));
                    println!("\tcreated {} (unix seconds)", info.spec.created_unix_s);
                    println!("\tsnapshots {}", info.snaps.len());
                    if let Some(p) = &info.parent {
                        println!("\tparent {pool}/{}@{} (overlap {} bytes)", p.image_name, p.snap_name, p.overlap_bytes);
                    }
                }
            }
            RbdCommand::Resize { spec, size, allow_shrink, .. } => {
                let (pool, name) = parse_spec(spec)?;
                let info = manage::resize(&client, pool, name, *size, *allow_shrink)
                    .await
                    .with_context(|| format!("resizing {spec}"))?;
                if c.json {
                    println!("{}", info_json(&info, pool));
                } else {
                    println!("resized {spec} to {} bytes", info.size_bytes);
                }
            }
            RbdCommand::Rm { spec, .. } => {
                let (pool, name) = parse_spec(spec)?;
                let bar = progress_bar(c.json, "removing");
                manage::remove(&client, pool, name, &feed(&bar)).await.with_context(|| format!("removing {spec}"))?;
                bar.finish_and_clear();
                report_done(c.json, "removed", spec);
            }
            RbdCommand::Du { spec, .. } => {
                let (pool, name) = parse_spec(spec)?;
                let bar = progress_bar(c.json, "counting");
                let u = manage::usage(&client, pool, name, &feed(&bar)).await.with_context(|| format!("measuring {spec}"))?;
                bar.finish_and_clear();
                if c.json {
                    println!(
                        "{}",
                        json!({ "name": name, "provisioned_bytes": u.provisioned_bytes, "used_bytes": u.used_bytes, "objects": u.objects })
                    );
                } else {
                    println!("NAME\tPROVISIONED\tUSED");
                    println!("{name}\t{}\t{}", u.provisioned_bytes, u.used_bytes);
                }
            }
            RbdCommand::Lock(LockCommand::Ls { spec, .. }) => {
                let (pool, name) = parse_spec(spec)?;
                let held = lock::read(&client, pool, name).await.with_context(|| format!("reading {spec}'s lock"))?;
                let now = lock::now_unix_ms();
                let locks: Vec<_> = held
                    .iter()
                    .map(|(r, _)| {
                        json!({
                            "holder": r.holder,
                            "description": r.description,
                            "acquired_unix_ms": r.acquired_unix_ms,
                            "renewed_unix_ms": r.renewed_unix_ms,
                            "lease_ms": r.lease_ms,
                            "client": format!("{:016x}", r.client),
                            "stale": r.is_stale(now),
                        })
                    })
                    .collect();
                if c.json {
                    println!("{}", json!({ "image": spec, "locks": locks }));
                } else if let Some((r, _)) = &held {
                    let age_s = now.saturating_sub(r.renewed_unix_ms) / 1000;
                    let state = if r.is_stale(now) { "stale" } else { "live" };
                    println!("{spec}: locked by {} ({}), renewed {age_s} s ago, {state}", r.description, r.holder);
                } else {
                    println!("{spec}: not locked");
                }
            }
            RbdCommand::Lock(LockCommand::Break { spec, .. }) => {
                let (pool, name) = parse_spec(spec)?;
                let broken = lock::break_lock(&client, pool, name).await.with_context(|| format!("breaking {spec}'s lock"))?;
                if c.json {
                    // `fenced` is null when nothing was locked or the holder could not be fenced.
                    let fenced = broken
                        .as_ref()
                        .filter(|(_, epoch)| *epoch > 0)
                        .map(|(r, epoch)| json!({ "client": format!("{:016x}", r.client), "epoch": epoch }));
                    println!(
                        "{}",
                        json!({ "image": spec, "broken": broken.as_ref().map(|(r, _)| &r.holder), "fenced": fenced })
                    );
                } else {
                    match broken {
                        Some((r, 0)) => println!(
                            "broke {spec}'s lock held by {} ({}); its holder could not be fenced off (a lock taken \
                             by an older version): make sure it no longer runs",
                            r.description, r.holder
                        ),
                        Some((r, epoch)) => println!(
                            "broke {spec}'s lock held by {} ({}); its client {:016x} is fenced off the cluster as of \
                             epoch {epoch}",
                            r.description, r.holder, r.client
                        ),
                        None => println!("{spec} was not locked"),
                    }
                }
            }
            RbdCommand::Snap(sc) => return snap_command(&client, sc, c.json).await,
            RbdCommand::Export { spec, path, .. } => {
                let (pool, name, snap_name) = parse_snap_spec(spec)?;
                let image = match snap_name {
                    Some(s) => shoal_rbd::Image::open_snap(&client, pool, name, s).await,
                    None => shoal_rbd::Image::open(&client, pool, name, true).await,
                }
                .with_context(|| format!("opening {spec}"))?;
                // Progress goes to stderr and never mixes with an export to stdout.
                let bar = bar_with(c.json || path == "-", "exporting", BYTES_TEMPLATE);
                let moved = if path == "-" {
                    let mut out = std::io::stdout().lock();
                    transfer::export(&image, transfer::Sink::Stream(&mut out), &feed(&bar)).await
                } else {
                    let f = std::fs::File::create(path).with_context(|| format!("creating {path}"))?;
                    let r = transfer::export(&image, transfer::Sink::File(&f), &feed(&bar)).await;
                    f.sync_all().with_context(|| format!("syncing {path}"))?;
                    r
                }
                .with_context(|| format!("exporting {spec}"))?;
                bar.finish_and_clear();
                if c.json && path != "-" {
                    println!("{}", json!({ "exported": spec, "size_bytes": moved.size_bytes, "data_bytes": moved.data_bytes }));
                } else if path != "-" {
                    println!("exported {spec} to {path}: {} bytes ({} of data)", moved.size_bytes, moved.data_bytes);
                }
            }
            RbdCommand::Import { path, spec, size, object_size, .. } => {
                let (pool, name) = parse_spec(spec)?;
                let (mut src, size): (Box<dyn std::io::Read>, u64) = if path == "-" {
                    let Some(size) = size else { bail!("importing from stdin needs --size") };
                    (Box::new(std::io::stdin().lock()), *size)
                } else {
                    let f = std::fs::File::open(path).with_context(|| format!("opening {path}"))?;
                    let len = f.metadata().with_context(|| format!("reading the size of {path}"))?.len();
                    (Box::new(std::io::BufReader::with_capacity(1 << 20, f)), size.unwrap_or(len))
                };
                header::create(&client, pool, name, size, Layout::plain(*object_size), None)
                    .await
                    .with_context(|| format!("creating {spec}"))?;
                let image = shoal_rbd::Image::open(&client, pool, name, false).await?;
                let bar = bar_with(c.json, "importing", BYTES_TEMPLATE);
                let moved = transfer::import(&image, &mut *src, size, &feed(&bar))
                    .await
                    .with_context(|| format!("importing {path} into {spec} (the image is left as far as it got)"))?;
                bar.finish_and_clear();
                if c.json {
                    println!("{}", json!({ "imported": spec, "size_bytes": moved.size_bytes, "data_bytes": moved.data_bytes }));
                } else {
                    println!("imported {path} into {spec}: {} bytes ({} of data)", moved.size_bytes, moved.data_bytes);
                }
            }
            RbdCommand::Bench { spec, io_type, io_size, io_threads, io_total, io_pattern, .. } => {
                let (pool, name) = parse_spec(spec)?;
                let write = io_type == "write";
                if write {
                    // A server writing the image would be overwritten under it.
                    lock::check_unlocked(&client, pool, name).await.with_context(|| format!("benchmarking {spec}"))?;
                }
                let image = shoal_rbd::Image::open(&client, pool, name, !write).await?;
                let cfg = bench::BenchConfig {
                    write,
                    io_size_bytes: *io_size,
                    io_threads: *io_threads,
                    io_total_bytes: *io_total,
                    random: io_pattern == "rand",
                };
                let bar = bar_with(c.json, "benchmarking", "{msg} [{bar:30}] {pos}/{len} ops ({eta} left)");
                let r = bench::run(&image, cfg, &feed(&bar)).await.with_context(|| format!("benchmarking {spec}"))?;
                bar.finish_and_clear();
                if c.json {
                    println!(
                        "{}",
                        json!({
                            "image": spec, "io_type": io_type, "io_size_bytes": io_size, "io_threads": io_threads,
                            "io_pattern": io_pattern, "ops": r.ops, "bytes": r.bytes, "elapsed_s": r.elapsed_s,
                            "ops_per_s": r.ops_per_s, "bytes_per_s": r.bytes_per_s,
                            "p50_us": r.p50_us, "p99_us": r.p99_us, "max_us": r.max_us,
                        })
                    );
                } else {
                    println!(
                        "elapsed: {:.2} s  ops: {}  ops/sec: {:.0}  bytes/sec: {:.1} MiB/s  p50 {} µs  p99 {} µs",
                        r.elapsed_s,
                        r.ops,
                        r.ops_per_s,
                        r.bytes_per_s / f64::from(1u32 << 20),
                        r.p50_us,
                        r.p99_us
                    );
                }
            }
            RbdCommand::Clone { parent, child, .. } => {
                let (pool, image, snap_name) = parse_snap_required(parent)?;
                let (child_pool, child_name) = parse_spec(child)?;
                if child_pool != pool {
                    bail!("a clone lives in its parent's pool ({pool}), not {child_pool}");
                }
                let info = snap::clone(&client, pool, image, snap_name, child_name)
                    .await
                    .with_context(|| format!("cloning {parent} as {child}"))?;
                if c.json {
                    println!("{}", info_json(&info, pool));
                } else {
                    println!("cloned {parent} as {child}");
                }
            }
            RbdCommand::Flatten { spec, .. } => {
                let (pool, name) = parse_spec(spec)?;
                let bar = progress_bar(c.json, "flattening");
                snap::flatten(&client, pool, name, &feed(&bar)).await.with_context(|| format!("flattening {spec}"))?;
                bar.finish_and_clear();
                report_done(c.json, "flattened", spec);
            }
            RbdCommand::Children { spec, .. } => {
                let (pool, name, snap_name) = parse_snap_spec(spec)?;
                let kids = snap::children(&client, pool, name, snap_name)
                    .await
                    .with_context(|| format!("listing clones of {spec}"))?;
                if c.json {
                    println!("{}", json!({ "image": spec, "children": kids }));
                } else {
                    for k in kids {
                        println!("{pool}/{k}");
                    }
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

async fn snap_command(client: &shoal_client::Client, cmd: &SnapCommand, json_out: bool) -> Result<ExitCode> {
    match cmd {
        SnapCommand::Create { spec, wait_s, .. } => {
            let (pool, name, snap_name) = parse_snap_required(spec)?;
            let rec = snap::create(client, pool, name, snap_name, wait_s.saturating_mul(1000))
                .await
                .with_context(|| format!("creating snapshot {spec}"))?;
            if json_out {
                println!("{}", snap_json(&rec));
            } else {
                println!("created snapshot {spec} (id {})", rec.id);
            }
        }
        SnapCommand::Ls { spec, .. } => {
            let (pool, name) = parse_spec(spec)?;
            let info = header::open(client, pool, name).await.with_context(|| format!("reading {spec}"))?;
            if json_out {
                let snaps: Vec<_> = info.snaps.iter().map(snap_json).collect();
                println!("{}", json!({ "image": spec, "snapshots": snaps }));
            } else {
                println!("SNAPID\tNAME\tSIZE\tPROTECTED");
                for s in &info.snaps {
                    println!("{}\t{}\t{}\t{}", s.id, s.name, s.size_bytes, if s.protected { "yes" } else { "no" });
                }
            }
        }
        SnapCommand::Rm { spec, wait_s, .. } => {
            let (pool, name, snap_name) = parse_snap_required(spec)?;
            let bar = progress_bar(json_out, "trimming");
            snap::remove(client, pool, name, snap_name, wait_s.saturating_mul(1000), &feed(&bar))
                .await
                .with_context(|| format!("removing snapshot {spec}"))?;
            bar.finish_and_clear();
            report_done(json_out, "removed", spec);
        }
        SnapCommand::Rollback { spec, .. } => {
            let (pool, name, snap_name) = parse_snap_required(spec)?;
            let bar = progress_bar(json_out, "rolling back");
            snap::rollback(client, pool, name, snap_name, &feed(&bar))
                .await
                .with_context(|| format!("rolling back to {spec}"))?;
            bar.finish_and_clear();
            report_done(json_out, "rolled back to", spec);
        }
        SnapCommand::Protect { spec, .. } | SnapCommand::Unprotect { spec, .. } => {
            let protect = matches!(cmd, SnapCommand::Protect { .. });
            let (pool, name, snap_name) = parse_snap_required(spec)?;
            snap::set_protected(client, pool, name, snap_name, protect)
                .await
                .with_context(|| format!("{} {spec}", if protect { "protecting" } else { "unprotecting" }))?;
            report_done(json_out, if protect { "protected" } else { "unprotected" }, spec);
        }
    }
    Ok(ExitCode::SUCCESS)
}
