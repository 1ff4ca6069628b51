//! Choosing a PG's OSDs: distinct OSDs in distinct failure domains, by straw2 down the tree.
//!
//! For replica slot `s` (slot 0 is the primary), [`select()`] descends from the root: at each
//! bucket, straw2 over the children (by their summed weights) picks one, until an OSD is
//! reached. The first bucket of the failure-domain kind on that path is the replica's failure
//! domain. Descending level by level costs the sum of the fan-outs instead of the number of
//! OSDs, and since straw2 picks a child with probability `child weight / bucket weight`, the
//! OSD at the end is reached with probability `osd weight / total weight`.
//!
//! The OSD is rejected if it is already chosen, if its failure domain already holds a replica,
//! or if `is_usable` refuses it (down or out); then the descent restarts *from the root* with the
//! next attempt number. Restarting from the root, as modern Ceph does (`chooseleaf_descend_once`),
//! spreads the PGs of an unusable OSD over the whole cluster in proportion to weight, instead of
//! piling them onto the OSD's host siblings. Each (slot, attempt) pair is its own straw2 draw
//! index, so draws are independent and a slot's result depends only on earlier slots, never on
//! later ones.
//!
//! Attempts are bounded by [`MAX_ATTEMPTS`] (Ceph's `choose_total_tries` is also 50). If they
//! all fail (for example when a few failure domains hold almost all the weight, or most OSDs are
//! unusable), a deterministic exhaustive pass runs: the same descent, but each child is weighted
//! by the weight of its *eligible* OSDs only (usable, not chosen, in an unused failure domain),
//! so it finds an OSD whenever one exists, still in proportion to weight. Only if no eligible OSD
//! exists in an unused failure domain, which means every failure domain with a usable OSD
//! already holds a replica, so there are fewer usable failure domains than replicas, does a
//! second exhaustive pass allow a failure domain to be repeated, still requiring distinct OSDs.
//! A two-host cluster with three replicas thus gets two copies on one host rather than two
//! copies in all (Ceph would leave the PG undersized instead). If fewer usable OSDs exist than
//! replicas, the result is shorter than asked: callers must check its length.
//!
//! Stability: when an OSD becomes unusable, a PG that did not hold it keeps exactly its OSDs
//! (attempts that reached it were rejected anyway), unless the PG needed an exhaustive pass,
//! which weighs all eligible OSDs and so sees the change. A PG whose OSD in slot `s` becomes
//! unusable keeps slots before `s`, gets a new OSD in slot
//! `s`, and usually keeps the later slots; a later slot changes only if it collides with the new
//! OSD's failure domain, or if an attempt it had rejected because of the old OSD's failure domain
//! now succeeds (both have probability of about one over the number of failure domains). Up/down
//! and in/out are one predicate here: a caller that wants Ceph's behaviour for down-but-in OSDs
//! (keep the slot, skip it in the acting set) filters the result instead.

use crate::map::{BucketId, BucketKind, Child, Item, MAX_DEPTH, OsdId, PlacementMap};
use crate::straw2::straw2_choose_by;

/// Descents per replica slot before the exhaustive pass (Ceph's `choose_total_tries`).
pub const MAX_ATTEMPTS: u32 = 50;

/// Attempt numbers of the two exhaustive passes: beyond `MAX_ATTEMPTS`, so their draws are
/// independent of the regular attempts'.
const EXHAUSTIVE_STRICT_ATTEMPT: u32 = u32::MAX - 1;
const EXHAUSTIVE_RELAXED_ATTEMPT: u32 = u32::MAX;

/// A replica's failure domain: the first bucket of the failure-domain kind on its path, or the
/// OSD itself when there is none (or when the failure domain is the root, see [`select()`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Domain {
    Bucket(BucketId),
    Osd(OsdId),
}

/// Picks up to `replicas` distinct OSDs for the PG whose placement seed is `x` (see
/// [`crate::PgId::placement_seed`]), each in a distinct bucket of kind `failure_domain` when
/// enough such buckets have usable OSDs (see the module docs for the fallback). OSDs for which
/// `is_usable` returns false and OSDs of zero weight are never returned.
///
/// Contract: deterministic, the same map, `x`, `replicas`, `failure_domain` and predicate give
/// the same list; order matters, the first OSD is the primary. The list is shorter than
/// `replicas` only if fewer usable OSDs of positive weight exist. With `failure_domain` `Root`
/// the whole cluster is one failure domain, so replicas need only be distinct OSDs. If the map
/// has no bucket of `failure_domain` kind, each OSD counts as its own failure domain;
/// [`crate::pg_to_osds`] refuses that case instead.
pub fn select(
    map: &PlacementMap,
    x: u64,
    replicas: usize,
    failure_domain: BucketKind,
    is_usable: impl Fn(OsdId) -> bool,
) -> Vec<OsdId> {
    // Never more slots than OSDs: also bounds the allocation for absurd `replicas`.
    let replicas = replicas.min(map.osd_count());
    let mut sel = Selection { map, x, failure_domain, is_usable, chosen: Vec::new(), domains: Vec::new() };
    sel.chosen.reserve(replicas);
    sel.domains.reserve(replicas);
    for slot in 0..replicas {
        let pick = sel.by_attempts(slot).or_else(|| sel.exhaustive(slot, true)).or_else(|| sel.exhaustive(slot, false));
        let Some((osd, domain)) = pick else { break };
        sel.chosen.push(osd);
        sel.domains.push(domain);
    }
    sel.chosen
}

/// The state of one [`select()`] call.
struct Selection<'a, F> {
    map: &'a PlacementMap,
    x: u64,
    failure_domain: BucketKind,
    is_usable: F,
    chosen: Vec<OsdId>,
    domains: Vec<Domain>,
}

/// The straw2 draw index of one attempt of one slot.
fn draw_index(slot: usize, attempt: u32) -> u64 {
    ((slot as u64) << 32) | u64::from(attempt)
}

impl<F: Fn(OsdId) -> bool> Selection<'_, F> {
    /// Whether bucket kind `kind` marks a failure domain (the root never does: a root failure
    /// domain means OSD-level separation).
    fn is_domain_kind(&self, kind: BucketKind) -> bool {
        kind == self.failure_domain && kind != BucketKind::Root
    }

    /// The regular attempts of `slot`: plain descents, rejecting collisions and unusable OSDs.
    fn by_attempts(&self, slot: usize) -> Option<(OsdId, Domain)> {
        for attempt in 0..MAX_ATTEMPTS {
            // An empty (zero-weight) tree has nothing to find, however often we try.
            let (osd, domain) = self.descend(draw_index(slot, attempt))?;
            if !self.chosen.contains(&osd) && !self.domains.contains(&domain) && (self.is_usable)(osd) {
                return Some((osd, domain));
            }
        }
        None
    }

    /// One straw2 descent from the root by the map's weights.
    fn descend(&self, r: u64) -> Option<(OsdId, Domain)> {
        self.descend_by(r, &|c: &Child| c.weight)
    }

    /// A descent weighting each child by its eligible OSDs only. With `strict`, failure domains
    /// already used are not eligible. Finds an OSD whenever an eligible one exists.
    fn exhaustive(&self, slot: usize, strict: bool) -> Option<(OsdId, Domain)> {
        let attempt = if strict { EXHAUSTIVE_STRICT_ATTEMPT } else { EXHAUSTIVE_RELAXED_ATTEMPT };
        self.descend_by(draw_index(slot, attempt), &|c: &Child| self.eligible_weight(c.item, c.weight, strict, 0))
    }

    /// A straw2 descent from the root, drawing among each bucket's children by `weight`,
    /// noting the first failure-domain bucket passed through.
    fn descend_by(&self, r: u64, weight: &dyn Fn(&Child) -> u64) -> Option<(OsdId, Domain)> {
        let mut at = self.map.root();
        let mut domain = None;
        for _ in 0..MAX_DEPTH {
            let bucket = self.map.bucket(at);
            if domain.is_none() && self.is_domain_kind(bucket.kind) {
                domain = Some(Domain::Bucket(at));
            }
            let i = straw2_choose_by(&bucket.children, |c| (c.key, weight(c)), self.x, r)?;
            match bucket.children[i].item {
                Item::Bucket(b) => at = b,
                Item::Osd(osd) => return Some((osd, domain.unwrap_or(Domain::Osd(osd)))),
            }
        }
        None
    }

    /// The weight of the eligible OSDs under `item` (whose full weight is `weight`): usable,
    /// positive weight, not chosen, and with `strict`, not in a used failure domain. `depth`
    /// bounds the recursion by the tree's depth.
    fn eligible_weight(&self, item: Item, weight: u64, strict: bool, depth: usize) -> u64 {
        if weight == 0 {
            return 0;
        }
        match item {
            Item::Osd(osd) => {
                if self.chosen.contains(&osd) || !(self.is_usable)(osd) {
                    0
                } else {
                    weight
                }
            }
            Item::Bucket(b) => {
                let bucket = self.map.bucket(b);
                let used = strict && self.is_domain_kind(bucket.kind) && self.domains.contains(&Domain::Bucket(b));
                if used || depth >= MAX_DEPTH {
                    return 0;
                }
                bucket.children.iter().map(|c| self.eligible_weight(c.item, c.weight, strict, depth + 1)).sum()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::map::Weight;

    fn cluster(hosts: u32, per_host: u32) -> PlacementMap {
        let mut map = PlacementMap::new();
        for h in 0..hosts {
            let name = format!("h{h}");
            map.add_host(&name).expect("new host");
            for i in 0..per_host {
                map.add_osd(OsdId(h * per_host + i), &name, Weight::ONE).expect("new osd");
            }
        }
        map
    }

    #[test]
    fn empty_map_gives_nothing() {
        let map = PlacementMap::new();
        assert!(select(&map, 1, 3, BucketKind::Host, |_| true).is_empty());
        let map = cluster(2, 2);
        assert!(select(&map, 1, 0, BucketKind::Host, |_| true).is_empty());
        assert!(select(&map, 1, 3, BucketKind::Host, |_| false).is_empty());
    }

    #[test]
    fn absurd_replica_counts_are_capped() {
        let map = cluster(3, 2);
        let osds = select(&map, 9, usize::MAX, BucketKind::Host, |_| true);
        assert_eq!(osds.len(), 6);
    }

    #[test]
    fn fewer_hosts_than_replicas_repeats_hosts_with_distinct_osds() {
        let map = cluster(2, 3);
        for x in 0..500 {
            let osds = select(&map, x, 3, BucketKind::Host, |_| true);
            assert_eq!(osds.len(), 3);
            let mut hosts: Vec<_> = osds.iter().map(|&o| map.osd_host(o)).collect();
            hosts.sort();
            hosts.dedup();
            assert_eq!(hosts.len(), 2, "both hosts used before repeating: {osds:?}");
            let mut d = osds.clone();
            d.sort();
            d.dedup();
            assert_eq!(d.len(), 3);
        }
    }

    #[test]
    fn root_failure_domain_means_distinct_osds() {
        let map = cluster(1, 4);
        for x in 0..200 {
            let mut osds = select(&map, x, 4, BucketKind::Root, |_| true);
            osds.sort();
            assert_eq!(osds, vec![OsdId(0), OsdId(1), OsdId(2), OsdId(3)]);
        }
    }

    #[test]
    fn heavily_skewed_domains_still_separate() {
        // One host holds almost all the weight: the regular attempts for the second replica
        // nearly always hit it again, and the exhaustive pass must find the light host.
        let mut map = PlacementMap::new();
        map.add_host("big").expect("new host");
        map.add_host("small").expect("new host");
        map.add_osd(OsdId(0), "big", Weight::from_units(60000)).expect("new osd");
        map.add_osd(OsdId(1), "small", Weight::from_raw(1)).expect("new osd");
        for x in 0..200 {
            assert_eq!(select(&map, x, 2, BucketKind::Host, |_| true), vec![OsdId(0), OsdId(1)]);
        }
    }
}
