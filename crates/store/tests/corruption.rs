//! Silent corruption of object data on the medium: a flipped byte in a `block` store's data file
//! must make reads of that object fail with `Checksum` naming it (never return wrong bytes),
//! leave every other object readable, and be reported by fsck.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use shoal_store::engine::device::BLOCK_BYTES;
use shoal_store::{BackendKind, Durability, MkfsOptions, ObjectStore, StoreError, Transaction};

const COLL: &str = "c";

/// Pseudo-random bytes, distinct per seed.
fn content(seed: u64, len: usize) -> Vec<u8> {
    shoal_util::pattern::xorshift_bytes(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15), len)
}

/// Every offset at which `needle` occurs in `hay`, looking only at multiples of `step`.
fn find_all(hay: &[u8], needle: &[u8], step: usize) -> Vec<usize> {
    (0..=hay.len() - needle.len()).step_by(step).filter(|&i| &hay[i..i + needle.len()] == needle).collect()
}

/// The offset in the data file of byte `pos` of an object with content `data`, found by
/// searching the file for the 64 bytes of the object around it.
fn locate(file_bytes: &[u8], data: &[u8], pos: usize) -> u64 {
    // Objects are stored in whole blocks, so a block-aligned piece of the object sits at a
    // block-aligned file offset; fall back to a full search if that ever changes.
    let block = BLOCK_BYTES as usize;
    let start = (pos / block * block).min(data.len() - 64);
    let needle = &data[start..start + 64];
    let mut hits = find_all(file_bytes, needle, block);
    if hits.is_empty() {
        hits = find_all(file_bytes, needle, 1);
    }
    assert_eq!(hits.len(), 1, "the 64 bytes at object offset {start} occur {} times in the data file", hits.len());
    (hits[0] + (pos - start)) as u64
}

fn flip(block_file: &Path, at: u64, mask: u8) {
    let f = OpenOptions::new().read(true).write(true).open(block_file).unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= mask;
    f.write_all_at(&b, at).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn flipped_data_byte_fails_reads_of_that_object_only_and_fsck_names_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let objects: [(&str, Vec<u8>); 3] =
        [("small", content(1, 4 << 10)), ("medium", content(2, 100 << 10)), ("large", content(3, 3 << 20))];
    {
        let opts = MkfsOptions { backend: BackendKind::Block, size_bytes: 64 << 20, device: None, force: false };
        let store = shoal_store::mkfs(&dir, &opts).unwrap();
        let mut txn = Transaction::new();
        txn.create_collection(COLL);
        store.commit(txn, Durability::Sync).unwrap();
        for (name, data) in &objects {
            let mut txn = Transaction::new();
            txn.write(COLL, name, 0, data.clone());
            store.commit(txn, Durability::Sync).unwrap();
        }
    }
    let block_file = dir.join("block");
    let file_bytes = std::fs::read(&block_file).unwrap();

    let mut rng = 0x00C0_FFEE_u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for (victim, (name, data)) in objects.iter().enumerate() {
        let len = data.len();
        let mut positions = vec![0, len - 1];
        positions.extend((0..3).map(|_| (next() % len as u64) as usize));
        for pos in positions {
            let at = locate(&file_bytes, data, pos);
            let mask = (next() % 255 + 1) as u8;
            flip(&block_file, at, mask);
            let ctx = format!("{COLL}/{name} byte {pos} (file offset {at}) xor {mask:#04x}");

            let store = shoal_store::open(&dir).unwrap();
            match store.read_all(COLL, name) {
                Err(StoreError::Checksum { coll, obj, offset, .. }) => {
                    assert_eq!((coll.as_str(), obj.as_str()), (COLL, *name), "{ctx}: wrong object named");
                    let pos = pos as u64;
                    assert!(offset <= pos && pos < offset + BLOCK_BYTES, "{ctx}: error names object offset {offset}");
                }
                Ok(_) => panic!("{ctx}: read returned corrupt data"),
                Err(e) => panic!("{ctx}: expected a checksum error, got {e}"),
            }
            // A read of just the corrupt byte fails too; the error message names the object.
            let err = store.read(COLL, name, pos as u64, 1).unwrap_err();
            assert!(matches!(err, StoreError::Checksum { .. }), "{ctx}: {err}");
            assert!(err.to_string().contains(&format!("{COLL}/{name}")), "{ctx}: message {err}");
            // Blocks of the same object away from the corrupt one still read.
            let bad_block = pos as u64 / BLOCK_BYTES * BLOCK_BYTES;
            let other_block = if bad_block == 0 { BLOCK_BYTES } else { 0 };
            if other_block < len as u64 {
                let got = store.read(COLL, name, other_block, BLOCK_BYTES).unwrap();
                let o = other_block as usize;
                assert!(got == data[o..(o + BLOCK_BYTES as usize).min(len)], "{ctx}: intact block misread");
            }
            for (i, (other, other_data)) in objects.iter().enumerate() {
                if i != victim {
                    let got = store.read_all(COLL, other).unwrap_or_else(|e| panic!("{ctx}: reading {other}: {e}"));
                    assert!(got == *other_data, "{ctx}: {other} reads back different bytes");
                }
            }
            let report = store.fsck().unwrap();
            assert!(!report.is_clean(), "{ctx}: fsck found nothing");
            let needle = format!("{COLL}/{name}");
            assert!(report.errors.iter().any(|e| e.contains(&needle)), "{ctx}: fsck errors {:?}", report.errors);
            assert!(
                report.errors.iter().all(|e| e.contains(&needle)),
                "{ctx}: fsck blames more than the corrupt object: {:?}",
                report.errors
            );
            drop(store);
            flip(&block_file, at, mask);
        }
    }

    // Restored: everything reads back and fsck is clean again.
    let store = shoal_store::open(&dir).unwrap();
    for (name, data) in &objects {
        assert!(store.read_all(COLL, name).unwrap() == *data, "{name} after restoring");
    }
    let report = store.fsck().unwrap();
    assert!(report.is_clean(), "{:?}", report.errors);
}

/// A `block` store keeps recently read small blocks in memory (the device's cache): a read of a
/// cached block is served from there, so damage to the medium under it is invisible to `read`
/// until the block leaves the cache, while `read_media` (deep scrub's read) always reads the
/// medium and names the damage. Overwrites and deletes never let a cached read return old bytes.
#[test]
fn cached_blocks_follow_every_write_and_deep_reads_see_the_medium() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let opts = MkfsOptions { backend: BackendKind::Block, size_bytes: 64 << 20, device: None, force: false };
    let store = shoal_store::mkfs(&dir, &opts).unwrap();
    let mut txn = Transaction::new();
    txn.create_collection(COLL);
    store.commit(txn, Durability::Sync).unwrap();
    let write = |name: &str, off: u64, data: &[u8]| {
        let mut txn = Transaction::new();
        txn.write(COLL, name, off, data.to_vec());
        store.commit(txn, Durability::Sync).unwrap();
    };

    // Overwrites, partial and whole, each read twice (the second read is served from the cache),
    // beside a churning object rewritten whole every round and read whole in cached pieces: 40
    // rounds of 2 MiB on a 64 MiB device make the allocator hand out freed blocks again, whose
    // cached bytes are old.
    let mut model = content(10, 16 << 10);
    write("o", 0, &model);
    for round in 0..40u64 {
        for _ in 0..2 {
            assert_eq!(store.read(COLL, "o", 0, model.len() as u64).unwrap(), model, "round {round}");
            assert_eq!(store.read(COLL, "o", 4096, 4096).unwrap(), model[4096..8192], "round {round}");
        }
        let mut churn = content(1000 + round, 2 << 20);
        write("churn", 0, &churn);
        for at in (0..2u64 << 20).step_by(64 << 10) {
            let got = store.read(COLL, "churn", at, 64 << 10).unwrap();
            assert_eq!(got, churn[at as usize..at as usize + (64 << 10)], "round {round}, churn at {at}");
        }
        // Whole, twice: a large read, cached whole the first time. Then a piece rewritten in
        // its middle, and whole twice again.
        for pass in 0..2 {
            assert_eq!(store.read(COLL, "churn", 0, churn.len() as u64).unwrap(), churn, "round {round}, pass {pass}");
        }
        let piece = content(2000 + round, 20 << 10);
        churn[(1 << 20)..(1 << 20) + piece.len()].copy_from_slice(&piece);
        write("churn", 1 << 20, &piece);
        for pass in 0..2 {
            let got = store.read(COLL, "churn", 0, churn.len() as u64).unwrap();
            assert_eq!(got, churn, "round {round}, pass {pass} after a piece was rewritten");
        }
        let at = (round as usize * 1_531) % (model.len() - 3000);
        let piece = content(100 + round, 3000);
        model[at..at + 3000].copy_from_slice(&piece);
        write("o", at as u64, &piece);
    }
    // A delete, then a new object of the same name whose blocks may reuse the old ones.
    let mut txn = Transaction::new();
    txn.remove(COLL, "o");
    store.commit(txn, Durability::Sync).unwrap();
    let fresh = content(11, 16 << 10);
    write("o", 0, &fresh);
    assert_eq!(store.read(COLL, "o", 0, fresh.len() as u64).unwrap(), fresh);

    // Damage on the medium under a cached block: reads keep the good bytes, deep reads do not.
    let victim = content(12, 8 << 10);
    write("v", 0, &victim);
    assert_eq!(store.read(COLL, "v", 0, victim.len() as u64).unwrap(), victim, "fills the cache");
    store.flush().unwrap();
    let block_file = dir.join("block");
    let at = locate(&std::fs::read(&block_file).unwrap(), &victim, 5000);
    flip(&block_file, at, 0x10);
    assert_eq!(store.read(COLL, "v", 0, victim.len() as u64).unwrap(), victim, "a cached read");
    match store.read_media(COLL, "v", 0, victim.len() as u64) {
        Err(StoreError::Checksum { obj, offset, .. }) => {
            assert_eq!((obj.as_str(), offset), ("v", 4096), "the damaged block is named");
        }
        other => panic!("a deep read of damaged data returned {other:?}"),
    }
    // Once the object is written again, the medium holds good bytes once more.
    write("v", 0, &victim);
    assert_eq!(store.read_media(COLL, "v", 0, victim.len() as u64).unwrap(), victim);
}

/// Aligned shared bytes (a block store with direct I/O writes only those as they are).
struct AlignedOwner(shoal_util::AlignedBuf);
impl AsRef<[u8]> for AlignedOwner {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}
fn aligned_bytes(data: &[u8]) -> bytes::Bytes {
    bytes::Bytes::from_owner(AlignedOwner(shoal_util::AlignedBuf::copy_padded(data, data.len())))
}

/// A write whose block checksums arrived with it (`Data::Summed`, decision 0094) stores those
/// checksums instead of computing them: right ones read back as any write does, and a wrong one
/// is caught where a flipped byte would be (the read that checks it, fsck), never taken for
/// good data. Each backend, on each path a block-aligned write takes: a large write (checksums
/// computed while the data travels, when they are not known), a small one to new blocks, and a
/// small overwrite in place.
#[test]
fn block_checksums_that_arrive_with_the_data_are_the_ones_stored() {
    let block = BLOCK_BYTES as usize;
    for backend in [BackendKind::Mem, BackendKind::Block] {
        let tmp = tempfile::tempdir().unwrap();
        let store: Box<dyn ObjectStore> = match backend {
            BackendKind::Mem => Box::new(shoal_store::engine::MemEngine::new_mem_without_reserve(64 << 20).unwrap()),
            _ => {
                let opts = MkfsOptions { backend, size_bytes: 64 << 20, device: None, force: false };
                shoal_store::mkfs(&tmp.path().join("store"), &opts).unwrap()
            }
        };
        let mut txn = Transaction::new();
        txn.create_collection(COLL);
        store.commit(txn, Durability::Sync).unwrap();
        let write = |name: &str, off: u64, data: &[u8], crcs: Vec<u32>| {
            let mut txn = Transaction::new();
            let summed = shoal_store::Data::Summed(aligned_bytes(data), shoal_util::BlockCrcs::new(crcs));
            txn.ops.push(shoal_store::Op::Write { coll: COLL.into(), obj: name.into(), offset: off, data: summed });
            store.commit(txn, Durability::Sync).unwrap();
        };
        let right = |data: &[u8]| shoal_util::crc32c_blocks(data, block);
        // (object, offset, length): large and new, small and new, small over stored blocks.
        let cases = [("large", 0u64, 2usize << 20), ("small", 0, 2 * block), ("large", 64 << 10, block)];
        let mut large = vec![0u8; 2 << 20];
        for (i, (name, off, len)) in cases.iter().enumerate() {
            let data = content(20 + i as u64, *len);
            write(name, *off, &data, right(&data));
            if *name == "large" {
                large[*off as usize..*off as usize + len].copy_from_slice(&data);
            }
            let got = store.read_bytes_crc(COLL, name, *off, *len as u64).unwrap();
            assert!(got.0[..] == data[..], "{backend:?} case {i}: the bytes written");
            if let Some(crc) = got.1 {
                assert_eq!(crc, shoal_util::crc32c(&data), "{backend:?} case {i}: the read's checksum");
            }
        }
        assert_eq!(store.read_all(COLL, "large").unwrap(), large, "{backend:?}");
        assert!(store.fsck().unwrap().is_clean(), "{backend:?}: right checksums are clean");

        // The same three paths with one wrong checksum each, on objects of their own.
        for (i, (name, off, len)) in cases.iter().enumerate() {
            let name = format!("{name}-wrong-{i}");
            if *off > 0 {
                let base = content(30 + i as u64, *off as usize + len);
                write(&name, 0, &base, right(&base));
            }
            let data = content(40 + i as u64, *len);
            let mut crcs = right(&data);
            let bad = crcs.len() / 2;
            crcs[bad] ^= 1;
            write(&name, *off, &data, crcs);
            let at = *off + (bad * block) as u64;
            let found = match store.read_bytes_crc(COLL, &name, at, BLOCK_BYTES) {
                Err(StoreError::Checksum { .. }) => true,
                // A store that does not check on every read hands the stored checksum on with
                // the bytes (an OSD's reply frame carries it, and the client refuses the frame).
                Ok((bytes, Some(crc))) => crc != shoal_util::crc32c(&bytes),
                other => panic!("{backend:?} case {i}: {other:?}"),
            };
            assert!(found, "{backend:?} case {i}: a wrong known checksum was not what the store kept");
        }
        let report = store.fsck().unwrap();
        assert!(!report.is_clean(), "{backend:?}: fsck finds the blocks whose checksums are wrong: {report:?}");
    }
}
