//! `shoal demo`: the README's first command. Creates a `block` store on a file, stores objects
//! of several sizes, reads them back, checks the store, and runs the quick benchmark.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;
use shoal_store::bench::{self, BenchConfig};
use shoal_store::{BackendKind, Durability, MkfsOptions, Transaction};

#[derive(Args)]
pub struct DemoArgs {
    /// Where to put the demo store and bench files (default: ./shoal-demo, replaced).
    #[arg(long, default_value = "shoal-demo")]
    dir: PathBuf,
    /// Skip the benchmark.
    #[arg(long)]
    no_bench: bool,
}

pub fn run(args: &DemoArgs) -> Result<ExitCode> {
    let store_dir = args.dir.join("store");
    println!("1. creating a 256 MiB block store in {}", store_dir.display());
    let opts = MkfsOptions { backend: BackendKind::Block, size_bytes: 256 << 20, device: None, force: true };
    let store = shoal_store::mkfs(&store_dir, &opts).context("creating the demo store")?;

    println!("2. writing objects of 0 B to 8 MiB durably");
    let sizes = [0usize, 1, 4095, 4096, 65_536, 1 << 20, 8 << 20];
    let mut txn = Transaction::new();
    txn.create_collection("demo");
    store.commit(txn, Durability::Sync)?;
    for (i, &size) in sizes.iter().enumerate() {
        let data: Vec<u8> = (0..size).map(|b| (b * 31 + i) as u8).collect();
        let mut txn = Transaction::new();
        txn.write("demo", &format!("object-{i}"), 0, data).set_xattr(
            "demo",
            &format!("object-{i}"),
            "size",
            size.to_string().into_bytes(),
        );
        store.commit(txn, Durability::Sync)?;
    }
    println!("3. reading them back and comparing every byte");
    for (i, &size) in sizes.iter().enumerate() {
        let got = store.read_all("demo", &format!("object-{i}"))?;
        let want: Vec<u8> = (0..size).map(|b| (b * 31 + i) as u8).collect();
        if got != want {
            bail!("object-{i} read back wrong");
        }
    }
    drop(store);
    println!("4. remounting and checking the store (every block against its crc32c)");
    let store = shoal_store::open(&store_dir)?;
    let report = store.fsck()?;
    let usage = store.usage()?;
    println!(
        "   {} objects, {} bytes verified, {} of {} bytes used: {}",
        report.objects,
        report.bytes_verified,
        usage.used_bytes,
        usage.size_bytes,
        if report.is_clean() { "clean" } else { "PROBLEMS" }
    );
    drop(store);
    println!("   try: shoal store ls {0}; shoal store get {0} demo/object-5 | wc -c", store_dir.display());
    if !report.is_clean() {
        return Ok(ExitCode::FAILURE);
    }
    if !args.no_bench {
        println!("5. quick benchmark: block engine vs plain files (posix) vs RAM vs the raw file");
        let cfg = BenchConfig::quick(args.dir.join("bench"));
        let report = bench::run(&cfg, &mut |msg| eprintln!("   {msg}"))?;
        print!("{}", crate::table::render(&report));
    }
    Ok(ExitCode::SUCCESS)
}
