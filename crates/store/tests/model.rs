//! Model-based property tests: random transactions against every backend, checked step by step
//! against a plain in-memory model, with remounts between steps.

use std::collections::BTreeMap;
use std::path::Path;

use std::sync::Arc;

use proptest::prelude::*;
use shoal_store::Data;
use shoal_store::engine::MemEngine;
use shoal_store::{BackendKind, Durability, MkfsOptions, ObjectStore, Op, Store, Transaction};
use shoal_util::AlignedBuf;

#[derive(Clone, Debug, Default, PartialEq)]
struct Obj {
    data: Vec<u8>,
    xattrs: BTreeMap<String, Vec<u8>>,
    omap: BTreeMap<Vec<u8>, Vec<u8>>,
    version: (u64, u64),
}

type Model = BTreeMap<String, BTreeMap<String, Obj>>;

/// Applies one op to the model with the store's documented semantics; `Err` if the store must
/// refuse it.
fn model_apply(m: &mut Model, op: &Op) -> Result<(), ()> {
    let obj_mut = |m: &mut Model, c: &str, o: &str| -> Result<*mut Obj, ()> {
        m.get_mut(c).and_then(|objs| objs.get_mut(o)).map(|x| x as *mut Obj).ok_or(())
    };
    match op {
        Op::CreateCollection { coll } => {
            if m.contains_key(coll) {
                return Err(());
            }
            m.insert(coll.clone(), BTreeMap::new());
        }
        Op::RemoveCollection { coll } => match m.get(coll) {
            Some(objs) if objs.is_empty() => {
                m.remove(coll);
            }
            _ => return Err(()),
        },
        Op::Touch { coll, obj } => {
            m.get_mut(coll).ok_or(())?.entry(obj.clone()).or_default();
        }
        Op::Write { coll, obj, offset, data } => {
            let o = m.get_mut(coll).ok_or(())?.entry(obj.clone()).or_default();
            if !data.is_empty() {
                let end = *offset as usize + data.len();
                if o.data.len() < end {
                    o.data.resize(end, 0);
                }
                o.data[*offset as usize..end].copy_from_slice(data);
            }
        }
        Op::Truncate { coll, obj, size_bytes } => {
            let o = obj_mut(m, coll, obj)?;
            // SAFETY: the pointer comes from a live &mut into `m` and is used immediately.
            unsafe { (*o).data.resize(*size_bytes as usize, 0) };
        }
        Op::Remove { coll, obj } => {
            m.get_mut(coll).ok_or(())?.remove(obj).ok_or(())?;
        }
        Op::SetXattr { coll, obj, name, value } => {
            let o = obj_mut(m, coll, obj)?;
            unsafe { (*o).xattrs.insert(name.clone(), value.clone()) };
        }
        Op::RemoveXattr { coll, obj, name } => {
            let o = obj_mut(m, coll, obj)?;
            unsafe { (*o).xattrs.remove(name) };
        }
        Op::OmapSet { coll, obj, entries } => {
            let o = obj_mut(m, coll, obj)?;
            unsafe { (*o).omap.extend(entries.iter().cloned()) };
        }
        Op::OmapRemove { coll, obj, keys } => {
            let o = obj_mut(m, coll, obj)?;
            for k in keys {
                unsafe { (*o).omap.remove(k) };
            }
        }
        Op::OmapClear { coll, obj } => {
            let o = obj_mut(m, coll, obj)?;
            unsafe { (*o).omap.clear() };
        }
        Op::SetVersion { coll, obj, version } => {
            let o = obj_mut(m, coll, obj)?;
            unsafe { (*o).version = *version };
        }
    }
    Ok(())
}

fn check_equal(store: &dyn ObjectStore, m: &Model) {
    assert_eq!(store.list_collections().unwrap(), m.keys().cloned().collect::<Vec<_>>());
    // The counts the store keeps (it does not scan for them) match the model's.
    let usage = store.usage().unwrap();
    assert_eq!(usage.collections, m.len() as u64, "collections counted");
    assert_eq!(usage.objects, m.values().map(|objs| objs.len() as u64).sum::<u64>(), "objects counted");
    let err = store.collection_objects("absent").unwrap_err();
    assert!(matches!(err, shoal_store::StoreError::NoSuchCollection(_)), "{err}");
    for (coll, objs) in m {
        assert_eq!(store.collection_objects(coll).unwrap(), objs.len() as u64, "objects of {coll} counted");
        // Page through the listing two at a time to exercise the cursor.
        let mut listed = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = store.list_objects(coll, "", after.as_deref(), 2).unwrap();
            listed.extend(page.objects.iter().cloned());
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(listed, objs.keys().cloned().collect::<Vec<_>>(), "listing of {coll}");
        for (name, o) in objs {
            let st = store.stat(coll, name).unwrap();
            assert_eq!(st.size_bytes, o.data.len() as u64, "size of {coll}/{name}");
            let data = store.read_all(coll, name).unwrap();
            if data != o.data {
                let at = data.iter().zip(&o.data).position(|(a, b)| a != b);
                panic!(
                    "data of {coll}/{name} differs (first difference at {at:?}, lengths {} vs {})",
                    data.len(),
                    o.data.len()
                );
            }
            // A read in the middle, crossing block boundaries.
            if o.data.len() > 10 {
                let part = store.read(coll, name, 5, o.data.len() as u64).unwrap();
                assert!(part[..] == o.data[5..], "partial read of {coll}/{name} differs");
                // The same read into the store's own shared buffer, held while more reads run
                // (its buffer must not be handed out again while it is held).
                let shared = store.read_bytes(coll, name, 5, o.data.len() as u64).unwrap();
                let again = store.read_bytes(coll, name, 0, o.data.len() as u64).unwrap();
                assert!(shared[..] == o.data[5..], "shared partial read of {coll}/{name} differs");
                assert!(again[..] == o.data[..], "shared whole read of {coll}/{name} differs");
            }
            // The checksum a read reports, when it reports one, is that of exactly the bytes it
            // returned: whole, from inside a block, across block boundaries and to the end.
            let len = o.data.len() as u64;
            for (offset, want) in [(0, len), (5, 4096), (4095, 4098), (len / 3, len), (len.saturating_sub(1), 7)] {
                let offset = offset.min(len);
                let (bytes, crc) = store.read_bytes_crc(coll, name, offset, want).unwrap();
                let end = (offset + want).min(len) as usize;
                assert!(bytes[..] == o.data[offset as usize..end], "read of {coll}/{name} at {offset} differs");
                if let Some(crc) = crc {
                    assert_eq!(crc, shoal_util::crc32c(&bytes), "checksum of {coll}/{name} at {offset}+{want}");
                }
                // The same read in the store's pieces (views of a RAM store's memory).
                let (parts, crc) = store.read_parts_crc(coll, name, offset, want).unwrap();
                let joined = parts.concat();
                assert!(joined[..] == o.data[offset as usize..end], "pieces of {coll}/{name} at {offset} differ");
                if let Some(crc) = crc {
                    assert_eq!(crc, shoal_util::crc32c(&joined), "checksum of the pieces of {coll}/{name} at {offset}");
                }
            }
            assert_eq!(store.version(coll, name).unwrap(), o.version, "version of {coll}/{name}");
            let xattrs: BTreeMap<String, Vec<u8>> = store.list_xattrs(coll, name).unwrap().into_iter().collect();
            assert_eq!(xattrs, o.xattrs, "xattrs of {coll}/{name}");
            let omap: BTreeMap<Vec<u8>, Vec<u8>> =
                store.omap_list(coll, name, None, usize::MAX).unwrap().into_iter().collect();
            assert_eq!(omap, o.omap, "omap of {coll}/{name}");
        }
    }
}

/// A short description of ops, without their data.
fn summary(ops: &[Op]) -> String {
    let parts: Vec<String> = ops
        .iter()
        .map(|op| match op {
            Op::Write { coll, obj, offset, data } => format!("write {coll}/{obj} {offset}+{}", data.len()),
            other => {
                let s = format!("{other:?}");
                s.chars().take(120).collect()
            }
        })
        .collect();
    parts.join("; ")
}

#[derive(Clone)]
enum Step {
    Txn(Vec<Op>, Durability),
    Remount,
    Sync,
    /// Writes out staged (`Deferred`) transactions without a flush.
    Settle,
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Txn(ops, durability) => write!(f, "Txn[{}] {durability:?}", summary(ops)),
            Step::Remount => write!(f, "Remount"),
            Step::Sync => write!(f, "Sync"),
            Step::Settle => write!(f, "Settle"),
        }
    }
}

fn name_strategy(prefix: &'static str, n: u8) -> impl Strategy<Value = String> {
    (0..n).prop_map(move |i| format!("{prefix}{i}"))
}

fn data_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => (0usize..9000, any::<u8>()).prop_map(|(n, b)| (0..n).map(|i| b.wrapping_add(i as u8)).collect()),
        2 => (60_000usize..140_000, any::<u8>()).prop_map(|(n, b)| (0..n).map(|i| b ^ (i / 7) as u8).collect()),
        1 => (1_000_000usize..1_200_000, any::<u8>()).prop_map(|(n, b)| vec![b; n]),
    ]
}

/// `blocks` whole blocks of shared bytes starting on a block boundary (as the messenger receives
/// large payloads), their content drawn from `b` and changing every `period` bytes.
fn aligned_shared(blocks: usize, b: u8, period: usize) -> bytes::Bytes {
    let mut bytes: Vec<u8> = Vec::with_capacity(blocks * 4096 + 4095);
    let pad = bytes.as_ptr().align_offset(4096);
    bytes.resize(pad, 0);
    bytes.extend((0..blocks * 4096).map(|i| b.wrapping_add((i / period) as u8) ^ (i as u8)));
    let shared = bytes::Bytes::from(bytes).slice(pad..);
    assert_eq!(shared.as_ptr().addr() % 4096, 0);
    shared
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let c = || name_strategy("c", 2);
    let o = || name_strategy("o", 4);
    prop_oneof![
        1 => c().prop_map(|coll| Op::CreateCollection { coll }),
        1 => c().prop_map(|coll| Op::RemoveCollection { coll }),
        1 => (c(), o()).prop_map(|(coll, obj)| Op::Touch { coll, obj }),
        8 => (c(), o(), 0u64..200_000, data_strategy()).prop_map(|(coll, obj, offset, data)| Op::Write { coll, obj, offset, data: data.into() }),
        // Whole blocks from an aligned buffer: the engine writes these without a copy.
        3 => (c(), o(), 0u64..48, 1usize..300, any::<u8>()).prop_map(|(coll, obj, block, blocks, b)| {
            let mut buf = AlignedBuf::zeroed(blocks * 4096);
            for (i, x) in buf.iter_mut().enumerate() {
                *x = b.wrapping_add((i / 4096) as u8) ^ (i as u8);
            }
            Op::Write { coll, obj, offset: block * 4096, data: Data::Aligned(Arc::new(buf)) }
        }),
        // Whole blocks from a shared buffer at an unaligned address: a device without direct
        // I/O (RAM) takes these without a copy, others copy them into aligned memory.
        3 => (c(), o(), 0u64..48, 1usize..300, any::<u8>(), 1usize..64).prop_map(|(coll, obj, block, blocks, b, skew)| {
            let bytes: Vec<u8> = (0..blocks * 4096 + skew).map(|i| b.wrapping_add((i / 4093) as u8) ^ (i as u8)).collect();
            let shared = bytes::Bytes::from(bytes).slice(skew..);
            Op::Write { coll, obj, offset: block * 4096, data: Data::Shared(shared) }
        }),
        // Whole blocks from a shared buffer that starts on a block boundary (as the messenger
        // receives large payloads): every device takes these without a copy.
        3 => (c(), o(), 0u64..48, 1usize..300, any::<u8>()).prop_map(|(coll, obj, block, blocks, b)| {
            Op::Write { coll, obj, offset: block * 4096, data: Data::Shared(aligned_shared(blocks, b, 4091)) }
        }),
        // The same with every block's checksum known (a receiver computed them as the payload
        // arrived, decision 0094): stored as given, not computed again.
        3 => (c(), o(), 0u64..48, 1usize..300, any::<u8>()).prop_map(|(coll, obj, block, blocks, b)| {
            let shared = aligned_shared(blocks, b, 4089);
            let crcs = shoal_util::BlockCrcs::new(shoal_util::crc32c_blocks(&shared, 4096));
            Op::Write { coll, obj, offset: block * 4096, data: Data::Summed(shared, crcs) }
        }),
        2 => (c(), o(), 0u64..150_000).prop_map(|(coll, obj, size_bytes)| Op::Truncate { coll, obj, size_bytes }),
        2 => (c(), o()).prop_map(|(coll, obj)| Op::Remove { coll, obj }),
        1 => (c(), o(), name_strategy("x", 3), prop::collection::vec(any::<u8>(), 0..20)).prop_map(|(coll, obj, name, value)| Op::SetXattr { coll, obj, name, value }),
        1 => (c(), o(), name_strategy("x", 3)).prop_map(|(coll, obj, name)| Op::RemoveXattr { coll, obj, name }),
        1 => (c(), o(), prop::collection::vec((prop::collection::vec(any::<u8>(), 1..4), prop::collection::vec(any::<u8>(), 0..8)), 1..4)).prop_map(|(coll, obj, entries)| Op::OmapSet { coll, obj, entries }),
        1 => (c(), o(), prop::collection::vec(prop::collection::vec(any::<u8>(), 1..4), 1..3)).prop_map(|(coll, obj, keys)| Op::OmapRemove { coll, obj, keys }),
        1 => (c(), o()).prop_map(|(coll, obj)| Op::OmapClear { coll, obj }),
        1 => (c(), o(), 0u64..4, any::<u64>()).prop_map(|(coll, obj, epoch, seq)| Op::SetVersion { coll, obj, version: (epoch, seq) }),
    ]
}

fn durability_strategy() -> impl Strategy<Value = Durability> {
    prop_oneof![Just(Durability::Sync), Just(Durability::Batch), Just(Durability::Deferred)]
}

fn step_strategy() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => (prop::collection::vec(op_strategy(), 1..4), durability_strategy()).prop_map(|(ops, d)| Step::Txn(ops, d)),
        1 => Just(Step::Remount),
        1 => Just(Step::Sync),
        1 => Just(Step::Settle),
    ]
}

/// Runs `steps` against a store, starting with both collections created.
fn run(mut store: Store, steps: &[Step], reopen: &dyn Fn(Store) -> Store) {
    let mut model = Model::new();
    let mut setup = Transaction::new();
    setup.create_collection("c0").create_collection("c1");
    store.commit(setup, Durability::Sync).unwrap();
    model.insert("c0".into(), BTreeMap::new());
    model.insert("c1".into(), BTreeMap::new());
    // Every object's whole content as read in pieces after the previous step, held across this
    // one: what a reader holds must not change when later writes, removals and reuse of the
    // space (a RAM store's pieces are views of its memory) happen.
    let mut held: Vec<(String, Vec<bytes::Bytes>, Vec<u8>)> = Vec::new();
    for step in steps {
        match step {
            Step::Txn(ops, durability) => {
                let mut next = model.clone();
                let expect_ok = ops.iter().all(|op| model_apply(&mut next, op).is_ok());
                let got = store.commit(Transaction { ops: ops.clone() }, *durability);
                assert_eq!(got.is_ok(), expect_ok, "commit of {} returned {got:?}", summary(ops));
                if expect_ok {
                    model = next;
                }
            }
            Step::Remount => store = reopen(store),
            Step::Sync => store.sync().unwrap(),
            Step::Settle => store.settle().unwrap(),
        }
        for (what, parts, want) in held.drain(..) {
            assert!(parts.concat() == want, "a held read of {what} changed under its reader");
        }
        check_equal(store.as_ref(), &model);
        for (coll, objs) in &model {
            for (name, o) in objs {
                let (parts, _) = store.read_parts_crc(coll, name, 0, o.data.len() as u64).unwrap();
                held.push((format!("{coll}/{name}"), parts, o.data.clone()));
            }
        }
    }
    let report = store.fsck().unwrap();
    assert!(report.is_clean(), "fsck found problems: {:?}", report.errors);
}

fn disk_store(dir: &Path, backend: BackendKind) -> Store {
    let opts = MkfsOptions { backend, size_bytes: 64 << 20, device: None, force: true };
    shoal_store::mkfs(dir, &opts).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: model_cases(), max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn block_matches_model(steps in prop::collection::vec(step_strategy(), 1..30)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let store = disk_store(&path, BackendKind::Block);
        run(store, &steps, &|s| { drop(s); shoal_store::open(&path).unwrap() });
    }

    #[test]
    fn posix_matches_model(steps in prop::collection::vec(step_strategy(), 1..30)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let store = disk_store(&path, BackendKind::Posix);
        run(store, &steps, &|s| { drop(s); shoal_store::open(&path).unwrap() });
    }

    #[test]
    fn mem_matches_model(steps in prop::collection::vec(step_strategy(), 1..30)) {
        let store: Store = Box::new(MemEngine::new_mem(64 << 20).unwrap());
        // A RAM store cannot be remounted; the step just keeps it.
        run(store, &steps, &|s| s);
    }
}

/// Cases per backend: 32 by default, more with `SHOAL_MODEL_CASES` for a longer soak.
fn model_cases() -> u32 {
    std::env::var("SHOAL_MODEL_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(32)
}
