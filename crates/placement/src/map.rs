//! The placement hierarchy: a tree of buckets (root → racks → hosts) with weighted OSD leaves.
//!
//! The map says *where OSDs are* and *how much data each should hold*. It deliberately says
//! nothing about whether an OSD is up or in: that changes far more often than the hierarchy,
//! and it is passed to [`crate::select()`] as a predicate, so that one map serves every
//! up/in state and marking an OSD out does not change any weight in the tree (which would move
//! data between unrelated OSDs, see [`mod@crate::select`]).
//!
//! Weights are fixed-point, 1/65536 units ([`Weight`]), as in Ceph's CRUSH maps: integer weights
//! sum exactly and identically on every machine, whereas float sums depend on the order of
//! additions. By convention, [`Weight::ONE`] is one TiB of capacity. A bucket's weight is the sum
//! of its children's weights, kept up to date by every builder call.
//!
//! Invariants, checked by the builders and again when a map is deserialized:
//! - bucket 0 is the only root; every other bucket has a parent with a smaller id, so the tree
//!   has no cycle and is at most [`MAX_DEPTH`] levels deep;
//! - a rack sits under the root, a host under the root or a rack, an OSD in a host;
//! - bucket names and OSD ids are unique.
//!
//! Bucket ids are never reused, and they enter the straw2 draws, so two maps with the same shape
//! built in different orders place PGs differently: the map itself (as distributed by the
//! monitors) is the contract, not the order of commands that built it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::PlacementError;

/// Name of the root bucket of [`PlacementMap::new`] (Ceph's default root is also "default").
pub const ROOT_NAME: &str = "default";

/// Most bucket levels on a path from the root to an OSD: root, rack, host (the nesting rules
/// allow no more). Loops that walk the tree are bounded by this.
pub const MAX_DEPTH: usize = 3;

/// Bucket ids are below 2^32 and OSD ids are u32, so setting bit 32 keeps the straw2 keys of
/// buckets and OSDs apart.
const BUCKET_KEY_BIT: u64 = 1 << 32;

/// An OSD's id, as in `osd.12`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OsdId(pub u32);

impl std::fmt::Display for OsdId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "osd.{}", self.0)
    }
}

/// A bucket's id: its index in the map, in creation order. The root is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BucketId(pub u32);

/// What a bucket stands for. Kinds also name failure domains: with `Host`, no two replicas of a
/// PG share a host (when enough hosts are usable, see [`crate::select()`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BucketKind {
    /// The top of the tree; a map has exactly one.
    Root,
    /// A group of hosts sharing power or a switch.
    Rack,
    /// A machine; the only kind that holds OSDs.
    Host,
}

impl BucketKind {
    /// Height in the tree: a child's rank must be strictly below its parent's.
    fn rank(self) -> u8 {
        match self {
            BucketKind::Root => 2,
            BucketKind::Rack => 1,
            BucketKind::Host => 0,
        }
    }

    fn index(self) -> usize {
        usize::from(self.rank())
    }
}

/// A weight in 1/65536 units (16.16 fixed point); [`Weight::ONE`] is one TiB by convention.
/// A zero weight keeps an OSD in the map but never places data on it. Serialized as the raw
/// integer (65536 for one unit), so that a serialized map round-trips exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Weight(u32);

impl Weight {
    /// Receives no data.
    pub const ZERO: Weight = Weight(0);
    /// One unit (one TiB by convention).
    pub const ONE: Weight = Weight(1 << 16);

    /// A weight from its raw 1/65536 units.
    pub const fn from_raw(raw: u32) -> Weight {
        Weight(raw)
    }

    /// The raw value in 1/65536 units.
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// `units` whole units (TiB).
    pub const fn from_units(units: u16) -> Weight {
        Weight((units as u32) << 16)
    }

    /// The nearest fixed-point weight to `w` units, or `None` if `w` is negative, not finite or
    /// at least 65536.
    pub fn from_f64(w: f64) -> Option<Weight> {
        let raw = (w * 65536.0).round();
        if !raw.is_finite() || raw < 0.0 || raw > f64::from(u32::MAX) {
            return None;
        }
        Some(Weight(raw as u32))
    }

    /// The weight in units, for display and statistics (never for placement decisions).
    pub fn as_f64(self) -> f64 {
        f64::from(self.0) / 65536.0
    }
}

/// A child of a bucket: another bucket or an OSD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Item {
    Bucket(BucketId),
    Osd(OsdId),
}

impl Item {
    /// The item's identity in straw2 draws: OSD ids as they are, bucket ids with bit 32 set.
    fn key(self) -> u64 {
        match self {
            Item::Bucket(b) => BUCKET_KEY_BIT | u64::from(b.0),
            Item::Osd(o) => u64::from(o.0),
        }
    }
}

/// A bucket's entry for one child, with the child's weight cached so that a straw2 draw reads
/// one contiguous array.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Child {
    pub(crate) item: Item,
    /// Straw2 key of `item`.
    pub(crate) key: u64,
    /// The child's weight (an OSD's weight, or a bucket's summed weight), in 1/65536 units.
    pub(crate) weight: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    pub(crate) name: String,
    pub(crate) kind: BucketKind,
    pub(crate) parent: Option<BucketId>,
    pub(crate) children: Vec<Child>,
    /// Sum of the children's weights.
    pub(crate) weight: u64,
}

#[derive(Debug, Clone, Copy)]
struct OsdEntry {
    host: BucketId,
    weight: Weight,
}

/// The placement hierarchy. Build it with [`PlacementMap::new`] and the `add_*`, `remove_osd` and
/// `set_weight` calls; serialize it with serde (the serialized form holds only buckets and OSDs,
/// and derived data is rebuilt and checked on deserialization).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "MapRepr", into = "MapRepr")]
pub struct PlacementMap {
    buckets: Vec<Bucket>,
    osds: BTreeMap<OsdId, OsdEntry>,
    names: BTreeMap<String, BucketId>,
    /// Number of buckets of each kind, indexed by `BucketKind::index`.
    kind_counts: [u32; 3],
}

impl Default for PlacementMap {
    fn default() -> Self {
        Self::new()
    }
}

impl PlacementMap {
    /// An empty map: one root bucket named [`ROOT_NAME`], no hosts, no OSDs.
    pub fn new() -> PlacementMap {
        let root = Bucket {
            name: ROOT_NAME.to_string(),
            kind: BucketKind::Root,
            parent: None,
            children: Vec::new(),
            weight: 0,
        };
        let mut kind_counts = [0; 3];
        kind_counts[BucketKind::Root.index()] = 1;
        PlacementMap {
            buckets: vec![root],
            osds: BTreeMap::new(),
            names: BTreeMap::from([(ROOT_NAME.to_string(), BucketId(0))]),
            kind_counts,
        }
    }

    /// The root bucket's id.
    pub fn root(&self) -> BucketId {
        BucketId(0)
    }

    /// Adds an empty bucket `name` of `kind` under the bucket named `parent`. Errors: `parent`
    /// does not exist, `name` is taken, or the nesting is not allowed (racks under the root,
    /// hosts under the root or a rack; there is only one root).
    pub fn add_bucket(&mut self, name: &str, kind: BucketKind, parent: &str) -> Result<BucketId, PlacementError> {
        let parent = self.bucket_id(parent).ok_or_else(|| PlacementError::UnknownBucket(parent.to_string()))?;
        self.insert_bucket(name, kind, parent)
    }

    /// Adds an empty rack `name` under the root.
    pub fn add_rack(&mut self, name: &str) -> Result<BucketId, PlacementError> {
        self.insert_bucket(name, BucketKind::Rack, self.root())
    }

    /// Adds an empty host `name` under the root. Use [`PlacementMap::add_bucket`] to put a host
    /// in a rack.
    pub fn add_host(&mut self, name: &str) -> Result<BucketId, PlacementError> {
        self.insert_bucket(name, BucketKind::Host, self.root())
    }

    /// Adds OSD `id` with `weight` to the host named `host`. Errors: `id` already in the map,
    /// `host` does not exist or is not a host.
    pub fn add_osd(&mut self, id: OsdId, host: &str, weight: Weight) -> Result<(), PlacementError> {
        let host_id = self.bucket_id(host).ok_or_else(|| PlacementError::UnknownHost(host.to_string()))?;
        self.insert_osd(id, host_id, weight)
    }

    /// Removes OSD `id` from the map and returns its weight. Its host stays, possibly empty
    /// (an empty bucket weighs zero and is never chosen). Error: `id` is not in the map.
    pub fn remove_osd(&mut self, id: OsdId) -> Result<Weight, PlacementError> {
        let entry = self.osds.remove(&id).ok_or(PlacementError::UnknownOsd(id))?;
        let host = &mut self.buckets[entry.host.0 as usize];
        host.children.retain(|c| c.item != Item::Osd(id));
        self.refresh_weights(entry.host);
        Ok(entry.weight)
    }

    /// Sets OSD `id`'s weight and returns the previous one. Error: `id` is not in the map.
    pub fn set_weight(&mut self, id: OsdId, weight: Weight) -> Result<Weight, PlacementError> {
        let entry = self.osds.get_mut(&id).ok_or(PlacementError::UnknownOsd(id))?;
        let old = entry.weight;
        entry.weight = weight;
        let host = entry.host;
        if let Some(child) = self.buckets[host.0 as usize].children.iter_mut().find(|c| c.item == Item::Osd(id)) {
            child.weight = u64::from(weight.raw());
        }
        self.refresh_weights(host);
        Ok(old)
    }

    /// The id of the bucket named `name`, if any.
    pub fn bucket_id(&self, name: &str) -> Option<BucketId> {
        self.names.get(name).copied()
    }

    /// The name of bucket `id`, if it exists.
    pub fn bucket_name(&self, id: BucketId) -> Option<&str> {
        self.buckets.get(id.0 as usize).map(|b| b.name.as_str())
    }

    /// The kind of bucket `id`, if it exists.
    pub fn bucket_kind(&self, id: BucketId) -> Option<BucketKind> {
        self.buckets.get(id.0 as usize).map(|b| b.kind)
    }

    /// The summed weight of bucket `id` in 1/65536 units, if it exists.
    pub fn bucket_weight(&self, id: BucketId) -> Option<u64> {
        self.buckets.get(id.0 as usize).map(|b| b.weight)
    }

    /// Ids of all buckets of `kind`, in id order.
    pub fn buckets_of_kind(&self, kind: BucketKind) -> Vec<BucketId> {
        (0..self.buckets.len()).filter(|&i| self.buckets[i].kind == kind).map(|i| BucketId(i as u32)).collect()
    }

    /// Whether the map has at least one bucket of `kind`.
    pub fn has_kind(&self, kind: BucketKind) -> bool {
        self.kind_counts[kind.index()] > 0
    }

    /// OSD `id`'s weight, if it is in the map.
    pub fn osd_weight(&self, id: OsdId) -> Option<Weight> {
        self.osds.get(&id).map(|e| e.weight)
    }

    /// The host holding OSD `id`, if it is in the map.
    pub fn osd_host(&self, id: OsdId) -> Option<BucketId> {
        self.osds.get(&id).map(|e| e.host)
    }

    /// The buckets from the root down to OSD `id`'s host, root first; `None` if `id` is not in
    /// the map.
    pub fn osd_path(&self, id: OsdId) -> Option<Vec<BucketId>> {
        let mut path = Vec::with_capacity(MAX_DEPTH);
        let mut at = Some(self.osds.get(&id)?.host);
        // Parents have smaller ids than their children, so this walk ends; MAX_DEPTH bounds it.
        for _ in 0..MAX_DEPTH {
            let Some(b) = at else { break };
            path.push(b);
            at = self.buckets[b.0 as usize].parent;
        }
        path.reverse();
        Some(path)
    }

    /// The bucket of `kind` above OSD `id` (its failure domain of that kind), if any.
    pub fn osd_ancestor(&self, id: OsdId, kind: BucketKind) -> Option<BucketId> {
        self.osd_path(id)?.into_iter().find(|b| self.buckets[b.0 as usize].kind == kind)
    }

    /// All OSDs and their weights, in id order.
    pub fn osds(&self) -> impl Iterator<Item = (OsdId, Weight)> + '_ {
        self.osds.iter().map(|(&id, e)| (id, e.weight))
    }

    /// Number of OSDs in the map.
    pub fn osd_count(&self) -> usize {
        self.osds.len()
    }

    /// Number of buckets, the root included.
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// Sum of all OSD weights, in 1/65536 units.
    pub fn total_weight(&self) -> u64 {
        self.buckets[0].weight
    }

    pub(crate) fn bucket(&self, id: BucketId) -> &Bucket {
        &self.buckets[id.0 as usize]
    }

    fn insert_bucket(&mut self, name: &str, kind: BucketKind, parent: BucketId) -> Result<BucketId, PlacementError> {
        if self.names.contains_key(name) {
            return Err(PlacementError::DuplicateBucket(name.to_string()));
        }
        let parent_kind = self.bucket(parent).kind;
        if kind.rank() >= parent_kind.rank() {
            return Err(PlacementError::InvalidNesting { child: kind, parent: parent_kind });
        }
        let id = u32::try_from(self.buckets.len())
            .ok()
            .filter(|&i| u64::from(i) < BUCKET_KEY_BIT)
            .map(BucketId)
            .ok_or_else(|| PlacementError::InvalidMap("too many buckets".to_string()))?;
        self.buckets.push(Bucket {
            name: name.to_string(),
            kind,
            parent: Some(parent),
            children: Vec::new(),
            weight: 0,
        });
        self.names.insert(name.to_string(), id);
        self.kind_counts[kind.index()] += 1;
        let item = Item::Bucket(id);
        self.buckets[parent.0 as usize].children.push(Child { item, key: item.key(), weight: 0 });
        Ok(id)
    }

    fn insert_osd(&mut self, id: OsdId, host: BucketId, weight: Weight) -> Result<(), PlacementError> {
        let bucket = self.bucket(host);
        if bucket.kind != BucketKind::Host {
            return Err(PlacementError::NotAHost(bucket.name.clone()));
        }
        if self.osds.contains_key(&id) {
            return Err(PlacementError::DuplicateOsd(id));
        }
        self.osds.insert(id, OsdEntry { host, weight });
        let item = Item::Osd(id);
        self.buckets[host.0 as usize].children.push(Child { item, key: item.key(), weight: u64::from(weight.raw()) });
        self.refresh_weights(host);
        Ok(())
    }

    /// Recomputes the weight of `from` and of each of its ancestors from their children, and
    /// the cached child weights on the way up.
    fn refresh_weights(&mut self, from: BucketId) {
        let mut at = from;
        // The path to the root has at most MAX_DEPTH buckets.
        for _ in 0..MAX_DEPTH {
            let bucket = &mut self.buckets[at.0 as usize];
            // At most 2^32 children of at most 2^32 each: the sum fits in a u64.
            bucket.weight = bucket.children.iter().map(|c| c.weight).sum();
            let (weight, parent) = (bucket.weight, bucket.parent);
            let Some(parent) = parent else { return };
            if let Some(child) =
                self.buckets[parent.0 as usize].children.iter_mut().find(|c| c.item == Item::Bucket(at))
            {
                child.weight = weight;
            }
            at = parent;
        }
    }
}

/// The serialized form of a [`PlacementMap`]: the source facts only. Children lists, weights of
/// buckets and name indexes are derived, so a serialized map cannot carry inconsistent copies.
#[derive(Serialize, Deserialize)]
struct MapRepr {
    buckets: Vec<BucketRepr>,
    osds: Vec<OsdRepr>,
}

#[derive(Serialize, Deserialize)]
struct BucketRepr {
    id: BucketId,
    name: String,
    kind: BucketKind,
    parent: Option<BucketId>,
}

#[derive(Serialize, Deserialize)]
struct OsdRepr {
    id: OsdId,
    host: BucketId,
    weight: Weight,
}

impl From<PlacementMap> for MapRepr {
    fn from(map: PlacementMap) -> MapRepr {
        let buckets = map
            .buckets
            .into_iter()
            .enumerate()
            .map(|(i, b)| BucketRepr { id: BucketId(i as u32), name: b.name, kind: b.kind, parent: b.parent })
            .collect();
        let osds = map.osds.into_iter().map(|(id, e)| OsdRepr { id, host: e.host, weight: e.weight }).collect();
        MapRepr { buckets, osds }
    }
}

impl TryFrom<MapRepr> for PlacementMap {
    type Error = PlacementError;

    /// Rebuilds a map through the same checks as the builders: bucket 0 is the only root, ids
    /// are dense and in order, every parent precedes its children, nesting and uniqueness rules
    /// hold, and every OSD is in a host.
    fn try_from(repr: MapRepr) -> Result<PlacementMap, PlacementError> {
        let invalid = |what: String| Err(PlacementError::InvalidMap(what));
        let mut buckets = repr.buckets.into_iter();
        let Some(root) = buckets.next() else { return invalid("no buckets".to_string()) };
        if root.id != BucketId(0) || root.kind != BucketKind::Root || root.parent.is_some() {
            return invalid("bucket 0 must be the root, with no parent".to_string());
        }
        let mut map = PlacementMap::new();
        if root.name != ROOT_NAME {
            map.names.clear();
            map.names.insert(root.name.clone(), BucketId(0));
            map.buckets[0].name = root.name;
        }
        for b in buckets {
            let expected = map.buckets.len();
            if b.id.0 as usize != expected {
                return invalid(format!("bucket ids must be dense and in order: found {} at {expected}", b.id.0));
            }
            let Some(parent) = b.parent.filter(|p| (p.0 as usize) < expected) else {
                return invalid(format!("bucket {:?} has no parent before it", b.name));
            };
            map.insert_bucket(&b.name, b.kind, parent)?;
        }
        for o in repr.osds {
            if o.host.0 as usize >= map.buckets.len() {
                return invalid(format!("{} is in unknown bucket {}", o.id, o.host.0));
            }
            map.insert_osd(o.id, o.host, o.weight)?;
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_hosts() -> PlacementMap {
        let mut map = PlacementMap::new();
        map.add_host("a").expect("new host");
        map.add_host("b").expect("new host");
        map.add_osd(OsdId(0), "a", Weight::ONE).expect("new osd");
        map.add_osd(OsdId(1), "a", Weight::from_units(2)).expect("new osd");
        map.add_osd(OsdId(2), "b", Weight::from_units(3)).expect("new osd");
        map
    }

    #[test]
    fn weights_sum_up_the_tree() {
        let mut map = two_hosts();
        assert_eq!(map.total_weight(), 6 << 16);
        let a = map.bucket_id("a").expect("exists");
        assert_eq!(map.bucket_weight(a), Some(3 << 16));
        assert_eq!(map.set_weight(OsdId(1), Weight::ZERO), Ok(Weight::from_units(2)));
        assert_eq!(map.bucket_weight(a), Some(1 << 16));
        assert_eq!(map.total_weight(), 4 << 16);
        assert_eq!(map.remove_osd(OsdId(0)), Ok(Weight::ONE));
        assert_eq!(map.bucket_weight(a), Some(0));
        assert_eq!(map.total_weight(), 3 << 16);
        assert_eq!(map.osd_count(), 2);
    }

    #[test]
    fn racks_nest_and_weights_propagate() {
        let mut map = PlacementMap::new();
        map.add_rack("r1").expect("new rack");
        map.add_bucket("h1", BucketKind::Host, "r1").expect("host in rack");
        map.add_osd(OsdId(7), "h1", Weight::from_units(5)).expect("new osd");
        let r1 = map.bucket_id("r1").expect("exists");
        let h1 = map.bucket_id("h1").expect("exists");
        assert_eq!(map.bucket_weight(r1), Some(5 << 16));
        assert_eq!(map.osd_path(OsdId(7)), Some(vec![map.root(), r1, h1]));
        assert_eq!(map.osd_ancestor(OsdId(7), BucketKind::Rack), Some(r1));
        assert!(map.has_kind(BucketKind::Rack));
        assert_eq!(map.buckets_of_kind(BucketKind::Host), vec![h1]);
    }

    #[test]
    fn builders_refuse_bad_input() {
        let mut map = two_hosts();
        assert_eq!(map.add_host("a"), Err(PlacementError::DuplicateBucket("a".into())));
        assert_eq!(map.add_osd(OsdId(0), "b", Weight::ONE), Err(PlacementError::DuplicateOsd(OsdId(0))));
        assert_eq!(map.add_osd(OsdId(9), "zz", Weight::ONE), Err(PlacementError::UnknownHost("zz".into())));
        assert_eq!(map.add_osd(OsdId(9), ROOT_NAME, Weight::ONE), Err(PlacementError::NotAHost(ROOT_NAME.into())));
        assert_eq!(
            map.add_bucket("r", BucketKind::Rack, "a"),
            Err(PlacementError::InvalidNesting { child: BucketKind::Rack, parent: BucketKind::Host })
        );
        assert!(matches!(
            map.add_bucket("r2", BucketKind::Root, ROOT_NAME),
            Err(PlacementError::InvalidNesting { .. })
        ));
        assert_eq!(map.add_bucket("x", BucketKind::Host, "nope"), Err(PlacementError::UnknownBucket("nope".into())));
        assert_eq!(map.remove_osd(OsdId(42)), Err(PlacementError::UnknownOsd(OsdId(42))));
        assert_eq!(map.set_weight(OsdId(42), Weight::ONE), Err(PlacementError::UnknownOsd(OsdId(42))));
    }

    #[test]
    fn weight_conversions() {
        assert_eq!(Weight::from_f64(1.0), Some(Weight::ONE));
        assert_eq!(Weight::from_f64(0.5), Some(Weight::from_raw(1 << 15)));
        assert_eq!(Weight::from_f64(-1.0), None);
        assert_eq!(Weight::from_f64(f64::NAN), None);
        assert_eq!(Weight::from_f64(70000.0), None);
        assert_eq!(Weight::from_units(3).as_f64(), 3.0);
    }

    #[test]
    fn serde_round_trip_and_validation() {
        let mut map = two_hosts();
        map.add_rack("r").expect("new rack");
        map.add_bucket("c", BucketKind::Host, "r").expect("host in rack");
        map.add_osd(OsdId(3), "c", Weight::ONE).expect("new osd");
        let json = serde_json::to_string(&map).expect("serializes");
        let back: PlacementMap = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(serde_json::to_string(&back).expect("serializes"), json);
        assert_eq!(back.total_weight(), map.total_weight());
        assert_eq!(back.osd_path(OsdId(3)), map.osd_path(OsdId(3)));

        let bad = [
            // OSD in the root.
            r#"{"buckets":[{"id":0,"name":"default","kind":"root","parent":null}],
                "osds":[{"id":1,"host":0,"weight":65536}]}"#,
            // Parent after child (would allow cycles).
            r#"{"buckets":[{"id":0,"name":"default","kind":"root","parent":null},
                           {"id":1,"name":"h","kind":"host","parent":2},
                           {"id":2,"name":"r","kind":"rack","parent":0}],"osds":[]}"#,
            // Second root.
            r#"{"buckets":[{"id":0,"name":"default","kind":"root","parent":null},
                           {"id":1,"name":"x","kind":"root","parent":0}],"osds":[]}"#,
            // Duplicate OSD.
            r#"{"buckets":[{"id":0,"name":"default","kind":"root","parent":null},
                           {"id":1,"name":"h","kind":"host","parent":0}],
                "osds":[{"id":1,"host":1,"weight":1},{"id":1,"host":1,"weight":1}]}"#,
            // Unknown host.
            r#"{"buckets":[{"id":0,"name":"default","kind":"root","parent":null}],
                "osds":[{"id":1,"host":5,"weight":1}]}"#,
            r#"{"buckets":[],"osds":[]}"#,
        ];
        for text in bad {
            assert!(serde_json::from_str::<PlacementMap>(text).is_err(), "accepted {text}");
        }
    }
}
