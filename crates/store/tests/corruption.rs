//! Silent corruption of object data on the medium: a flipped byte in a `block` store's data file
//! must make reads of that object fail with `Checksum` naming it (never return wrong bytes),
//! leave every other object readable, and be reported by fsck.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use shoal_store::engine::device::BLOCK_BYTES;
use shoal_store::{BackendKind, Durability, MkfsOptions, StoreError, Transaction};

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
