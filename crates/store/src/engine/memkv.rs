//! The `mem` backend's metadata store: ordered maps in RAM behind one lock.
//!
//! Keys of the per-object keyspaces (extents, xattrs, omap) are `collection NUL object NUL
//! suffix` (see `layout.rs`): every key of one object shares a prefix of tens of bytes. In one
//! flat ordered map of heap-allocated keys, every comparison on the way down the tree reached a
//! key through a pointer, a likely cache miss; profiles of an OSD under 4 KiB writes put a fifth
//! of its worker thread in those comparisons. Those keyspaces are therefore kept in two levels,
//! [`SplitMap`]: the object's prefix, found by hash, then an ordered map of suffixes stored inside
//! the tree's nodes (up to 24 bytes), so that a lookup or a scan of one object touches the nodes
//! and nothing else. (Splitting alone, with suffixes still on the heap, measured no gain: the cost
//! was reaching the keys, not the bytes compared.) Both levels together order keys exactly as the
//! flat map would (see [`split`]), so scans see the same sequence.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{RwLock, RwLockReadGuard};

use smallvec::SmallVec;

use super::kv::{ALL_KEYSPACES, Batch, Ks, Kv, KvRead};
use crate::error::Result;

/// Where `key` splits into its outer part (up to and including its second NUL, or all of it
/// when it has fewer) and its inner part (the rest).
///
/// Comparing the pairs `(outer, inner)` orders byte strings exactly as comparing them whole: two
/// different outer parts either differ at a byte inside both (and so do the whole keys, at the
/// same byte), or one is a proper prefix of the other — which only an outer part with fewer than
/// two NULs can be (a prefix holding two NULs ends at the same second NUL, so it is equal), and
/// that part's inner part is empty, so its whole key is that same proper prefix and sorts first
/// both ways.
#[must_use]
pub fn split(key: &[u8]) -> usize {
    let mut nuls = 0;
    for (at, &b) in key.iter().enumerate() {
        if b == 0 {
            nuls += 1;
            if nuls == 2 {
                return at + 1;
            }
        }
    }
    key.len()
}

/// An inner part, inline up to 24 bytes (an extent's 8, a PG log entry's, most omap keys): a
/// tree node's keys then sit in the node itself, and a search down the tree reads no other
/// memory. With a heap allocation per key, each comparison was a likely cache miss, which is
/// what made comparisons the largest cost of an OSD's 4 KiB write.
type InnerKey = SmallVec<[u8; 24]>;
type Inner = BTreeMap<InnerKey, Vec<u8>>;

/// An ordered map of byte strings kept as outer part → (inner part → value) (see [`split`]).
/// The inner maps are found by hash (point reads and one object's scans, nearly every access,
/// compare no long prefixes at all); the ordered set of outer parts serves scans that cross
/// objects. Invariants: `order` holds exactly the keys of `index`, and no inner map is empty (a
/// removal that empties one removes it).
#[derive(Default, Clone, Debug)]
pub struct SplitMap {
    index: HashMap<Vec<u8>, Inner>,
    order: BTreeSet<Vec<u8>>,
}

impl SplitMap {
    #[must_use]
    pub fn get(&self, key: &[u8]) -> Option<&Vec<u8>> {
        let (o, i) = key.split_at(split(key));
        self.index.get(o)?.get(i)
    }

    pub fn insert(&mut self, mut key: Vec<u8>, value: Vec<u8>) {
        let at = split(&key);
        let inner = InnerKey::from_slice(&key[at..]);
        key.truncate(at);
        match self.index.get_mut(&key) {
            Some(map) => {
                map.insert(inner, value);
            }
            None => {
                self.order.insert(key.clone());
                self.index.insert(key, BTreeMap::from([(inner, value)]));
            }
        }
    }

    pub fn remove(&mut self, key: &[u8]) {
        let (o, i) = key.split_at(split(key));
        if let Some(inner) = self.index.get_mut(o) {
            inner.remove(i);
            if inner.is_empty() {
                self.index.remove(o);
                self.order.remove(o);
            }
        }
    }

    /// Visits the entries with `lo <= key < hi` (`None`: no upper bound) in key order until
    /// `visit` returns `false`.
    pub fn scan(&self, lo: &[u8], hi: Option<&[u8]>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        let (lo_o, lo_i) = lo.split_at(split(lo));
        let hi = hi.map(|h| h.split_at(split(h)));
        let mut whole = Vec::new();
        let mut each = |o: &[u8], inner: &Inner| -> bool {
            let from = if o == lo_o { Bound::Included(lo_i) } else { Bound::Unbounded };
            let to = match hi {
                Some((hi_o, hi_i)) if o == hi_o => Bound::Excluded(hi_i),
                _ => Bound::Unbounded,
            };
            if let (Bound::Included(f), Bound::Excluded(t)) = (from, to)
                && t <= f
            {
                // An empty range (BTreeMap::range panics on a reversed one).
                return true;
            }
            for (i, v) in inner.range::<[u8], _>((from, to)) {
                whole.clear();
                whole.extend_from_slice(o);
                whole.extend_from_slice(i);
                if !visit(&whole, v) {
                    return false;
                }
            }
            true
        };
        match hi {
            Some((hi_o, _)) if hi_o < lo_o => {}
            // Bounds inside one object (a read's or a write's extents, point-like omap ranges):
            // found by hash. A scan of all of an object's keys ends at `prefix_end` of its
            // prefix, a different outer part, and takes the ordered path below.
            Some((hi_o, _)) if hi_o == lo_o => {
                if let Some(inner) = self.index.get(lo_o) {
                    each(lo_o, inner);
                }
            }
            _ => {
                let outer_hi = hi.map_or(Bound::Unbounded, |(o, _)| Bound::Included(o));
                for o in self.order.range::<[u8], _>((Bound::Included(lo_o), outer_hi)) {
                    let Some(inner) = self.index.get(o.as_slice()) else {
                        unreachable!("an outer key in the order but not the index");
                    };
                    if !each(o, inner) {
                        return;
                    }
                }
            }
        }
    }
}

/// One keyspace's map: flat where keys are short or one per object, split where many keys share
/// an object's prefix.
#[derive(Clone, Debug)]
enum Map {
    Flat(BTreeMap<Vec<u8>, Vec<u8>>),
    Split(SplitMap),
}

impl Map {
    fn for_keyspace(ks: Ks) -> Self {
        match ks {
            Ks::Extents | Ks::Xattrs | Ks::Omap => Map::Split(SplitMap::default()),
            Ks::Meta | Ks::Colls | Ks::Onodes | Ks::Free => Map::Flat(BTreeMap::new()),
        }
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        match self {
            Map::Flat(m) => m.get(key).cloned(),
            Map::Split(m) => m.get(key).cloned(),
        }
    }

    fn scan(&self, lo: &[u8], hi: Option<&[u8]>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        match self {
            Map::Flat(m) => {
                // Bounded only below: a range with both bounds walks the tree down to each.
                for (k, v) in m.range::<[u8], _>((Bound::Included(lo), Bound::Unbounded)) {
                    if hi.is_some_and(|h| k.as_slice() >= h) || !visit(k, v) {
                        break;
                    }
                }
            }
            Map::Split(m) => m.scan(lo, hi, visit),
        }
    }

    fn apply(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        match (self, value) {
            (Map::Flat(m), Some(v)) => {
                m.insert(key, v);
            }
            (Map::Flat(m), None) => {
                m.remove(&key);
            }
            (Map::Split(m), Some(v)) => m.insert(key, v),
            (Map::Split(m), None) => m.remove(&key),
        }
    }
}

type Maps = Vec<Map>;

/// In-memory metadata for the `mem` backend. Commits are atomic under one lock; "sync" is a
/// no-op because nothing outlives the process.
pub struct MemKv {
    maps: RwLock<Maps>,
}

impl Default for MemKv {
    fn default() -> Self {
        Self { maps: RwLock::new(ALL_KEYSPACES.iter().map(|&ks| Map::for_keyspace(ks)).collect()) }
    }
}

impl MemKv {
    fn read(&self) -> RwLockReadGuard<'_, Maps> {
        // A panic while holding the lock cannot leave a map half-updated (commit builds nothing
        // in place before it can fail), so a poisoned lock is still consistent.
        self.maps.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl KvRead for MemKv {
    fn get(&self, ks: Ks, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.read()[ks as usize].get(key))
    }
    fn scan(&self, ks: Ks, lo: &[u8], hi: Option<&[u8]>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        self.read()[ks as usize].scan(lo, hi, visit);
        Ok(())
    }
}

/// A view of a [`MemKv`]: holds its read lock, so commits wait until it is dropped.
pub struct MemSnapshot<'a>(RwLockReadGuard<'a, Maps>);

impl KvRead for MemSnapshot<'_> {
    fn get(&self, ks: Ks, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.0[ks as usize].get(key))
    }
    fn scan(&self, ks: Ks, lo: &[u8], hi: Option<&[u8]>, visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        self.0[ks as usize].scan(lo, hi, visit);
        Ok(())
    }
}

impl Kv for MemKv {
    type Snapshot<'a> = MemSnapshot<'a>;

    fn snapshot(&self) -> MemSnapshot<'_> {
        MemSnapshot(self.read())
    }

    fn commit(&self, batch: Batch, _sync: bool) -> Result<()> {
        let mut maps = self.maps.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for ((ks, key), value) in batch.ops {
            maps[ks as usize].apply(key, value);
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Keys drawn from a small alphabet that includes NUL, so that keys with zero, one, two and
    /// more NULs, shared prefixes and prefixes of one another all occur often.
    fn key() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(b'a'), Just(b'b'), Just(0xff)], 0..7)
    }

    #[derive(Debug, Clone)]
    enum Step {
        Put(Vec<u8>, u8),
        Remove(Vec<u8>),
        Scan(Vec<u8>, Option<Vec<u8>>, usize),
        Get(Vec<u8>),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => (key(), any::<u8>()).prop_map(|(k, v)| Step::Put(k, v)),
            1 => key().prop_map(Step::Remove),
            2 => (key(), proptest::option::of(key()), 0usize..6).prop_map(|(lo, hi, n)| Step::Scan(lo, hi, n)),
            1 => key().prop_map(Step::Get),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// The split map answers every get and every scan (with any bounds, stopped after any
        /// number of entries) exactly as one flat ordered map given the same changes.
        #[test]
        fn a_split_map_behaves_as_one_flat_ordered_map(steps in proptest::collection::vec(step(), 1..80)) {
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            let mut map = SplitMap::default();
            for s in steps {
                match s {
                    Step::Put(k, v) => {
                        model.insert(k.clone(), vec![v]);
                        map.insert(k, vec![v]);
                    }
                    Step::Remove(k) => {
                        model.remove(&k);
                        map.remove(&k);
                    }
                    Step::Get(k) => prop_assert_eq!(map.get(&k), model.get(&k)),
                    Step::Scan(lo, hi, n) => {
                        let expected: Vec<(Vec<u8>, Vec<u8>)> = model
                            .iter()
                            .filter(|(k, _)| k.as_slice() >= lo.as_slice() && hi.as_ref().is_none_or(|h| *k < h))
                            .take(n)
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect();
                        let mut got = Vec::new();
                        if n > 0 {
                            map.scan(&lo, hi.as_deref(), &mut |k, v| {
                                got.push((k.to_vec(), v.to_vec()));
                                got.len() < n
                            });
                        }
                        prop_assert_eq!(got, expected);
                    }
                }
                prop_assert!(map.index.values().all(|inner| !inner.is_empty()), "an empty inner map was kept");
                prop_assert!(map.index.len() == map.order.len() && map.order.iter().all(|o| map.index.contains_key(o)));
            }
        }
    }

    #[test]
    fn split_points() {
        assert_eq!(split(b""), 0);
        assert_eq!(split(b"coll"), 4);
        assert_eq!(split(b"coll\0obj"), 8);
        assert_eq!(split(b"coll\0obj\0"), 9);
        assert_eq!(split(b"coll\0obj\0k\0ey"), 9);
    }
}
