//! Recovery through the commit log: a KV store that loses what it was not asked to sync,
//! as fjall's may on a power failure, and a device that keeps everything.
use std::sync::{Arc, Mutex};

use super::kv::{Batch, Kv, KvRead, MemKv};
use super::*;
use crate::engine::device::MemDevice;

/// Records every batch and how many were synced; `after_power_loss` rebuilds the KV store
/// from the synced ones only.
#[derive(Clone, Default)]
struct LossyKv {
    live: Arc<MemKv>,
    history: Arc<Mutex<(Vec<Batch>, usize)>>,
}

impl LossyKv {
    fn after_power_loss(&self) -> LossyKv {
        let (batches, synced) = self.history.lock().unwrap().clone();
        let fresh = LossyKv::default();
        for b in &batches[..synced] {
            fresh.commit(b.clone(), true).unwrap();
        }
        fresh
    }
}

impl KvRead for LossyKv {
    fn get(&self, ks: Ks, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.live.get(ks, key)
    }
    fn scan(&self, ks: Ks, lo: &[u8], hi: Option<&[u8]>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        self.live.scan(ks, lo, hi, visit)
    }
}

impl Kv for LossyKv {
    type Snapshot<'a> = <MemKv as Kv>::Snapshot<'a>;
    fn snapshot(&self) -> Self::Snapshot<'_> {
        self.live.snapshot()
    }
    fn commit(&self, batch: Batch, sync: bool) -> Result<()> {
        let mut h = self.history.lock().unwrap();
        h.0.push(batch.clone());
        if sync {
            h.1 = h.0.len();
        }
        self.live.commit(batch, sync)
    }
    fn sync(&self) -> Result<()> {
        let mut h = self.history.lock().unwrap();
        h.1 = h.0.len();
        Ok(())
    }
}

/// A KV store that can lose its unsynced batches, a 64 MiB RAM device, and a new engine over
/// them with collection `c`.
fn fresh_store() -> (LossyKv, Arc<MemDevice>, Engine<LossyKv, Arc<MemDevice>>) {
    let kv = LossyKv::default();
    let dev = Arc::new(MemDevice::new(64 << 20));
    let engine = fresh(&kv, &dev);
    (kv, dev, engine)
}

/// A new engine over `kv` and `dev` with collection `c`.
fn fresh(kv: &LossyKv, dev: &Arc<MemDevice>) -> Engine<LossyKv, Arc<MemDevice>> {
    let engine = Engine::format(BackendKind::Mem, kv.clone(), Arc::clone(dev), None).unwrap();
    let mut txn = Transaction::new();
    txn.create_collection("c");
    engine.commit(txn, Durability::Sync).unwrap();
    engine
}

fn write(engine: &Engine<LossyKv, Arc<MemDevice>>, obj: &str, len: usize, durability: Durability) {
    let mut txn = Transaction::new();
    txn.write("c", obj, 0, vec![obj.len() as u8 ^ 0x5a; len]);
    engine.commit(txn, durability).unwrap();
}

#[test]
fn a_ram_read_verified_in_parts_fails_on_exactly_the_damaged_block_and_checksums_what_it_returns() {
    let (_kv, dev, engine) = fresh_store();
    // 2 MiB + 100 bytes: many of the RAM device's read parts, each block marked with its index.
    let len = (2 << 20) + 100;
    let mut data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
    for (i, block) in data.chunks_mut(4096).enumerate() {
        block[..8].copy_from_slice(&(0x5eed_0000_0000_0000u64 | i as u64).to_le_bytes());
    }
    let mut txn = Transaction::new();
    txn.write("c", "big", 0, data.clone());
    engine.commit(txn, Durability::Sync).unwrap();
    // Every range's checksum is that of the bytes returned, across parts and partial blocks.
    for (offset, want) in [(0u64, len as u64), (1, 70_000), (65_536 - 3, 65_536 + 6), (len as u64 - 5, 100)] {
        let (bytes, crc) = engine.read_bytes_crc("c", "big", offset, want).unwrap();
        assert!(bytes[..] == data[offset as usize..(offset + want).min(len as u64) as usize]);
        assert_eq!(crc, Some(shoal_util::crc32c(&bytes)), "range {offset}+{want}");
    }
    // Damage block 300 behind the engine's back (it is in the fifth 64 KiB part).
    let marker = (0x5eed_0000_0000_0000u64 | 300).to_le_bytes();
    let mut phys = None;
    let mut block = vec![0u8; 4096];
    for at in (0..dev.size_bytes()).step_by(4096) {
        dev.read_at(&mut block, at).unwrap();
        if block[..8] == marker {
            phys = Some(at);
            break;
        }
    }
    let phys = phys.expect("block 300 is on the device");
    block[100] ^= 0x01;
    dev.write_at(&block, phys).unwrap();
    match engine.read_all("c", "big") {
        Err(StoreError::Checksum { offset, device_offset, .. }) => {
            assert_eq!((offset, device_offset), (300 * 4096, phys));
        }
        other => panic!("a damaged block must fail the read, got {:?}", other.map(|d| d.len())),
    }
    // Reads that do not touch it still work, from either side.
    assert!(engine.read("c", "big", 0, 300 * 4096).unwrap() == data[..300 * 4096]);
    assert!(engine.read("c", "big", 301 * 4096, len as u64).unwrap() == data[301 * 4096..]);
}

#[test]
fn synced_transactions_survive_losing_the_kv_journal() {
    let (kv, dev, engine) = fresh_store();
    for (i, len) in [1usize, 4096, 70_000, 2 << 20].iter().enumerate() {
        write(&engine, &format!("o{i}"), *len, Durability::Sync);
    }
    engine.simulate_crash();
    // The KV store lost every batch since mkfs; the log must bring them all back.
    let kv2 = kv.after_power_loss();
    assert!(kv2.get(Ks::Colls, b"c").unwrap().is_none(), "the test must really lose the batches");
    let engine = Engine::load(BackendKind::Mem, kv2, Arc::clone(&dev), None).unwrap();
    for (i, len) in [1usize, 4096, 70_000, 2 << 20].iter().enumerate() {
        let obj = format!("o{i}");
        assert_eq!(engine.read_all("c", &obj).unwrap(), vec![obj.len() as u8 ^ 0x5a; *len]);
    }
    assert!(engine.fsck().unwrap().is_clean());
}

#[test]
fn a_record_whose_data_never_arrived_is_not_applied() {
    let (kv, dev, engine) = fresh_store();
    write(&engine, "kept", 8192, Durability::Sync);
    write(&engine, "torn", 8192, Durability::Batch);
    write(&engine, "later", 8192, Durability::Batch);
    // Find where "torn" was written and wipe it, as a power failure before the flush could.
    let snap = engine.kv.snapshot();
    let extents = Engine::<LossyKv, Arc<MemDevice>>::extents(&snap, "c", "torn", 0, 8192, 8192).unwrap();
    drop(snap);
    for e in extents.values() {
        dev.write_at(&vec![0u8; e.len_bytes as usize], e.phys).unwrap();
    }
    engine.simulate_crash();
    let engine = Engine::load(BackendKind::Mem, kv.after_power_loss(), Arc::clone(&dev), None).unwrap();
    assert!(engine.exists("c", "kept").unwrap());
    assert!(!engine.exists("c", "torn").unwrap(), "a torn transaction must not be applied");
    assert!(!engine.exists("c", "later").unwrap(), "nothing after a torn transaction is applied");
    let report = engine.fsck().unwrap();
    assert!(report.is_clean(), "{:?}", report.errors);
}

/// A device whose writes fail while `fail` is set.
struct FlakyDevice {
    inner: Arc<MemDevice>,
    fail: Arc<std::sync::atomic::AtomicBool>,
}

impl Device for FlakyDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(5));
        }
        self.inner.write_at(buf, offset)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.inner.sync()
    }
    fn discard(&self, offset: u64, len: u64) {
        self.inner.discard(offset, len);
    }
    fn direct_io(&self) -> bool {
        false
    }
}

#[test]
fn a_failed_write_stops_writes_until_remount_and_loses_nothing_acknowledged() {
    let kv = LossyKv::default();
    let dev = Arc::new(MemDevice::new(64 << 20));
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flaky = FlakyDevice { inner: Arc::clone(&dev), fail: Arc::clone(&fail) };
    let engine = Engine::format(BackendKind::Mem, kv.clone(), flaky, None).unwrap();
    let mut txn = Transaction::new();
    txn.create_collection("c").write("c", "a", 0, vec![1; 10_000]);
    engine.commit(txn, Durability::Sync).unwrap();
    fail.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut txn = Transaction::new();
    txn.write("c", "b", 0, vec![2; 10_000]);
    assert!(matches!(engine.commit(txn.clone(), Durability::Sync), Err(StoreError::Io { .. })));
    fail.store(false, std::sync::atomic::Ordering::SeqCst);
    // Even with the device healthy again, the engine refuses writes: its memory may no
    // longer match the medium.
    assert!(matches!(engine.commit(txn, Durability::Sync), Err(StoreError::Failed(_))));
    // Reads still work.
    assert_eq!(engine.read_all("c", "a").unwrap(), vec![1; 10_000]);
    engine.simulate_crash();
    let engine = Engine::load(BackendKind::Mem, kv.after_power_loss(), Arc::clone(&dev), None).unwrap();
    assert_eq!(engine.read_all("c", "a").unwrap(), vec![1; 10_000]);
    assert!(!engine.exists("c", "b").unwrap());
    assert!(engine.fsck().unwrap().is_clean());
}

fn kv_batches(kv: &LossyKv) -> usize {
    kv.history.lock().unwrap().0.len()
}

#[test]
fn deferred_transactions_are_seen_at_once_and_reach_the_kv_store_as_one_batch() {
    let (kv, dev, engine) = fresh_store();
    write(&engine, "synced", 8192, Durability::Sync);
    let before = kv_batches(&kv);
    for i in 0..5usize {
        write(&engine, &format!("d{i}"), 4096 * (i + 1) + 100, Durability::Deferred);
    }
    // A partial overwrite of a staged object reads its staged edge block while planning.
    let mut txn = Transaction::new();
    txn.write("c", "d1", 4000, vec![7u8; 300]).set_xattr("c", "d1", "x", b"v".to_vec()).omap_set(
        "c",
        "d1",
        vec![(b"k".to_vec(), b"w".to_vec())],
    );
    engine.commit(txn, Durability::Deferred).unwrap();
    let mut want = vec![2u8 ^ 0x5a; 8292];
    want[4000..4300].fill(7);
    let check = |engine: &Engine<LossyKv, Arc<MemDevice>>| {
        assert_eq!(engine.read_all("c", "d1").unwrap(), want);
        assert_eq!(engine.read("c", "d3", 4096, 8192).unwrap(), vec![2u8 ^ 0x5a; 8192]);
        assert_eq!(engine.stat("c", "d4").unwrap().size_bytes, 5 * 4096 + 100);
        assert_eq!(engine.get_xattr("c", "d1", "x").unwrap(), Some(b"v".to_vec()));
        assert_eq!(engine.omap_get("c", "d1", b"k").unwrap(), Some(b"w".to_vec()));
        let names = engine.list_objects("c", "", None, 100).unwrap().objects;
        assert_eq!(names, ["d0", "d1", "d2", "d3", "d4", "synced"]);
        assert_eq!(engine.usage().unwrap().objects, 6);
    };
    check(&engine);
    assert_eq!(kv_batches(&kv), before, "staged transactions are not in the KV store yet");
    engine.settle().unwrap();
    assert_eq!(kv_batches(&kv), before + 1, "the group reaches the KV store as one batch");
    check(&engine);
    // Settled, the group survives a crash of the process (the KV store keeps its batches).
    engine.simulate_crash();
    let engine = Engine::load(BackendKind::Mem, kv.clone(), Arc::clone(&dev), None).unwrap();
    check(&engine);
    // Synced, it also survives losing the KV store's unsynced batches (its log records).
    write(&engine, "d5", 4096, Durability::Deferred);
    engine.sync().unwrap();
    engine.simulate_crash();
    let engine = Engine::load(BackendKind::Mem, kv.after_power_loss(), Arc::clone(&dev), None).unwrap();
    check_all_but_listing(&engine, &want);
    assert_eq!(engine.read_all("c", "d5").unwrap(), vec![2u8 ^ 0x5a; 4096]);
    assert!(engine.fsck().unwrap().is_clean());
}

fn check_all_but_listing(engine: &Engine<LossyKv, Arc<MemDevice>>, d1: &[u8]) {
    assert_eq!(engine.read_all("c", "d1").unwrap(), d1);
    for i in [0usize, 2, 3, 4] {
        assert_eq!(engine.read_all("c", &format!("d{i}")).unwrap(), vec![2u8 ^ 0x5a; 4096 * (i + 1) + 100]);
    }
}

#[test]
fn a_crash_before_the_group_is_written_loses_it_and_nothing_before_it() {
    let (kv, dev, engine) = fresh_store();
    write(&engine, "kept", 8192, Durability::Sync);
    write(&engine, "batch", 8192, Durability::Batch);
    write(&engine, "lost1", 4096, Durability::Deferred);
    write(&engine, "lost2", 4096, Durability::Deferred);
    // An overwrite of a settled object, staged: the crash must leave the old bytes.
    let mut txn = Transaction::new();
    txn.write("c", "kept", 0, vec![9u8; 4096]).remove("c", "batch");
    engine.commit(txn, Durability::Deferred).unwrap();
    assert!(engine.exists("c", "lost2").unwrap() && !engine.exists("c", "batch").unwrap());
    engine.simulate_crash();
    let engine = Engine::load(BackendKind::Mem, kv.clone(), Arc::clone(&dev), None).unwrap();
    assert_eq!(engine.read_all("c", "kept").unwrap(), vec![4u8 ^ 0x5a; 8192]);
    assert_eq!(engine.read_all("c", "batch").unwrap(), vec![5u8 ^ 0x5a; 8192]);
    assert!(!engine.exists("c", "lost1").unwrap() && !engine.exists("c", "lost2").unwrap());
    let report = engine.fsck().unwrap();
    assert!(report.is_clean(), "{:?}", report.errors);
}

#[test]
fn the_group_is_written_when_full_and_before_any_other_commit() {
    let (kv, _dev, engine) = fresh_store();
    let before = kv_batches(&kv);
    for i in 0..staged::STAGED_MAX_TXNS {
        write(&engine, &format!("o{i}"), 4096, Durability::Deferred);
    }
    assert_eq!(kv_batches(&kv), before);
    write(&engine, "one-more", 4096, Durability::Deferred);
    assert_eq!(kv_batches(&kv), before + 1, "a full group is written before the next joins");
    // A `Batch` commit goes to the KV store after the staged group, in order.
    write(&engine, "batch", 4096, Durability::Batch);
    assert_eq!(kv_batches(&kv), before + 3);
    let applied = |b: &Batch| b.ops.get(&(Ks::Meta, APPLIED_SEQ_KEY.to_vec())).cloned().flatten();
    let history = kv.history.lock().unwrap().0.clone();
    let seqs: Vec<u64> =
        history[before..].iter().map(|b| layout::decode_u64("seq", &applied(b).unwrap()).unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "KV batches out of order: {seqs:?}");
    // A large deferred transaction is not staged: it is written at once.
    write(&engine, "large", 1 << 20, Durability::Deferred);
    assert_eq!(kv_batches(&kv), before + 4);
    assert_eq!(engine.list_objects("c", "", None, 1000).unwrap().objects.len(), staged::STAGED_MAX_TXNS + 3);
    assert!(engine.fsck().unwrap().is_clean());
}

#[test]
fn a_large_aligned_write_reserves_enough_log_for_its_checksums() {
    // 48 MiB in one aligned write: 48 extent records whose 12,288 checksums are computed
    // after the log space was reserved.
    let engine = MemEngine::new_mem(256 << 20).unwrap();
    let mut buf = shoal_util::AlignedBuf::zeroed(48 << 20);
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i / 4096) as u8 ^ (i as u8);
    }
    let expect = buf.to_vec();
    let mut txn = Transaction::new();
    txn.create_collection("c").write_aligned("c", "big", 0, Arc::new(buf));
    engine.commit(txn, Durability::Sync).unwrap();
    assert!(engine.read_all("c", "big").unwrap() == expect);
    assert!(engine.fsck().unwrap().is_clean());
}

#[test]
fn a_medium_error_names_the_object_and_a_rewrite_clears_it() {
    let engine = MemEngine::new_mem(64 << 20).unwrap();
    let mut txn = Transaction::new();
    txn.create_collection("c").write("c", "bad", 0, vec![7; 10_000]).write("c", "good", 0, vec![8; 10_000]);
    engine.commit(txn, Durability::Sync).unwrap();
    assert!(engine.inject_read_error("c", "bad").unwrap());
    match engine.read_all("c", "bad") {
        Err(StoreError::Unreadable { coll, obj, .. }) => assert_eq!((coll.as_str(), obj.as_str()), ("c", "bad")),
        other => panic!("expected a medium error, got {other:?}"),
    }
    assert_eq!(engine.read_all("c", "good").unwrap(), vec![8; 10_000], "other objects read as before");
    let mut txn = Transaction::new();
    txn.write("c", "bad", 0, vec![9; 10_000]);
    engine.commit(txn, Durability::Sync).unwrap();
    assert_eq!(engine.read_all("c", "bad").unwrap(), vec![9; 10_000], "rewritten data reads again");
}

// -- in-place overwrites (decision 0040) ------------------------------------------------------

/// Number of extent records of `c/obj`, and where its block at `offset` is on the device.
fn records_and_phys<K: Kv, D: Device>(engine: &Engine<K, D>, obj: &str, offset: u64) -> (usize, u64) {
    let prefix = layout::child_prefix("c", obj);
    let end = layout::prefix_end(&prefix);
    let mut n = 0;
    engine
        .kv
        .scan(Ks::Extents, &prefix, end.as_deref(), &mut |_, _| {
            n += 1;
            true
        })
        .unwrap();
    let size = engine.stat("c", obj).unwrap().size_bytes;
    let snap = engine.kv.snapshot();
    let map = Engine::<K, D>::extents(&snap, "c", obj, offset, offset + 4096, size).unwrap();
    let (&off, e) = map.iter().next().expect("the block is stored");
    (n, e.phys + (offset - off))
}

fn overwrite<K: Kv, D: Device>(engine: &Engine<K, D>, obj: &str, offset: u64, data: &[u8], durability: Durability) {
    let mut txn = Transaction::new();
    txn.write("c", obj, offset, data.to_vec());
    engine.commit(txn, durability).unwrap();
}

/// The `i`th of a series of small overwrites of `c/o` (inside its first 256 KiB), applied to the
/// expected contents `want` too: whole blocks, an unaligned piece inside a block, and one across
/// two blocks, in turn.
fn small_overwrite<K: Kv, D: Device>(engine: &Engine<K, D>, i: usize, durability: Durability, want: &mut [u8]) {
    let (offset, len) = match i % 3 {
        0 => ((i as u64 * 7 % 64) * 4096, 4096),
        1 => ((i as u64 * 5 % 64) * 4096 + 100, 300),
        _ => ((i as u64 * 3 % 63) * 4096 + 4000, 200),
    };
    let data = vec![i as u8 + 1; len];
    overwrite(engine, "o", offset, &data, durability);
    want[offset as usize..offset as usize + len].copy_from_slice(&data);
}

fn inplace_waiting(engine: &Engine<LossyKv, Arc<MemDevice>>) -> usize {
    read_lock(&engine.staged).inplace_counts(0).0
}

#[test]
fn small_overwrites_go_in_place_keeping_records_whole_and_space_untouched() {
    let (kv, dev, engine) = fresh_store();
    let mut want: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
    overwrite(&engine, "o", 0, &want, Durability::Sync);
    let (records, phys) = records_and_phys(&engine, "o", 8192);
    let free = lock(&engine.writer).alloc.free_bytes();
    for (i, durability) in
        [Durability::Sync, Durability::Batch, Durability::Deferred].iter().cycle().take(30).enumerate()
    {
        small_overwrite(&engine, i, *durability, &mut want);
        assert_eq!(engine.read_all("c", "o").unwrap(), want, "after overwrite {i}");
    }
    engine.sync().unwrap();
    assert_eq!(records_and_phys(&engine, "o", 8192), (records, phys), "the record stays whole, its blocks in place");
    assert_eq!(lock(&engine.writer).alloc.free_bytes(), free, "no space is allocated or freed");
    assert!(inplace_waiting(&engine) > 0, "fewer blocks than a write-out's worth wait in memory");
    // A write that reaches past the stored blocks, and one larger than the in-place limit, take
    // new blocks as before.
    overwrite(&engine, "o", 255 * 4096, &[9u8; 8192], Durability::Sync);
    want.resize(257 * 4096, 0);
    want[255 * 4096..].fill(9);
    overwrite(&engine, "o", 0, &vec![8u8; 128 * 1024], Durability::Sync);
    want[..128 * 1024].fill(8);
    assert_eq!(engine.read_all("c", "o").unwrap(), want);
    assert_ne!(records_and_phys(&engine, "o", 8192).1, phys, "a large overwrite is copied on write");
    // A crash of the process before the blocks reached their place, then a power loss after
    // the remount: both times recovery writes them from the log.
    engine.simulate_crash();
    let engine = Engine::load(BackendKind::Mem, kv.clone(), Arc::clone(&dev), None).unwrap();
    assert_eq!(engine.read_all("c", "o").unwrap(), want);
    overwrite(&engine, "o", 4096 * 200, &[7u8; 4096], Durability::Sync);
    want[4096 * 200..4096 * 201].fill(7);
    engine.simulate_crash();
    let engine = Engine::load(BackendKind::Mem, kv.after_power_loss(), Arc::clone(&dev), None).unwrap();
    assert_eq!(engine.read_all("c", "o").unwrap(), want);
    assert!(engine.fsck().unwrap().is_clean());
}

/// A RAM store with collection `c`.
fn ram_store() -> MemEngine {
    let engine = MemEngine::new_mem_without_reserve(64 << 20).unwrap();
    let mut txn = Transaction::new();
    txn.create_collection("c");
    engine.commit(txn, Durability::Sync).unwrap();
    engine
}

#[test]
fn a_ram_store_overwrites_small_ranges_in_place_and_views_already_held_keep_their_bytes() {
    let engine = ram_store();
    let mut want: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
    overwrite(&engine, "o", 0, &want, Durability::Sync);
    let (records, phys) = records_and_phys(&engine, "o", 8192);
    let free = lock(&engine.writer).alloc.free_bytes();
    // A reader's views of the whole object, taken before any overwrite.
    let (held, _) = engine.read_parts_crc("c", "o", 0, want.len() as u64).unwrap();
    let before = want.clone();
    for (i, durability) in [Durability::Sync, Durability::Deferred].iter().cycle().take(30).enumerate() {
        small_overwrite(&engine, i, *durability, &mut want);
        let (bytes, crc) = engine.read_bytes_crc("c", "o", 0, want.len() as u64).unwrap();
        assert!(bytes[..] == want[..], "after overwrite {i}");
        assert_eq!(crc, Some(shoal_util::crc32c(&want)), "the checksum of exactly the bytes read");
    }
    assert_eq!(records_and_phys(&engine, "o", 8192), (records, phys), "the record stays whole, its blocks in place");
    assert_eq!(lock(&engine.writer).alloc.free_bytes(), free, "no space is allocated or freed");
    assert!(held.concat() == before, "a view taken before the overwrites still shows what it showed");
    // Larger than the in-place limit: copied on write as before.
    overwrite(&engine, "o", 0, &vec![8u8; 128 * 1024], Durability::Sync);
    want[..128 * 1024].fill(8);
    assert_eq!(engine.read_all("c", "o").unwrap(), want);
    assert_ne!(records_and_phys(&engine, "o", 8192).1, phys, "a large overwrite is copied on write");
    assert!(engine.fsck().unwrap().is_clean());
}

#[test]
fn readers_of_a_ram_store_never_see_an_in_place_overwrite_half_done() {
    // Each overwrite fills one whole block with one byte value, so a block read whole is
    // uniform unless a read saw part of an overwrite; and a read whose block changed under its
    // checksum fails verification instead of returning.
    let engine = Arc::new(ram_store());
    const BLOCKS: u64 = 16;
    overwrite(&*engine, "o", 0, &vec![0u8; (BLOCKS * 4096) as usize], Durability::Sync);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (engine, stop) = (Arc::clone(&engine), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && reads < 1_000_000 {
                    let block = (reads * 7 + r) % BLOCKS;
                    let (bytes, crc) = engine.read_bytes_crc("c", "o", block * 4096, 4096).unwrap();
                    assert_eq!(crc, Some(shoal_util::crc32c(&bytes)), "read {reads}: checksum of other bytes");
                    assert!(bytes.iter().all(|&b| b == bytes[0]), "read {reads} of block {block} saw a torn overwrite");
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for i in 0..3_000u64 {
        let block = i * 5 % BLOCKS;
        overwrite(&*engine, "o", block * 4096, &[(i % 250) as u8 + 1; 4096], Durability::Sync);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        assert!(reader.join().unwrap() > 0, "every reader read");
    }
    assert_eq!(records_and_phys(&*engine, "o", 0).0, 1, "every overwrite went in place");
}

#[test]
fn in_place_blocks_reach_their_place_in_groups_and_survive_power_loss_either_side() {
    let (kv, dev, engine) = fresh_store();
    let mut want = vec![vec![0u8; 512 * 1024]; 2];
    for (i, w) in want.iter_mut().enumerate() {
        w.fill(i as u8 + 1);
        overwrite(&engine, &format!("o{i}"), 0, w, Durability::Sync);
    }
    // More than a write-out's worth of single-block overwrites, each durable.
    for i in 0..(INPLACE_APPLY_BLOCKS + 40) {
        let (o, block) = (i % 2, (i * 37) % 128);
        let data = vec![(i % 200) as u8 + 10; 4096];
        overwrite(&engine, &format!("o{o}"), block as u64 * 4096, &data, Durability::Sync);
        want[o][block * 4096..(block + 1) * 4096].copy_from_slice(&data);
    }
    assert!(inplace_waiting(&engine) < INPLACE_APPLY_BLOCKS, "proven blocks were written to their place");
    for (i, w) in want.iter().enumerate() {
        assert_eq!(&engine.read_all("c", &format!("o{i}")).unwrap(), w);
    }
    engine.simulate_crash();
    let engine = Engine::load(BackendKind::Mem, kv.after_power_loss(), Arc::clone(&dev), None).unwrap();
    for (i, w) in want.iter().enumerate() {
        assert_eq!(&engine.read_all("c", &format!("o{i}")).unwrap(), w, "o{i} after the power loss");
    }
    assert!(engine.fsck().unwrap().is_clean());
}

#[test]
fn space_freed_over_in_place_blocks_is_not_reused_before_the_lap_ends() {
    let (kv, dev, engine) = fresh_store();
    overwrite(&engine, "a", 0, &[1u8; 8192], Durability::Sync);
    let (_, a_phys) = records_and_phys(&engine, "a", 0);
    overwrite(&engine, "a", 0, &[2u8; 4096], Durability::Sync);
    let mut txn = Transaction::new();
    txn.remove("c", "a");
    engine.commit(txn, Durability::Sync).unwrap();
    // Flushes that would prove the removal durable, then new data: it must not land where the
    // log would write "a"'s in-place block again after a crash.
    engine.sync().unwrap();
    overwrite(&engine, "pad", 0, &[3u8; 4096], Durability::Sync);
    engine.sync().unwrap();
    overwrite(&engine, "b", 0, &[4u8; 8192], Durability::Sync);
    assert_ne!(records_and_phys(&engine, "b", 0).1, a_phys, "the block written in place is held");
    engine.simulate_crash();
    let engine = Engine::load(BackendKind::Mem, kv.after_power_loss(), Arc::clone(&dev), None).unwrap();
    assert_eq!(engine.read_all("c", "b").unwrap(), vec![4u8; 8192]);
    assert!(!engine.exists("c", "a").unwrap());
    assert!(engine.fsck().unwrap().is_clean());
    // After the lap (a checkpoint), the space is free again.
    engine.quiesce().unwrap();
    let free = lock(&engine.writer).alloc.free_bytes();
    assert!(lock(&engine.writer).pending_free.is_empty(), "a checkpoint releases held space ({free} free)");
}

#[derive(Clone, Debug)]
enum CrashStep {
    Write { obj: u8, offset: u64, len: usize, byte: u8, durability: Durability },
    Remove { obj: u8 },
    Truncate { obj: u8, size_bytes: u64 },
    Sync,
    Settle,
    Crash { power_loss: bool },
}

fn crash_step() -> impl proptest::strategy::Strategy<Value = CrashStep> {
    use proptest::prelude::*;
    let durability = prop_oneof![Just(Durability::Sync), Just(Durability::Batch), Just(Durability::Deferred)];
    prop_oneof![
        // Mostly small writes, aligned or not, over a few objects' first 256 KiB: in place
        // whenever the blocks exist.
        10 => (0u8..3, 0u64..64, prop_oneof![Just(0u64), 1u64..4095], prop_oneof![4 => 1usize..9000, 1 => 60_000usize..200_000], any::<u8>(), durability)
            .prop_map(|(obj, block, skew, len, byte, durability)| CrashStep::Write { obj, offset: block * 4096 + skew, len, byte, durability }),
        1 => (0u8..3).prop_map(|obj| CrashStep::Remove { obj }),
        1 => (0u8..3, 0u64..300_000).prop_map(|(obj, size_bytes)| CrashStep::Truncate { obj, size_bytes }),
        2 => Just(CrashStep::Sync),
        1 => Just(CrashStep::Settle),
        2 => any::<bool>().prop_map(|power_loss| CrashStep::Crash { power_loss }),
    ]
}

type Objects = std::collections::BTreeMap<String, Vec<u8>>;

fn read_state(engine: &Engine<LossyKv, Arc<MemDevice>>) -> Objects {
    let names = engine.list_objects("c", "", None, 100).unwrap().objects;
    names.into_iter().map(|n| (n.clone(), engine.read_all("c", &n).unwrap())).collect()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, max_shrink_iters: 200, ..Default::default() })]

    /// Against a model, through crashes of the process and power losses at any point: the store
    /// reads as the model after every step, and after a crash as the model at some point since
    /// the last durable commit (a prefix of what was committed: nothing durable lost, nothing
    /// half-applied), and fsck finds it clean.
    #[test]
    fn overwrites_and_crashes_match_a_model(steps in proptest::collection::vec(crash_step(), 1..40)) {
        let (kv, dev, mut engine) = fresh_store();
        let mut kv = kv;
        let mut model = Objects::new();
        // The states a crash may leave: from the last durable point to now.
        let mut candidates = vec![model.clone()];
        for step in &steps {
            let (txn, durability) = match step {
                CrashStep::Write { obj, offset, len, byte, durability } => {
                    let data: Vec<u8> = (0..*len).map(|i| byte.wrapping_add((i / 4096) as u8)).collect();
                    let mut txn = Transaction::new();
                    txn.write("c", &format!("o{obj}"), *offset, data.clone());
                    let o = model.entry(format!("o{obj}")).or_default();
                    let end = *offset as usize + len;
                    if o.len() < end {
                        o.resize(end, 0);
                    }
                    o[*offset as usize..end].copy_from_slice(&data);
                    (Some(txn), *durability)
                }
                CrashStep::Remove { obj } => {
                    let name = format!("o{obj}");
                    if model.remove(&name).is_none() {
                        continue;
                    }
                    let mut txn = Transaction::new();
                    txn.remove("c", &name);
                    (Some(txn), Durability::Sync)
                }
                CrashStep::Truncate { obj, size_bytes } => {
                    let name = format!("o{obj}");
                    let Some(o) = model.get_mut(&name) else { continue };
                    o.resize(*size_bytes as usize, 0);
                    let mut txn = Transaction::new();
                    txn.truncate("c", &name, *size_bytes);
                    (Some(txn), Durability::Batch)
                }
                CrashStep::Sync => {
                    engine.sync().unwrap();
                    candidates = vec![model.clone()];
                    (None, Durability::Sync)
                }
                CrashStep::Settle => {
                    engine.settle().unwrap();
                    (None, Durability::Sync)
                }
                CrashStep::Crash { power_loss } => {
                    engine.simulate_crash();
                    let survivor = if *power_loss { kv.after_power_loss() } else { kv.clone() };
                    kv = survivor;
                    engine = Engine::load(BackendKind::Mem, kv.clone(), Arc::clone(&dev), None).unwrap();
                    let got = read_state(&engine);
                    proptest::prop_assert!(candidates.contains(&got), "after {step:?} the store holds a state never committed");
                    let report = engine.fsck().unwrap();
                    proptest::prop_assert!(report.is_clean(), "{:?}", report.errors);
                    model = got;
                    candidates = vec![model.clone()];
                    continue;
                }
            };
            if let Some(txn) = txn {
                engine.commit(txn, durability).unwrap();
                if durability == Durability::Sync {
                    candidates = vec![model.clone()];
                } else {
                    candidates.push(model.clone());
                }
            }
            proptest::prop_assert_eq!(&read_state(&engine), &model, "after {:?}", step);
        }
    }
}

#[test]
fn staged_groups_take_proven_in_place_blocks_along() {
    let (kv, dev, engine) = fresh_store();
    let mut want = vec![1u8; 512 * 1024];
    overwrite(&engine, "o", 0, &want, Durability::Sync);
    for i in 0..100usize {
        let block = (i * 13) % 128;
        let data = vec![i as u8 + 2; 4096];
        overwrite(&engine, "o", block as u64 * 4096, &data, Durability::Deferred);
        want[block * 4096..(block + 1) * 4096].copy_from_slice(&data);
        engine.sync().unwrap();
        assert_eq!(engine.read_all("c", "o").unwrap(), want, "after overwrite {i}");
    }
    // Each group's submission wrote the blocks proven by then; only the last few wait.
    assert!(inplace_waiting(&engine) <= 3, "{} blocks wait", inplace_waiting(&engine));
    engine.simulate_crash();
    let engine = Engine::load(BackendKind::Mem, kv.after_power_loss(), Arc::clone(&dev), None).unwrap();
    assert_eq!(engine.read_all("c", "o").unwrap(), want);
    assert!(engine.fsck().unwrap().is_clean());
}

#[test]
fn a_record_writing_in_place_outside_the_data_region_is_refused_and_nothing_is_written() {
    let (kv, dev, engine) = fresh_store();
    overwrite(&engine, "o", 0, &[1u8; 8192], Durability::Sync);
    engine.quiesce().unwrap();
    let (seq, log_offset) = (lock(&engine.writer).seq, engine.superblock.log_offset);
    engine.simulate_crash();
    // A record with a valid checksum whose in-place write would land on the device label.
    let record = wal::encode_record(seq + 1, &Batch::default(), &[], &[(0, &[0xEEu8; 4096][..])], seq);
    dev.write_at(&record, log_offset).unwrap();
    match Engine::load(BackendKind::Mem, kv.clone(), Arc::clone(&dev), None) {
        Err(StoreError::Corrupt(msg)) => assert!(msg.contains("in place at device offset 0"), "{msg}"),
        other => panic!("the record must be refused, got {:?}", other.map(|_| ())),
    }
    let mut label = vec![0u8; 4096];
    dev.read_at(&mut label, 0).unwrap();
    assert_ne!(label, vec![0xEEu8; 4096], "nothing was written");
}
