//! `shoal store-torture PATH --seed N`: a hidden subcommand driven by the crash test
//! (`crates/cli/tests/it/crash.rs`). It mounts an existing store and commits random transactions
//! with `Durability::Sync`, one after another, until it is killed or reaches `--max-txns`.
//!
//! The transactions are a pure function of the seed and their number (1, 2, ...): nothing about
//! the store's state goes into generating them, and every operation is valid in any state
//! (operations that need an object are preceded by a `touch` of it). The parent can therefore
//! replay them on a model of the store from what this prints on stdout, one line each:
//!
//! ```text
//! op N I write OBJ OFFSET LEN CSEED
//! op N I touch OBJ
//! op N I truncate OBJ SIZE
//! op N I remove OBJ
//! op N I setxattr OBJ NAME LEN CSEED
//! op N I omapset OBJ KEY LEN CSEED [KEY LEN CSEED ...]
//! begin N          (flushed before the commit starts)
//! ack N            (flushed after the commit returned)
//! ```
//!
//! `N` is the transaction number, `I` the operation's index in it, and every byte string
//! (written data, xattr and omap values) is `content(CSEED, LEN)` as defined below, where
//! `CSEED` is derived from (seed, N, I). The collection is always `t`, objects `o0`..`o7`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use shoal_store::{Durability, Transaction};

/// The collection the torture transactions work on.
pub const COLLECTION: &str = "t";

#[derive(Args)]
pub struct TortureArgs {
    /// An existing store (create it with `shoal store mkfs`).
    pub path: PathBuf,
    /// Seed of the transaction generator.
    #[arg(long)]
    pub seed: u64,
    /// Stop after this many transactions (default: run until killed).
    #[arg(long)]
    pub max_txns: Option<u64>,
}

/// One step of SplitMix64: a good 64-bit mixing function.
#[must_use]
pub fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A tiny xorshift64 generator.
pub struct Rng(u64);

impl Rng {
    #[must_use]
    pub fn new(seed: u64) -> Self {
        // xorshift must not start at zero.
        Self(splitmix(seed) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut s = self.0;
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        self.0 = s;
        s
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform-ish in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

/// The bytes of a write whose content seed is `cseed` (the crash test recomputes them with the
/// same function of `shoal_util::pattern`).
#[must_use]
pub fn content(cseed: u64, len: usize) -> Vec<u8> {
    shoal_util::pattern::xorshift_bytes(cseed, len)
}

/// Content seed of operation `index` of transaction `txn`.
fn content_seed(seed: u64, txn: u64, index: usize) -> u64 {
    splitmix(splitmix(seed ^ 0x5348_4F41_4C00_0000) ^ splitmix(txn) ^ (index as u64).rotate_left(48))
}

/// Builds transaction `txn` of the run with `seed`, and the lines describing it.
/// Stores at least this large also get writes of 1–2.5 MiB, which take the engine's io_uring
/// path with checksums computed while the data is in flight.
const LARGE_WRITES_MIN_STORE_BYTES: u64 = 128 << 20;

fn generate(seed: u64, txn: u64, large_writes: bool) -> (Transaction, Vec<String>) {
    const KIB: u64 = 1024;
    let mut rng = Rng::new(splitmix(seed) ^ splitmix(txn.wrapping_mul(0x9E37_79B9)));
    let mut t = Transaction::new();
    let mut lines = Vec::new();
    let c = COLLECTION;
    let n_ops = rng.range(1, 4);
    for _ in 0..n_ops {
        let obj = format!("o{}", rng.below(8));
        // Every operation except a write needs the object: touch it first.
        let kind = rng.below(100);
        if kind >= 50 {
            lines.push(format!("op {txn} {} touch {obj}", t.ops.len()));
            t.touch(c, &obj);
        }
        let i = t.ops.len();
        match kind {
            0..50 => {
                let len = match rng.below(if large_writes { 4 } else { 3 }) {
                    0 => rng.range(1, 100),
                    1 => rng.range(1, 16 * KIB),
                    2 => rng.range(1, 300 * KIB),
                    _ => rng.range(1024 * KIB, 2560 * KIB),
                };
                let offset = match rng.below(3) {
                    0 => rng.range(0, 128) * 4 * KIB, // block-aligned, up to 512 KiB
                    _ => rng.range(0, 512 * KIB),
                };
                let cseed = content_seed(seed, txn, i);
                lines.push(format!("op {txn} {i} write {obj} {offset} {len} {cseed}"));
                t.write(c, &obj, offset, content(cseed, len as usize));
            }
            50..62 => {
                let size = match rng.below(3) {
                    0 => 0,
                    1 => rng.range(0, 8 * KIB),
                    _ => rng.range(0, 700 * KIB),
                };
                lines.push(format!("op {txn} {i} truncate {obj} {size}"));
                t.truncate(c, &obj, size);
            }
            62..70 => {
                lines.push(format!("op {txn} {i} remove {obj}"));
                t.remove(c, &obj);
            }
            70..85 => {
                let name = format!("x{}", rng.below(4));
                let len = rng.range(0, 300);
                let cseed = content_seed(seed, txn, i);
                lines.push(format!("op {txn} {i} setxattr {obj} {name} {len} {cseed}"));
                t.set_xattr(c, &obj, &name, content(cseed, len as usize));
            }
            _ => {
                let mut line = format!("op {txn} {i} omapset {obj}");
                let mut entries = Vec::new();
                for e in 0..rng.range(1, 3) {
                    let key = format!("k{}", rng.below(16));
                    let len = rng.range(0, 200);
                    let cseed = content_seed(seed, txn, i) ^ splitmix(e);
                    line.push_str(&format!(" {key} {len} {cseed}"));
                    entries.push((key.into_bytes(), content(cseed, len as usize)));
                }
                lines.push(line);
                t.omap_set(c, &obj, entries);
            }
        }
    }
    (t, lines)
}

pub fn run(args: &TortureArgs) -> Result<ExitCode> {
    let store = shoal_store::open(&args.path).with_context(|| format!("mounting store {}", args.path.display()))?;
    if !store.collection_exists(COLLECTION)? {
        let mut txn = Transaction::new();
        txn.create_collection(COLLECTION);
        store.commit(txn, Durability::Sync).context("creating the torture collection")?;
    }
    let large_writes = store.usage()?.size_bytes >= LARGE_WRITES_MIN_STORE_BYTES;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    writeln!(out, "mounted")?;
    out.flush()?;
    let mut n = 0u64;
    while args.max_txns.is_none_or(|max| n < max) {
        n += 1;
        let (txn, lines) = generate(args.seed, n, large_writes);
        for line in &lines {
            writeln!(out, "{line}")?;
        }
        writeln!(out, "begin {n}")?;
        out.flush()?;
        store.commit(txn, Durability::Sync).with_context(|| format!("committing transaction {n}"))?;
        writeln!(out, "ack {n}")?;
        out.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_is_a_function_of_seed_and_number() {
        for n in 1..50 {
            let (a, la) = generate(7, n, true);
            let (b, lb) = generate(7, n, true);
            assert_eq!(a, b);
            assert_eq!(la, lb);
            assert_eq!(la.len(), a.ops.len());
            assert!((1..=8).contains(&a.ops.len()));
        }
        assert_ne!(generate(7, 1, true).0, generate(8, 1, true).0);
    }
}
