//! fjall 3.1 vs redb 4.5 on the metadata workload of Shoal's `block` engine.
//!
//! Evidence for docs/decisions/0002-metadata-kv-engine.md. Each engine sits behind the same
//! small interface that mirrors `shoal_store::engine::kv::Kv`: atomic multi-keyspace batches
//! committed either with or without a sync, an explicit `sync()`, point reads and range scans
//! over a snapshot. Build with exactly one of the features `fjall` or `redb`.
//!
//! Usage: kv-choice DIR [RUN_LABEL]    (DIR is created and must not exist)
//!
//! Phases, each on a fresh database:
//!   A:  (a) engine commits, objects in ascending order; (c) point reads and (d) range scans
//!       on the same handle; settle; (c) and (d) again; close; reopen; (c) and (d) again;
//!   A2: (a) with the objects in shuffled order, then settle;
//!   B:  (b) synced small batches, keys scattered over the keyspace; close; reopen; settle;
//!   B2: (b) with the 100 keys of each batch consecutive under a hashed prefix, then settle.
//! "Settle" makes fjall write its memtables out as tables (see `Engine::settle`) so that the
//! write amplification can include that deferred work; for redb it does nothing.
//! Device writes come from the process's own `/proc/self/io` counters, which include the
//! engines' background threads.

#![cfg_attr(not(any(feature = "fjall", feature = "redb")), allow(dead_code, unused))]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

// ---------------------------------------------------------------------------------------------
// Workload parameters

/// (a) engine commits: batches of three records, a sync every `A_SYNC_EVERY` batches.
const A_BATCHES: u64 = 20_000;
const A_SYNC_EVERY: u64 = 100;
/// Objects per collection: a prefix scan over one collection returns this many keys.
const OBJS_PER_COLL: u64 = 100;
const ONODE_VALUE: usize = 40;
const EXTENT_VALUE: usize = 60;
/// (b) synced small batches.
const B_BATCHES: u64 = 2_000;
const B_PUTS: u64 = 100;
const B_VALUE: usize = 100;
/// (c) and (d).
const GETS: usize = 200_000;
const SCANS: usize = 1_000;

/// Keyspaces (fjall) or tables (redb), the same seven as the engine's `Ks`.
#[derive(Clone, Copy, Debug)]
enum Ks {
    Onodes = 2,
    Extents = 3,
    Free = 6,
    Omap = 5,
}
const KS_NAMES: [&str; 7] = ["meta", "colls", "onodes", "extents", "xattrs", "omap", "free"];

/// Same budgets as `shoal_store::engine::kv` uses for fjall; redb gets the same cache size.
const CACHE_BYTES: u64 = 16 << 20;
#[cfg(feature = "fjall")]
const MEMTABLE_BYTES: u64 = 8 << 20;
#[cfg(feature = "fjall")]
const MAX_JOURNAL_BYTES: u64 = 64 << 20;

// ---------------------------------------------------------------------------------------------
// The interface the engine needs (see crates/store/src/engine/kv.rs)

trait Engine: Sized {
    const NAME: &'static str;
    fn open(dir: &Path) -> R<Self>;
    /// Applies the puts atomically; with `sync` they and everything before are durable on return.
    fn commit(&self, puts: &[(Ks, &[u8], &[u8])], sync: bool) -> R<()>;
    /// Makes every committed batch durable.
    fn sync(&self) -> R<()>;
    /// `Kv::get`: a point read that sees every committed batch.
    fn get(&self, ks: Ks, key: &[u8]) -> R<Option<Vec<u8>>>;
    /// Point reads inside one snapshot / read transaction; returns how many were found.
    fn get_many_one_view(&self, keys: &[(Ks, Vec<u8>)]) -> R<usize>;
    /// `Kv::scan` over a fresh snapshot: number of entries with `lo <= key < hi`.
    fn scan_count(&self, ks: Ks, lo: &[u8], hi: &[u8]) -> R<usize>;
    /// Not part of `Kv`: does the deferred work that committed data still owes the disk, so
    /// that write amplification can be counted in full. fjall writes its memtables out as
    /// tables (which it does on its own once a memtable reaches 8 MiB or the journals 64 MiB);
    /// redb owes nothing once a commit is durable.
    fn settle(&self) -> R<()>;
}

#[cfg(feature = "fjall")]
mod fj {
    use super::*;
    use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};
    use std::ops::Bound;

    pub struct Fjall {
        db: Database,
        ks: Vec<Keyspace>,
    }

    impl Engine for Fjall {
        const NAME: &'static str = "fjall";

        fn open(dir: &Path) -> R<Self> {
            // Exactly FjallKv::open in crates/store/src/engine/kv.rs.
            let db = Database::builder(dir)
                .cache_size(CACHE_BYTES)
                .max_journaling_size(MAX_JOURNAL_BYTES)
                .worker_threads(1)
                .open()?;
            let mut ks = Vec::new();
            for name in KS_NAMES {
                ks.push(db.keyspace(name, || KeyspaceCreateOptions::default().max_memtable_size(MEMTABLE_BYTES))?);
            }
            Ok(Self { db, ks })
        }

        fn commit(&self, puts: &[(Ks, &[u8], &[u8])], sync: bool) -> R<()> {
            // As FjallKv::commit: `db.batch()` defaults to PersistMode::Buffer (the batch is
            // handed to the OS with write(2), no fsync); a synced commit adds fdatasync.
            let mut b = self.db.batch();
            if sync {
                b = b.durability(Some(PersistMode::SyncData));
            }
            for (ks, k, v) in puts {
                b.insert(&self.ks[*ks as usize], *k, *v);
            }
            b.commit()?;
            Ok(())
        }

        fn sync(&self) -> R<()> {
            self.db.persist(PersistMode::SyncData)?;
            Ok(())
        }

        fn get(&self, ks: Ks, key: &[u8]) -> R<Option<Vec<u8>>> {
            Ok(self.ks[ks as usize].get(key)?.map(|v| v.to_vec()))
        }

        fn get_many_one_view(&self, keys: &[(Ks, Vec<u8>)]) -> R<usize> {
            let snap = self.db.snapshot();
            let mut found = 0;
            for (ks, k) in keys {
                found += usize::from(snap.get(&self.ks[*ks as usize], k)?.is_some());
            }
            Ok(found)
        }

        fn scan_count(&self, ks: Ks, lo: &[u8], hi: &[u8]) -> R<usize> {
            let snap = self.db.snapshot();
            let mut n = 0;
            for guard in snap.range::<&[u8], _>(&self.ks[ks as usize], (Bound::Included(lo), Bound::Excluded(hi))) {
                let (k, v) = guard.into_inner()?;
                std::hint::black_box((&k, &v));
                n += 1;
            }
            Ok(n)
        }

        fn settle(&self) -> R<()> {
            // `rotate_memtable_and_wait` is public but doc(hidden) (fjall uses it in its tests).
            for ks in &self.ks {
                ks.rotate_memtable_and_wait()?;
            }
            Ok(())
        }
    }
}

#[cfg(feature = "redb")]
mod rd {
    use super::*;
    use redb::{Database, Durability, ReadableDatabase, TableDefinition};

    const DEFS: [TableDefinition<&[u8], &[u8]>; 7] = [
        TableDefinition::new(KS_NAMES[0]),
        TableDefinition::new(KS_NAMES[1]),
        TableDefinition::new(KS_NAMES[2]),
        TableDefinition::new(KS_NAMES[3]),
        TableDefinition::new(KS_NAMES[4]),
        TableDefinition::new(KS_NAMES[5]),
        TableDefinition::new(KS_NAMES[6]),
    ];

    pub struct Redb {
        db: Database,
    }

    impl Engine for Redb {
        const NAME: &'static str = "redb";

        fn open(dir: &Path) -> R<Self> {
            std::fs::create_dir_all(dir)?;
            let db = Database::builder().set_cache_size(CACHE_BYTES as usize).create(dir.join("meta.redb"))?;
            // Create the seven tables once, as fjall creates its keyspaces.
            let txn = db.begin_write()?;
            for def in DEFS {
                txn.open_table(def)?;
            }
            txn.commit()?;
            Ok(Self { db })
        }

        fn commit(&self, puts: &[(Ks, &[u8], &[u8])], sync: bool) -> R<()> {
            let mut txn = self.db.begin_write()?;
            // Durability::None: the commit is visible to readers but reaches the file only with
            // a later Immediate commit (it does not survive a crash of the process).
            txn.set_durability(if sync { Durability::Immediate } else { Durability::None })?;
            {
                // Open each table once per transaction.
                let mut tables: [Option<redb::Table<&[u8], &[u8]>>; 7] = Default::default();
                for (ks, k, v) in puts {
                    let slot = &mut tables[*ks as usize];
                    if slot.is_none() {
                        *slot = Some(txn.open_table(DEFS[*ks as usize])?);
                    }
                    slot.as_mut().unwrap().insert(*k, *v)?;
                }
            }
            txn.commit()?;
            Ok(())
        }

        fn sync(&self) -> R<()> {
            // An empty transaction committed with Durability::Immediate makes every earlier
            // non-durable commit durable.
            let mut txn = self.db.begin_write()?;
            txn.set_durability(Durability::Immediate)?;
            txn.commit()?;
            Ok(())
        }

        fn get(&self, ks: Ks, key: &[u8]) -> R<Option<Vec<u8>>> {
            // A `Kv::get` must see the latest commit, so it needs its own read transaction.
            let txn = self.db.begin_read()?;
            let table = txn.open_table(DEFS[ks as usize])?;
            Ok(table.get(key)?.map(|g| g.value().to_vec()))
        }

        fn get_many_one_view(&self, keys: &[(Ks, Vec<u8>)]) -> R<usize> {
            let txn = self.db.begin_read()?;
            let mut tables = Vec::new();
            for def in DEFS {
                tables.push(txn.open_table(def)?);
            }
            let mut found = 0;
            for (ks, k) in keys {
                if let Some(g) = tables[*ks as usize].get(k.as_slice())? {
                    std::hint::black_box(g.value());
                    found += 1;
                }
            }
            Ok(found)
        }

        fn scan_count(&self, ks: Ks, lo: &[u8], hi: &[u8]) -> R<usize> {
            let txn = self.db.begin_read()?;
            let table = txn.open_table(DEFS[ks as usize])?;
            let mut n = 0;
            for item in table.range::<&[u8]>(lo..hi)? {
                let (k, v) = item?;
                std::hint::black_box((k.value(), v.value()));
                n += 1;
            }
            Ok(n)
        }

        fn settle(&self) -> R<()> {
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// splitmix64: deterministic, dependency-free pseudo-random numbers.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn write_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Bytes allocated on disk (not apparent sizes: fjall preallocates its journal).
fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => total += dir_bytes(&e.path()),
                Ok(m) => total += std::os::unix::fs::MetadataExt::blocks(&m) * 512,
                Err(_) => {}
            }
        }
    }
    total
}

struct Lat(Vec<u64>);
impl Lat {
    fn pct(&mut self, p: f64) -> f64 {
        self.0.sort_unstable();
        let i = ((self.0.len() as f64 - 1.0) * p).round() as usize;
        self.0[i] as f64 / 1e3
    }
}

fn report(engine: &str, label: &str, metric: &str, value: f64, unit: &str) {
    println!("{engine}\t{label}\t{metric}\t{value:.3}\t{unit}");
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// (a): object key `cNNNN NUL obj-NNNNNNNNNN` (20 bytes), 100 objects per collection.
fn onode_key(i: u64) -> Vec<u8> {
    let mut k = format!("c{:04}", i / OBJS_PER_COLL).into_bytes();
    k.push(0);
    k.extend_from_slice(format!("obj-{i:010}").as_bytes());
    k
}
/// (a): extent key: object key, NUL, logical end as u64 big-endian (29 bytes).
fn extent_key(i: u64) -> Vec<u8> {
    let mut k = onode_key(i);
    k.push(0);
    k.extend_from_slice(&(4096u64).to_be_bytes());
    k
}
/// (a): free-space record: offset and length, u64 big-endian each (16 bytes together).
fn free_key(i: u64) -> Vec<u8> {
    ((i + 1) << 16).to_be_bytes().to_vec()
}
/// (b) scattered: 16-byte keys, each at a hashed place in the keyspace.
fn b_key_scattered(seed: u64, n: u64) -> Vec<u8> {
    let mut k = Rng(seed ^ n).next().to_be_bytes().to_vec();
    k.extend_from_slice(&n.to_be_bytes());
    k
}
/// (b) clustered: 16-byte keys, the 100 keys of a batch consecutive under a hashed prefix
/// (as the omap keys of one object are).
fn b_key_clustered(seed: u64, batch: u64, j: u64) -> Vec<u8> {
    let mut k = Rng(seed ^ batch).next().to_be_bytes().to_vec();
    k.extend_from_slice(&j.to_be_bytes());
    k
}

struct Ctx<'a> {
    name: &'static str,
    label: &'a str,
}
impl Ctx<'_> {
    fn put(&self, metric: &str, value: f64, unit: &str) {
        report(self.name, self.label, metric, value, unit);
    }
}

/// Runs `settle` and reports the bytes it wrote and the write amplification including them.
fn settle<E: Engine>(cx: &Ctx, db: &E, tag: &str, phase_bytes: u64, user: u64) -> R<()> {
    let w0 = write_bytes();
    let t = Instant::now();
    db.settle()?;
    let w = write_bytes() - w0;
    cx.put(&format!("{tag}_settle_s"), secs(t.elapsed()), "s");
    cx.put(&format!("{tag}_settle_write_bytes"), w as f64, "B");
    cx.put(&format!("{tag}_write_amp_settled"), (phase_bytes + w) as f64 / user as f64, "x");
    Ok(())
}

/// (a) engine commits: batch `i` writes the records of object `order[i]`, and every
/// `A_SYNC_EVERY`-th batch is followed by a sync. Returns (device bytes written, user bytes).
fn phase_a<E: Engine>(cx: &Ctx, db: &E, tag: &str, order: &[u64], rng: &mut Rng) -> R<(u64, u64)> {
    let onode_vals: Vec<Vec<u8>> = (0..order.len()).map(|_| rng.bytes(ONODE_VALUE)).collect();
    let extent_vals: Vec<Vec<u8>> = (0..order.len()).map(|_| rng.bytes(EXTENT_VALUE)).collect();
    let keys: Vec<[Vec<u8>; 3]> =
        order.iter().enumerate().map(|(i, &o)| [onode_key(o), extent_key(o), free_key(i as u64)]).collect();
    let free_val = 65536u64.to_be_bytes();
    let user: u64 = keys
        .iter()
        .map(|k| (k[0].len() + ONODE_VALUE + k[1].len() + EXTENT_VALUE + k[2].len() + free_val.len()) as u64)
        .sum();
    let mut lat = Lat(Vec::with_capacity(order.len()));
    let w0 = write_bytes();
    let t = Instant::now();
    for (i, k) in keys.iter().enumerate() {
        let s = Instant::now();
        db.commit(
            &[(Ks::Onodes, &k[0], &onode_vals[i]), (Ks::Extents, &k[1], &extent_vals[i]), (Ks::Free, &k[2], &free_val)],
            false,
        )?;
        if (i as u64 + 1) % A_SYNC_EVERY == 0 {
            db.sync()?;
        }
        lat.0.push(s.elapsed().as_nanos() as u64);
    }
    let el = t.elapsed();
    let w = write_bytes() - w0;
    cx.put(&format!("{tag}_time"), secs(el), "s");
    cx.put(&format!("{tag}_batches_per_s"), order.len() as f64 / secs(el), "batch/s");
    cx.put(&format!("{tag}_p50"), lat.pct(0.50), "us");
    cx.put(&format!("{tag}_p99"), lat.pct(0.99), "us");
    cx.put(&format!("{tag}_max"), lat.pct(1.0), "us");
    cx.put(&format!("{tag}_user_bytes"), user as f64, "B");
    cx.put(&format!("{tag}_dev_write_bytes"), w as f64, "B");
    cx.put(&format!("{tag}_write_amp"), w as f64 / user as f64, "x");
    Ok((w, user))
}

/// (b) synced small batches. Returns (device bytes written, user bytes, last key written).
fn phase_b<E: Engine>(cx: &Ctx, db: &E, tag: &str, clustered: bool, rng: &mut Rng) -> R<(u64, u64, Vec<u8>)> {
    let seed = rng.next();
    let vals: Vec<Vec<u8>> = (0..B_PUTS).map(|_| rng.bytes(B_VALUE)).collect();
    let user = B_BATCHES * B_PUTS * (16 + B_VALUE as u64);
    let mut lat = Lat(Vec::with_capacity(B_BATCHES as usize));
    let mut batch_keys: Vec<Vec<u8>> = Vec::with_capacity(B_PUTS as usize);
    let w0 = write_bytes();
    let t = Instant::now();
    for b in 0..B_BATCHES {
        batch_keys.clear();
        batch_keys.extend((0..B_PUTS).map(|j| {
            if clustered { b_key_clustered(seed, b, j) } else { b_key_scattered(seed, b * B_PUTS + j) }
        }));
        let puts: Vec<(Ks, &[u8], &[u8])> =
            batch_keys.iter().zip(&vals).map(|(k, v)| (Ks::Omap, k.as_slice(), v.as_slice())).collect();
        let s = Instant::now();
        db.commit(&puts, true)?;
        lat.0.push(s.elapsed().as_nanos() as u64);
    }
    let el = t.elapsed();
    let w = write_bytes() - w0;
    cx.put(&format!("{tag}_time"), secs(el), "s");
    cx.put(&format!("{tag}_batches_per_s"), B_BATCHES as f64 / secs(el), "batch/s");
    cx.put(&format!("{tag}_puts_per_s"), (B_BATCHES * B_PUTS) as f64 / secs(el), "put/s");
    cx.put(&format!("{tag}_p50"), lat.pct(0.50), "us");
    cx.put(&format!("{tag}_p99"), lat.pct(0.99), "us");
    cx.put(&format!("{tag}_max"), lat.pct(1.0), "us");
    cx.put(&format!("{tag}_user_bytes"), user as f64, "B");
    cx.put(&format!("{tag}_dev_write_bytes"), w as f64, "B");
    cx.put(&format!("{tag}_write_amp"), w as f64 / user as f64, "x");
    Ok((w, user, batch_keys.pop().expect("a batch has keys")))
}

fn run<E: Engine>(root: &Path, label: &str) -> R<()> {
    let cx = Ctx { name: E::NAME, label };
    let mut rng = Rng(0x5EED_0001);

    // ---- database A: (a) with objects in ascending order, (c), (d), reopen, (c), (d) ----
    let dir_a: PathBuf = root.join("a");
    let t = Instant::now();
    let db = E::open(&dir_a)?;
    cx.put("create_s", secs(t.elapsed()), "s");
    let ascending: Vec<u64> = (0..A_BATCHES).collect();
    let (wa, user_a) = phase_a(&cx, &db, "a", &ascending, &mut rng)?;

    // (c) point reads of existing keys.
    let get_keys: Vec<(Ks, Vec<u8>)> = (0..GETS)
        .map(|_| {
            let o = rng.below(A_BATCHES);
            match rng.below(3) {
                0 => (Ks::Onodes, onode_key(o)),
                1 => (Ks::Extents, extent_key(o)),
                // Batch i wrote free key i; in database A object o was written by batch o.
                _ => (Ks::Free, free_key(o)),
            }
        })
        .collect();
    let gets = |db: &E, what: &str| -> R<()> {
        let t = Instant::now();
        let mut found = 0usize;
        for (ks, k) in &get_keys {
            found += usize::from(db.get(*ks, k)?.is_some());
        }
        let el = t.elapsed();
        assert_eq!(found, GETS, "{what}: missing keys");
        cx.put(&format!("{what}_gets_per_s"), GETS as f64 / secs(el), "get/s");
        let t = Instant::now();
        let found = db.get_many_one_view(&get_keys)?;
        let el = t.elapsed();
        assert_eq!(found, GETS, "{what}: missing keys (one view)");
        cx.put(&format!("{what}_gets_one_view_per_s"), GETS as f64 / secs(el), "get/s");
        Ok(())
    };
    // (d) 1,000 prefix scans over the objects of one collection (100 keys each).
    let scans = |db: &E, what: &str, rng: &mut Rng| -> R<()> {
        let colls = A_BATCHES / OBJS_PER_COLL;
        let t = Instant::now();
        for _ in 0..SCANS {
            let c = rng.below(colls);
            let mut lo = format!("c{c:04}").into_bytes();
            let mut hi = lo.clone();
            lo.push(0);
            hi.push(1);
            let n = db.scan_count(Ks::Onodes, &lo, &hi)?;
            assert_eq!(n as u64, OBJS_PER_COLL, "scan of collection {c}");
        }
        let el = t.elapsed();
        cx.put(&format!("{what}_scans_per_s"), SCANS as f64 / secs(el), "scan/s");
        Ok(())
    };
    // Same handle, right after the commits (fjall: the data is still in its memtables).
    gets(&db, "c_same")?;
    scans(&db, "d_same", &mut rng)?;
    // Same handle after the deferred writes (fjall: the data is in tables, as it is in
    // steady state for anything older than the last 8 MiB of writes).
    settle(&cx, &db, "a", wa, user_a)?;
    gets(&db, "c_settled")?;
    scans(&db, "d_settled", &mut rng)?;
    let w0 = write_bytes();
    drop(db);
    cx.put("a_close_write_bytes", (write_bytes() - w0) as f64, "B");
    cx.put("a_disk_bytes", dir_bytes(&dir_a) as f64, "B");
    let t = Instant::now();
    let db = E::open(&dir_a)?;
    cx.put("a_reopen_s", secs(t.elapsed()), "s");
    gets(&db, "c_reopen")?;
    scans(&db, "d_reopen", &mut rng)?;
    drop(db);

    // ---- database A2: (a) with objects in shuffled order, writes only ----
    let dir = root.join("a-shuffled");
    let db = E::open(&dir)?;
    let mut shuffled = ascending;
    for i in (1..shuffled.len()).rev() {
        shuffled.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let (w, user) = phase_a(&cx, &db, "a_shuf", &shuffled, &mut rng)?;
    settle(&cx, &db, "a_shuf", w, user)?;
    drop(db);
    std::fs::remove_dir_all(&dir)?;

    // ---- database B: (b) with scattered keys, close, reopen (fjall replays its journal) ----
    let dir_b = root.join("b");
    let db = E::open(&dir_b)?;
    let (w, user, last) = phase_b(&cx, &db, "b", false, &mut rng)?;
    let w0 = write_bytes();
    drop(db);
    cx.put("b_close_write_bytes", (write_bytes() - w0) as f64, "B");
    cx.put("b_disk_bytes", dir_bytes(&dir_b) as f64, "B");
    let t = Instant::now();
    let db = E::open(&dir_b)?;
    cx.put("b_reopen_s", secs(t.elapsed()), "s");
    assert!(db.get(Ks::Omap, &last)?.is_some(), "last (b) key missing after reopen");
    settle(&cx, &db, "b", w, user)?;
    drop(db);

    // ---- database B2: (b) with the keys of each batch clustered ----
    let dir = root.join("b-clustered");
    let db = E::open(&dir)?;
    let (w, user, last) = phase_b(&cx, &db, "b_clus", true, &mut rng)?;
    assert!(db.get(Ks::Omap, &last)?.is_some(), "last (b) clustered key missing");
    settle(&cx, &db, "b_clus", w, user)?;
    drop(db);
    Ok(())
}

fn main() -> R<()> {
    let mut args = std::env::args().skip(1);
    let root = PathBuf::from(args.next().ok_or("usage: kv-choice DIR [RUN_LABEL]")?);
    let label = args.next().unwrap_or_else(|| "run".into());
    if root.exists() {
        return Err(format!("{} exists; give a fresh directory", root.display()).into());
    }
    std::fs::create_dir_all(&root)?;
    #[cfg(all(feature = "fjall", feature = "redb"))]
    compile_error!("enable exactly one of the features `fjall` and `redb`");
    #[cfg(feature = "fjall")]
    run::<fj::Fjall>(&root, &label)?;
    #[cfg(feature = "redb")]
    run::<rd::Redb>(&root, &label)?;
    #[cfg(not(any(feature = "fjall", feature = "redb")))]
    {
        let _ = (&root, &label);
        return Err("built without an engine: build with --features fjall or --features redb".into());
    }
    Ok(())
}
