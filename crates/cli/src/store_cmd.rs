//! `shoal store VERB PATH ...`: the standalone object store.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use shoal_store::bench::{self, BenchConfig};
use shoal_store::{BackendKind, Durability, MkfsOptions, ObjectStore, Transaction, open::describe};

/// Bytes moved per transaction or read by `put` and `get`.
const CHUNK_BYTES: usize = 4 << 20;

#[derive(Subcommand)]
pub enum StoreCommand {
    /// Create a store in directory PATH.
    Mkfs {
        /// block (direct I/O on a file or device, metadata in fjall) or posix (file per object).
        #[arg(long, default_value = "block")]
        backend: String,
        /// Capacity, e.g. 4G. For block without --device, the size of the data file.
        #[arg(long, default_value = "1G")]
        size: String,
        /// Put block data on this raw block device or existing file instead of PATH/block.
        #[arg(long)]
        device: Option<PathBuf>,
        /// Overwrite an existing store or non-empty directory.
        #[arg(long)]
        force: bool,
        #[arg(long)]
        json: bool,
        path: PathBuf,
    },
    /// Show capacity, usage and layout.
    Status {
        path: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Store FILE (or stdin with -) as COLLECTION/OBJECT, creating the collection if missing.
    Put {
        path: PathBuf,
        target: String,
        file: PathBuf,
        /// Durable on return (otherwise durable at the next sync).
        #[arg(long)]
        sync: bool,
    },
    /// Write COLLECTION/OBJECT to stdout or to -o FILE.
    Get {
        path: PathBuf,
        target: String,
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
    },
    /// Remove COLLECTION/OBJECT.
    Rm {
        path: PathBuf,
        target: String,
        #[arg(long)]
        sync: bool,
    },
    /// List objects as COLLECTION/OBJECT lines (all collections, or one).
    Ls {
        path: PathBuf,
        collection: Option<String>,
        #[arg(long, default_value = "")]
        prefix: String,
        #[arg(long)]
        json: bool,
    },
    /// Size and modification time of COLLECTION/OBJECT.
    Stat {
        path: PathBuf,
        target: String,
        #[arg(long)]
        json: bool,
    },
    /// Verify every object's data against its checksums and the space accounting.
    Fsck {
        path: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Benchmark block, posix and mem backends and the raw device, in scratch directory PATH.
    Bench(BenchArgs),
}

#[derive(Args)]
pub struct BenchArgs {
    /// Scratch directory (created; its bench files are overwritten).
    pub path: PathBuf,
    /// Reduced matrix, under a minute.
    #[arg(long)]
    pub quick: bool,
    /// Use this raw block device or file for the raw measurement and the block store
    /// (its contents are destroyed).
    #[arg(long)]
    pub device: Option<PathBuf>,
    /// Size of the block store and of the raw region; the bench file is twice this
    /// (default: 1G, or 256M with --quick).
    #[arg(long)]
    pub size: Option<String>,
    /// Comma-separated backends to run (default: block,posix,mem).
    #[arg(long)]
    pub backends: Option<String>,
    /// Comma-separated durability modes (default: sync,batch,nosync).
    #[arg(long)]
    pub modes: Option<String>,
    /// Comma-separated block sizes, e.g. 4K,4M (default: 4K,16K,64K,256K,1M,4M).
    #[arg(long)]
    pub sizes: Option<String>,
    /// Times each cell is measured; the median is reported (default 5, or 1 with --quick).
    #[arg(long)]
    pub rounds: Option<u32>,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON document to this file (the table still goes to stdout).
    #[arg(long)]
    pub json_out: Option<PathBuf>,
}

fn split_target(target: &str) -> Result<(&str, &str)> {
    match target.split_once('/') {
        Some((c, o)) if !c.is_empty() && !o.is_empty() => Ok((c, o)),
        _ => bail!("{target:?} is not COLLECTION/OBJECT"),
    }
}

fn mount(path: &Path) -> Result<shoal_store::Store> {
    shoal_store::open(path).with_context(|| format!("mounting store {}", path.display()))
}

fn print_json(value: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

pub fn run(cmd: StoreCommand) -> Result<ExitCode> {
    match cmd {
        StoreCommand::Mkfs { backend, size, device, force, json, path } => {
            let backend: BackendKind = backend.parse()?;
            let size_bytes = shoal_store::parse_size(&size)?;
            let opts = MkfsOptions { backend, size_bytes, device, force };
            let store =
                shoal_store::mkfs(&path, &opts).with_context(|| format!("creating store {}", path.display()))?;
            let usage = store.usage()?;
            if json {
                print_json(&serde_json::json!({"path": path, "backend": backend, "size_bytes": usage.size_bytes}))?;
            } else {
                println!("created {} store at {} ({} bytes)", backend.name(), path.display(), usage.size_bytes);
            }
        }
        StoreCommand::Status { path, json } => {
            let d = describe(&path)?;
            let store = mount(&path)?;
            let usage = store.usage()?;
            if json {
                print_json(&serde_json::json!({"path": path, "backend": d.backend, "usage": usage}))?;
            } else {
                println!("store:       {}", path.display());
                println!("backend:     {}", d.backend);
                println!("capacity:    {} bytes", usage.size_bytes);
                println!("used:        {} bytes", usage.used_bytes);
                println!("collections: {}", usage.collections);
                println!("objects:     {}", usage.objects);
            }
        }
        StoreCommand::Put { path, target, file, sync } => {
            let (coll, obj) = split_target(&target)?;
            let store = mount(&path)?;
            put(store.as_ref(), coll, obj, &file, sync)?;
        }
        StoreCommand::Get { path, target, output } => {
            let (coll, obj) = split_target(&target)?;
            let store = mount(&path)?;
            let mut out: Box<dyn Write> = match &output {
                Some(p) => Box::new(std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?),
                None => Box::new(std::io::stdout().lock()),
            };
            let size = store.stat(coll, obj)?.size_bytes;
            let mut off = 0u64;
            while off < size {
                let chunk = store.read(coll, obj, off, CHUNK_BYTES as u64)?;
                out.write_all(&chunk).context("writing output")?;
                off += chunk.len() as u64;
            }
            out.flush().context("writing output")?;
        }
        StoreCommand::Rm { path, target, sync } => {
            let (coll, obj) = split_target(&target)?;
            let store = mount(&path)?;
            let mut txn = Transaction::new();
            txn.remove(coll, obj);
            store.commit(txn, if sync { Durability::Sync } else { Durability::Batch })?;
        }
        StoreCommand::Ls { path, collection, prefix, json } => {
            let store = mount(&path)?;
            let colls = match collection {
                Some(c) => vec![c],
                None => store.list_collections()?,
            };
            let mut all = Vec::new();
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            for coll in colls {
                let mut after: Option<String> = None;
                loop {
                    let page = store.list_objects(&coll, &prefix, after.as_deref(), 1000)?;
                    for o in &page.objects {
                        if json {
                            all.push(format!("{coll}/{o}"));
                        } else {
                            writeln!(out, "{coll}/{o}")?;
                        }
                    }
                    match page.next {
                        Some(n) => after = Some(n),
                        None => break,
                    }
                }
            }
            if json {
                print_json(&all)?;
            }
        }
        StoreCommand::Stat { path, target, json } => {
            let (coll, obj) = split_target(&target)?;
            let store = mount(&path)?;
            let st = store.stat(coll, obj)?;
            if json {
                print_json(
                    &serde_json::json!({"collection": coll, "object": obj, "size_bytes": st.size_bytes, "mtime_ns": st.mtime_ns}),
                )?;
            } else {
                println!("{coll}/{obj} size {} mtime_ns {}", st.size_bytes, st.mtime_ns);
            }
        }
        StoreCommand::Fsck { path, json } => {
            let store = mount(&path)?;
            let report = store.fsck()?;
            if json {
                print_json(&report)?;
            } else {
                println!(
                    "{} collections, {} objects, {} bytes verified",
                    report.collections, report.objects, report.bytes_verified
                );
                for e in &report.errors {
                    println!("error: {e}");
                }
                println!("{}", if report.is_clean() { "clean" } else { "PROBLEMS FOUND" });
            }
            if !report.is_clean() {
                return Ok(ExitCode::FAILURE);
            }
        }
        StoreCommand::Bench(args) => bench_cmd(&args)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Stores a file as an object, replacing any previous content. Files up to one chunk are one
/// atomic transaction; larger ones are written chunk by chunk (a crash in the middle leaves a
/// shorter object, never wrong bytes).
pub fn put(store: &dyn ObjectStore, coll: &str, obj: &str, file: &Path, sync: bool) -> Result<u64> {
    let mut input: Box<dyn Read> = if file == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?)
    };
    if !store.collection_exists(coll)? {
        let mut txn = Transaction::new();
        txn.create_collection(coll);
        store.commit(txn, Durability::Batch)?;
    }
    let mut off = 0u64;
    let mut first = true;
    loop {
        let mut chunk = Vec::with_capacity(CHUNK_BYTES);
        input.by_ref().take(CHUNK_BYTES as u64).read_to_end(&mut chunk).context("reading input")?;
        let last = chunk.len() < CHUNK_BYTES;
        let mut txn = Transaction::new();
        if first {
            txn.touch(coll, obj).truncate(coll, obj, 0);
            first = false;
        }
        let n = chunk.len() as u64;
        if n > 0 {
            txn.write(coll, obj, off, chunk);
        }
        store.commit(txn, if last && sync { Durability::Sync } else { Durability::Batch })?;
        off += n;
        if last {
            return Ok(off);
        }
    }
}

fn bench_cmd(args: &BenchArgs) -> Result<()> {
    let mut cfg = if args.quick { BenchConfig::quick(args.path.clone()) } else { BenchConfig::full(args.path.clone()) };
    cfg.device = args.device.clone();
    if let Some(size) = &args.size {
        cfg.device_bytes = shoal_store::parse_size(size)?;
    }
    if let Some(b) = &args.backends {
        cfg.backends = b.split(',').map(str::parse).collect::<Result<_, _>>()?;
    }
    if let Some(r) = args.rounds {
        cfg.rounds = r;
    }
    if let Some(m) = &args.modes {
        cfg.modes = m.split(',').map(str::parse).collect::<Result<_, _>>()?;
    }
    if let Some(sizes) = &args.sizes {
        cfg.block_sizes = sizes.split(',').map(shoal_store::parse_size).collect::<Result<_, _>>()?;
    }
    let bar = indicatif::ProgressBar::new(bench::total_steps(&cfg));
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let report = bench::run(&cfg, &mut |msg| {
        bar.inc(1);
        bar.set_message(msg.to_string());
    });
    bar.finish_and_clear();
    let report = report.context("running the benchmark")?;
    if let Some(path) = &args.json_out {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        print_json(&report)?;
    } else {
        print!("{}", crate::table::render(&report));
    }
    Ok(())
}
