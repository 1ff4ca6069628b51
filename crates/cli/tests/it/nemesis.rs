//! The nemesis on real processes: a size-3 pool over five OSDs on `block` stores and three
//! monitors, written by three clients (whole-object writes and 16 KiB rewrites in place, each with
//! an xattr naming the version; appends; omap updates; every content unique), while a nemesis
//! SIGKILLs OSDs (one at a time, two of the same PG so that it goes inactive, one long enough to be
//! marked out automatically), SIGKILLs monitors, restarts every daemon on its store, replaces one
//! OSD's store with an empty one, and marks an OSD out and in. At the end the cluster becomes clean
//! on its own; every acknowledged write reads back (its last acknowledged version, or a later
//! attempt whose answer was lost); and offline, every store passes fsck and every object has
//! identical copies (data, xattrs, omap) on exactly the three OSDs placement names, and no copy
//! elsewhere.
//!
//! The victims come from a seed printed at the start; `SHOAL_NEMESIS_SEED=N` replays a choice.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Down, ok, shoal, wait_osd};
use shoal_client::{Client, ClusterConfig};
use shoal_map::{OsdId, PgId};
use shoal_proto::osd::{ObjOp, OpOutput};

const OSDS: u32 = 5;
const WRITERS: u32 = 3;
/// Objects of each kind per writer.
const PER_KIND: u32 = 4;
const OSD_SIZE: &str = "256M";
const POOL: &str = "rep";
/// An append's piece: 16 bytes naming the object's writer, its index and the attempt.
const PIECE_BYTES: usize = 16;

/// A small deterministic generator for the nemesis's choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Full,
    /// The same 16 KiB rewritten in place (no truncation: the engine's in-place overwrites,
    /// decision 0040), with an xattr naming the attempt.
    Patch,
    Append,
    Omap,
}

fn object_name(kind: Kind, writer: u32, k: u32) -> String {
    let tag = match kind {
        Kind::Full => "full",
        Kind::Patch => "patch",
        Kind::Append => "log",
        Kind::Omap => "map",
    };
    format!("{tag}-{writer}-{k}")
}

/// Object `name`'s data at attempt `seq` of a whole-object write: 4–40 KiB, unique.
fn full_content(name: &str, seq: u64) -> Vec<u8> {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let seed = h ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let len = 4096 + (seed % 9) as usize * 4096;
    shoal_util::pattern::xorshift_bytes(seed, len)
}

/// Bytes of a patched object: every attempt rewrites all of them.
const PATCH_BYTES: usize = 16 << 10;

/// Object `name`'s data at attempt `seq` of a patch: [`PATCH_BYTES`], unique.
fn patch_content(name: &str, seq: u64) -> Vec<u8> {
    let h = name.bytes().fold(0x8422_2325_cbf2_9ce4u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    shoal_util::pattern::xorshift_bytes(h ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, PATCH_BYTES)
}

fn piece(name: &str, seq: u64) -> Vec<u8> {
    let mut p = format!("{name:<10}").into_bytes();
    p.truncate(10);
    p.extend_from_slice(&(seq as u32).to_be_bytes());
    p.extend_from_slice(b"\n\n");
    assert_eq!(p.len(), PIECE_BYTES);
    p
}

fn omap_value(name: &str, seq: u64) -> Vec<u8> {
    format!("{name}={seq}").into_bytes()
}

/// What one object saw: every attempt in order, and whether its answer was a success.
#[derive(Default, Debug)]
struct History {
    attempts: Vec<(u64, bool)>,
}

impl History {
    /// Attempts that may be what the object holds last: the last acknowledged one and every
    /// attempt after it (their answers were lost; they may or may not have been applied).
    fn allowed_last(&self) -> Vec<u64> {
        let from = self.attempts.iter().rposition(|(_, acked)| *acked).unwrap_or(0);
        self.attempts[from..].iter().map(|(s, _)| *s).collect()
    }

    fn acked(&self) -> impl Iterator<Item = u64> + '_ {
        self.attempts.iter().filter(|(_, a)| *a).map(|(s, _)| *s)
    }

    fn attempted(&self) -> BTreeSet<u64> {
        self.attempts.iter().map(|(s, _)| *s).collect()
    }
}

/// One writer: its objects' histories and how many operations failed.
async fn writer(client: Arc<Client>, id: u32, stop: Arc<AtomicBool>) -> (BTreeMap<String, (Kind, History)>, u32) {
    let mut objects: BTreeMap<String, (Kind, History)> = BTreeMap::new();
    let mut names = Vec::new();
    for kind in [Kind::Full, Kind::Patch, Kind::Append, Kind::Omap] {
        for k in 0..PER_KIND {
            let name = object_name(kind, id, k);
            objects.insert(name.clone(), (kind, History::default()));
            names.push((kind, name));
        }
    }
    let mut rng = Rng(0x1234_5678 + u64::from(id));
    let mut failed = 0;
    let mut seq = 0u64;
    // Bounded: the nemesis stops it; the count bound only guards against a runaway loop.
    while !stop.load(Ordering::Relaxed) && seq < 100_000 {
        seq += 1;
        let (kind, name) = &names[rng.below(names.len() as u64) as usize];
        let (ops, data) = match kind {
            Kind::Full => {
                let data = full_content(name, seq);
                let ops = vec![
                    ObjOp::WriteFull { len_bytes: data.len() as u64 },
                    ObjOp::SetXattr { name: "seq".into(), value: seq.to_be_bytes().to_vec() },
                ];
                (ops, data)
            }
            Kind::Patch => {
                let ops = vec![
                    ObjOp::Write { offset: 0, len_bytes: PATCH_BYTES as u64 },
                    ObjOp::SetXattr { name: "seq".into(), value: seq.to_be_bytes().to_vec() },
                ];
                (ops, patch_content(name, seq))
            }
            Kind::Append => (vec![ObjOp::Append { len_bytes: PIECE_BYTES as u64 }], piece(name, seq)),
            Kind::Omap => {
                let entries = vec![(seq.to_be_bytes().to_vec(), omap_value(name, seq))];
                (vec![ObjOp::OmapSet { entries }], Vec::new())
            }
        };
        let acked = match client.op(POOL, name, ops, data).await {
            Ok(_) => true,
            Err(e) => {
                eprintln!("writer {id}: {name} attempt {seq} failed: {e}");
                failed += 1;
                false
            }
        };
        objects.get_mut(name).expect("own object").1.attempts.push((seq, acked));
    }
    (objects, failed)
}

fn start_osd(dir: &Path, id: u32) -> Child {
    common::start_block_osd(dir, id, OSD_SIZE, &[])
}

fn start_mon(dir: &Path, rank: u32) -> Child {
    let conf = dir.join("shoal.toml").display().to_string();
    let args: Vec<String> = ["mon", "run", "--conf", &conf, "--rank", &rank.to_string()].map(String::from).to_vec();
    common::start_daemon(dir, &format!("mon.{rank}"), &args, &[])
}

fn wait_clean(dir: &Path, timeout: Duration) -> serde_json::Value {
    common::wait_clean(dir, OSDS, timeout)
}

/// The daemons the test started, so that it can kill and reap them.
struct Daemons {
    dir: PathBuf,
    children: BTreeMap<String, Child>,
}

impl Daemons {
    fn kill(&mut self, name: &str) {
        eprintln!("nemesis: SIGKILL {name}");
        common::sigkill(&self.dir, name);
        if let Some(mut child) = self.children.remove(name) {
            let _ = child.wait();
        }
    }

    fn restart_osd(&mut self, id: u32) {
        eprintln!("nemesis: start osd.{id}");
        self.children.insert(format!("osd.{id}"), start_osd(&self.dir, id));
    }

    fn restart_mon(&mut self, rank: u32) {
        eprintln!("nemesis: start mon.{rank}");
        self.children.insert(format!("mon.{rank}"), start_mon(&self.dir, rank));
    }
}

#[test]
fn acknowledged_writes_survive_the_nemesis() {
    let seed: u64 = std::env::var("SHOAL_NEMESIS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!("nemesis seed {seed} (replay with SHOAL_NEMESIS_SEED={seed})");
    let mut rng = Rng(seed | 1);

    // `SHOAL_NEMESIS_DIR` keeps the cluster's files (logs, stores) for a look after a failure.
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = std::env::var_os("SHOAL_NEMESIS_DIR").map_or_else(|| tmp.path().to_path_buf(), PathBuf::from);
    std::fs::create_dir_all(&base).expect("test directory");
    let dir = base.join("c");
    let d = dir.display().to_string();
    let n = OSDS.to_string();
    ok(&shoal(&base, &["up", "--dir", &d, "--mons", "3", "--osds", &n, "--backend", "block", "--osd-size", OSD_SIZE]));
    let down = Down(dir.clone());
    ok(&shoal(&dir, &["pool", "create", POOL, "--size", "3", "--min-size", "2", "--pg-num", "16"]));
    ok(&shoal(&dir, &["pool", "rm", "data", "--yes-i-really-mean-it"]));
    ok(&shoal(&dir, &["config", "set", "mon_osd_down_out_interval_secs", "8"]));
    let mut daemons = Daemons { dir: dir.clone(), children: BTreeMap::new() };

    let mut cfg = ClusterConfig::from_conf_file(&dir.join("shoal.toml"), "client.admin").expect("conf");
    // Long enough to wait out a PG that is inactive while two of its OSDs restart.
    cfg.op_timeout_ms = 60_000;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
    let client = Arc::new(rt.block_on(Client::connect(cfg)).expect("connect"));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS).map(|w| rt.spawn(writer(Arc::clone(&client), w, Arc::clone(&stop)))).collect();
    let pool = client.mon().map().pool_by_name(POOL).expect("pool").id;
    let grace = Duration::from_secs(20);
    std::thread::sleep(Duration::from_secs(2));

    // 1. One OSD killed and restarted at once, before the monitors notice.
    let victim = rng.below(u64::from(OSDS)) as u32;
    daemons.kill(&format!("osd.{victim}"));
    std::thread::sleep(Duration::from_millis(500 + rng.below(1500)));
    daemons.restart_osd(victim);
    std::thread::sleep(Duration::from_secs(2));

    // 2. A monitor killed and restarted.
    let rank = rng.below(3) as u32;
    daemons.kill(&format!("mon.{rank}"));
    std::thread::sleep(Duration::from_secs(2));
    daemons.restart_mon(rank);

    // 3. Two OSDs of one PG: with one member left (below min_size) it goes inactive; writes to
    //    it wait. Both come back on their stores after the monitors marked them down.
    let pg = PgId { pool, seed: rng.below(16) as u32 };
    let acting = client.mon().map().pg_osds(pg).expect("acting");
    let (a, b) = (acting[0].0, acting[1].0);
    eprintln!("nemesis: PG {pg} acting {acting:?}");
    daemons.kill(&format!("osd.{a}"));
    daemons.kill(&format!("osd.{b}"));
    wait_osd(&client, a, false, grace);
    wait_osd(&client, b, false, grace);
    std::thread::sleep(Duration::from_secs(1));
    daemons.restart_osd(a);
    daemons.restart_osd(b);
    wait_osd(&client, a, true, grace);
    wait_osd(&client, b, true, grace);

    // 4. An OSD marked out (its data moves away) and back in (it moves back).
    let x = rng.below(u64::from(OSDS)).to_string();
    eprintln!("nemesis: osd out {x}");
    ok(&shoal(&dir, &["osd", "out", &x]));
    std::thread::sleep(Duration::from_secs(4));
    eprintln!("nemesis: osd in {x}");
    ok(&shoal(&dir, &["osd", "in", &x]));

    // 5. An OSD and a monitor killed together; the OSD stays down past the down-out interval
    //    and is marked out automatically, then comes back on its store and is put back in.
    let y = rng.below(u64::from(OSDS)) as u32;
    let rank = rng.below(3) as u32;
    daemons.kill(&format!("osd.{y}"));
    daemons.kill(&format!("mon.{rank}"));
    std::thread::sleep(Duration::from_secs(2));
    daemons.restart_mon(rank);
    let deadline = Instant::now() + Duration::from_secs(40);
    while client.mon().map().osds[&OsdId(y)].in_cluster {
        assert!(Instant::now() < deadline, "osd.{y} was not marked out automatically");
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));
    daemons.restart_osd(y);
    wait_osd(&client, y, true, grace);
    ok(&shoal(&dir, &["osd", "in", &y.to_string()]));

    // 6. Once clean, one OSD's store is replaced by an empty one: it is backfilled whole.
    wait_clean(&dir, Duration::from_secs(120));
    let z = rng.below(u64::from(OSDS)) as u32;
    daemons.kill(&format!("osd.{z}"));
    eprintln!("nemesis: osd.{z}'s store replaced by an empty one");
    std::fs::remove_dir_all(dir.join(format!("osd.{z}"))).expect("remove store");
    daemons.restart_osd(z);
    wait_osd(&client, z, true, grace);
    std::thread::sleep(Duration::from_secs(3));

    // The writers stop; the cluster becomes clean on its own.
    stop.store(true, Ordering::Relaxed);
    let mut model: BTreeMap<String, (Kind, History)> = BTreeMap::new();
    let mut failed = 0;
    for w in writers {
        let (objects, f) = rt.block_on(w).expect("writer task");
        model.extend(objects);
        failed += f;
    }
    let acked: usize = model.values().map(|(_, h)| h.acked().count()).sum();
    eprintln!("{acked} writes acknowledged, {failed} failed");
    assert!(acked >= 300, "too few writes acknowledged to prove anything: {acked}");
    wait_clean(&dir, Duration::from_secs(180));

    // Every acknowledged write reads back.
    for (name, (kind, history)) in &model {
        if history.acked().next().is_none() {
            continue;
        }
        check_object(&rt, &client, name, *kind, history);
    }

    // The final placement, then offline: fsck, and identical copies where placement says.
    let map = client.mon().map();
    assert!(map.pg_temp.is_empty(), "temporary acting sets left in a clean cluster: {:?}", map.pg_temp);
    drop(client);
    drop(rt);
    drop(down);
    for (_, mut child) in std::mem::take(&mut daemons.children) {
        let _ = child.wait();
    }
    let stores: Vec<_> = (0..OSDS).map(|osd| common::fsck_and_open_store(&dir, osd)).collect();
    for name in model.keys() {
        let loc = map.locate(pool, name).expect("locate");
        assert_eq!(loc.osds.len(), 3, "{name}: {loc:?}");
        let coll = shoal_osd::exec::pg_collection(loc.pg);
        let mut copies = Vec::new();
        for (osd, store) in stores.iter().enumerate() {
            let holds =
                store.collection_exists(&coll).expect("collection") && store.exists(&coll, name).expect("exists");
            let placed = loc.osds.contains(&OsdId(osd as u32));
            assert_eq!(holds, placed, "{name} in {}: held by osd.{osd} = {holds}, placed there = {placed}", loc.pg);
            if holds {
                let data = store.read_all(&coll, name).expect("read copy");
                let xattrs = store.list_xattrs(&coll, name).expect("xattrs");
                let omap = store.omap_list(&coll, name, None, 100_000).expect("omap");
                copies.push((osd, data, xattrs, omap));
            }
        }
        for (osd, data, xattrs, omap) in &copies[1..] {
            let first = &copies[0];
            assert!(
                *data == first.1 && *xattrs == first.2 && *omap == first.3,
                "{name}: osd.{osd}'s copy differs from osd.{}'s",
                first.0
            );
        }
    }
}

/// Reads object `name` back and checks it against what its writer saw.
fn check_object(rt: &tokio::runtime::Runtime, client: &Client, name: &str, kind: Kind, h: &History) {
    match kind {
        Kind::Full | Kind::Patch => {
            let ops = vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }, ObjOp::GetXattr { name: "seq".into() }];
            let got = rt.block_on(client.op(POOL, name, ops, vec![])).unwrap_or_else(|e| panic!("read {name}: {e}"));
            let seq = got
                .outputs
                .iter()
                .find_map(|o| match o {
                    OpOutput::Xattr(Some(v)) => Some(u64::from_be_bytes(v[..].try_into().expect("8 bytes"))),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("{name} has no seq xattr: {:?}", got.outputs));
            let allowed = h.allowed_last();
            assert!(allowed.contains(&seq), "{name} holds attempt {seq}; allowed {allowed:?} (history {h:?})");
            let want = if kind == Kind::Full { full_content(name, seq) } else { patch_content(name, seq) };
            assert!(got.data == want, "{name}: data is not attempt {seq}'s (torn or mixed)");
        }
        Kind::Append => {
            let ops = vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }];
            let got = rt.block_on(client.op(POOL, name, ops, vec![])).unwrap_or_else(|e| panic!("read {name}: {e}"));
            assert_eq!(got.data.len() % PIECE_BYTES, 0, "{name}: {} bytes", got.data.len());
            let attempted = h.attempted();
            let mut seen = Vec::new();
            for p in got.data.chunks(PIECE_BYTES) {
                let seq = u64::from(u32::from_be_bytes(p[10..14].try_into().expect("4 bytes")));
                assert!(p == piece(name, seq).as_slice(), "{name}: a piece that was never written: {p:?}");
                assert!(attempted.contains(&seq), "{name}: piece {seq} was never attempted");
                assert!(
                    seen.last().is_none_or(|l| *l < seq),
                    "{name}: pieces out of order or twice: {seen:?} then {seq}"
                );
                seen.push(seq);
            }
            for seq in h.acked() {
                assert!(seen.contains(&seq), "{name}: acknowledged append {seq} is missing; holds {seen:?}");
            }
        }
        Kind::Omap => {
            let ops = vec![ObjOp::OmapList { after: None, max: 100_000 }];
            let got = rt.block_on(client.op(POOL, name, ops, vec![])).unwrap_or_else(|e| panic!("read {name}: {e}"));
            let entries: BTreeMap<u64, Vec<u8>> = got
                .outputs
                .iter()
                .find_map(|o| match o {
                    OpOutput::OmapList(entries) => Some(
                        entries
                            .iter()
                            .map(|(k, v)| (u64::from_be_bytes(k[..].try_into().expect("8-byte key")), v.clone()))
                            .collect(),
                    ),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("{name}: no omap listing in {:?}", got.outputs));
            let attempted = h.attempted();
            for (seq, value) in &entries {
                assert!(attempted.contains(seq), "{name}: key {seq} was never attempted");
                assert_eq!(*value, omap_value(name, *seq), "{name}: key {seq}");
            }
            for seq in h.acked() {
                assert!(entries.contains_key(&seq), "{name}: acknowledged key {seq} is missing");
            }
        }
    }
}
