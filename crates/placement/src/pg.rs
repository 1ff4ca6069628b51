//! Object name → placement group, with Ceph's stable modulo.
//!
//! A pool's objects are grouped into `pg_num` placement groups (PGs); a PG, not an object, is
//! the unit that is mapped to OSDs, replicated and recovered. An object's PG is its name hash
//! reduced to `0..pg_num`.
//!
//! A plain `hash % pg_num` would move almost every object when `pg_num` changes. Ceph's stable
//! modulo instead takes the low bits of the hash under `bmask` (the next power of two at or
//! above `pg_num`, minus one) and, when that value is not a valid PG (`>= pg_num`), drops the
//! top bit. Growing `pg_num` from `n` to `n + 1` then changes the PG of exactly the objects of
//! one PG, `n & (bmask >> 1)`, which splits in two: it keeps half of its objects, and the other
//! half go to the new PG `n`. More generally, when `pg_num` grows from `n` to `m`, an object
//! either keeps its PG or moves to a new PG `p >= n` whose *ancestor* (clear `p`'s top bit until
//! the value is below `n`, see [`pg_ancestor`]) is the object's old PG. So PG splits are local:
//! an OSD splits a PG's objects into children it already holds, and nothing else moves.

use serde::{Deserialize, Serialize};

use crate::error::PlacementError;
use crate::hash::{hash3, object_hash};

/// Largest `pg_num` of a pool: `bmask` (next power of two minus one) must fit in a `u32`.
pub const MAX_PG_NUM: u32 = 1 << 31;

/// Tag mixed into [`PgId::placement_seed`] so that placement seeds are unrelated to any other
/// use of [`hash3`]. Part of the placement contract: never change it.
const PLACEMENT_SEED_TAG: u64 = 0x5047_5345_4544; // "PGSEED"

/// A placement group: a pool and a seed in `0..pg_num` of that pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PgId {
    /// The pool the PG belongs to.
    pub pool: u32,
    /// The PG's number within its pool, in `0..pg_num`.
    pub seed: u32,
}

impl PgId {
    /// The 64-bit input of [`crate::select()`] for this PG. It mixes the pool into the seed so
    /// that PG 0 of pool 1 and PG 0 of pool 2 land on unrelated OSDs (as Ceph's
    /// `hash(ps, pool)` does); otherwise every pool would load the same OSDs the same way.
    pub fn placement_seed(self) -> u64 {
        hash3(u64::from(self.pool), u64::from(self.seed), PLACEMENT_SEED_TAG)
    }
}

impl std::fmt::Display for PgId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:x}", self.pool, self.seed)
    }
}

/// Parses what [`PgId`]'s `Display` writes: `POOL.SEED`, the pool in decimal, the seed in hex.
impl std::str::FromStr for PgId {
    type Err = String;

    fn from_str(s: &str) -> Result<PgId, String> {
        let (pool, seed) = s.split_once('.').ok_or_else(|| format!("PG {s:?} is not POOL.SEED (for example 1.1f)"))?;
        let pool = pool.parse().map_err(|_| format!("pool id {pool:?} in PG {s:?} is not a number"))?;
        let seed = u32::from_str_radix(seed, 16).map_err(|_| format!("seed {seed:?} in PG {s:?} is not hex"))?;
        Ok(PgId { pool, seed })
    }
}

/// Ceph's stable modulo: `x` reduced to `0..b`, given `bmask` = next power of two `>= b`,
/// minus one (see [`pg_mask`]). Contract: `b >= 1` and `bmask` is that mask; then the result is
/// `< b`. Unlike `x % b`, growing `b` by one changes the result for only the `x` whose result
/// was `b & (bmask >> 1)` (see the module docs).
pub fn stable_mod(x: u32, b: u32, bmask: u32) -> u32 {
    if x & bmask < b { x & bmask } else { x & (bmask >> 1) }
}

/// The `bmask` for [`stable_mod`]: the next power of two at or above `pg_num`, minus one.
/// Contract: `1 <= pg_num <= MAX_PG_NUM` (checked by the callers in this crate).
pub fn pg_mask(pg_num: u32) -> u32 {
    // For pg_num <= 2^31, next_power_of_two() cannot overflow.
    pg_num.next_power_of_two() - 1
}

/// The parent of PG seed `seed` when PGs split: `seed` with its highest set bit cleared. PG `p`
/// (for `p >= 1`) was split off its parent when `pg_num` grew past `p`. Seed 0 has no parent and
/// is returned unchanged.
pub fn pg_parent(seed: u32) -> u32 {
    if seed == 0 { 0 } else { seed & !(1u32 << (31 - seed.leading_zeros())) }
}

/// The PG that `seed` descends from when the pool had `pg_num` PGs: `seed`'s parents are taken
/// until the value is below `pg_num`. Objects of PG `seed` (at a larger `pg_num`) all were in the
/// returned PG at `pg_num`. Contract: `pg_num >= 1`; the result is `< pg_num`.
pub fn pg_ancestor(seed: u32, pg_num: u32) -> u32 {
    let mut s = seed;
    // Each step clears one bit, so this ends after at most 32 steps.
    while s >= pg_num && s != 0 {
        s = pg_parent(s);
    }
    s
}

/// The PG seed of an object hash in a pool of `pg_num` PGs. Only the low 32 bits of the hash are
/// used (as Ceph's 32-bit `ps`). Errors: `pg_num` is 0 or above [`MAX_PG_NUM`].
pub fn pg_seed_for_hash(hash: u64, pg_num: u32) -> Result<u32, PlacementError> {
    check_pg_num(pg_num)?;
    Ok(stable_mod(hash as u32, pg_num, pg_mask(pg_num)))
}

/// The PG of object `name` in pool `pool` of `pg_num` PGs: the stable modulo of the object's
/// [`object_hash`]. Errors: `pg_num` is 0 or above [`MAX_PG_NUM`].
pub fn pg_for_object(pool: u32, pg_num: u32, name: impl AsRef<[u8]>) -> Result<PgId, PlacementError> {
    let seed = pg_seed_for_hash(object_hash(name.as_ref()), pg_num)?;
    Ok(PgId { pool, seed })
}

fn check_pg_num(pg_num: u32) -> Result<(), PlacementError> {
    if pg_num == 0 || pg_num > MAX_PG_NUM {
        return Err(PlacementError::InvalidPgNum { got: pg_num, max: MAX_PG_NUM });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pg_ids_parse_what_they_print() {
        for pg in [PgId { pool: 0, seed: 0 }, PgId { pool: 7, seed: 0x1f }, PgId { pool: u32::MAX, seed: u32::MAX }] {
            assert_eq!(pg.to_string().parse::<PgId>(), Ok(pg));
        }
        for bad in ["", "1", "1.", ".1", "x.1", "1.zz", "1.2.3"] {
            assert!(bad.parse::<PgId>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn stable_mod_small_cases() {
        // pg_num 12, mask 15: 0..12 map to themselves, 12..16 drop the top bit (8).
        for x in 0..12 {
            assert_eq!(stable_mod(x, 12, 15), x);
        }
        assert_eq!(stable_mod(12, 12, 15), 4);
        assert_eq!(stable_mod(15, 12, 15), 7);
        assert_eq!(stable_mod(16 + 3, 12, 15), 3);
        assert_eq!(pg_mask(1), 0);
        assert_eq!(pg_mask(12), 15);
        assert_eq!(pg_mask(16), 15);
        assert_eq!(pg_mask(MAX_PG_NUM), u32::MAX >> 1);
    }

    #[test]
    fn parent_and_ancestor() {
        assert_eq!(pg_parent(0), 0);
        assert_eq!(pg_parent(1), 0);
        assert_eq!(pg_parent(12), 4);
        assert_eq!(pg_parent(u32::MAX), u32::MAX >> 1);
        assert_eq!(pg_ancestor(13, 5), 1); // 13 -> 5 -> 1
        assert_eq!(pg_ancestor(3, 5), 3);
    }

    #[test]
    fn pg_num_is_checked() {
        assert!(matches!(pg_for_object(1, 0, "a"), Err(PlacementError::InvalidPgNum { got: 0, .. })));
        assert!(pg_for_object(1, MAX_PG_NUM + 1, "a").is_err());
        assert!(pg_for_object(1, MAX_PG_NUM, "a").is_ok());
        let pg = pg_for_object(7, 1, "anything").expect("valid pg_num");
        assert_eq!(pg, PgId { pool: 7, seed: 0 });
    }

    #[test]
    fn growing_by_one_splits_exactly_one_pg() {
        for n in 1..200u32 {
            let splitting = n & (pg_mask(n + 1) >> 1);
            for x in 0..2048u32 {
                let before = stable_mod(x, n, pg_mask(n));
                let after = stable_mod(x, n + 1, pg_mask(n + 1));
                if before != after {
                    assert_eq!(before, splitting, "n={n} x={x}");
                    assert_eq!(after, n, "n={n} x={x}");
                }
            }
        }
    }

    proptest! {
        /// Growing pg_num from n to any m > n only moves objects from a PG to one of its
        /// descendants, which are all new PGs (>= n).
        #[test]
        fn growing_pg_num_only_splits(n in 1u32..5000, extra in 1u32..20000, hash in any::<u64>()) {
            let m = n + extra;
            let before = pg_seed_for_hash(hash, n).expect("valid");
            let after = pg_seed_for_hash(hash, m).expect("valid");
            prop_assert!(before < n && after < m);
            if before != after {
                prop_assert!(after >= n, "moved to an old PG: {before} -> {after}");
                prop_assert_eq!(pg_ancestor(after, n), before);
            }
        }

        /// Shrinking is the inverse: merging children back gives each object its ancestor.
        #[test]
        fn every_seed_descends_from_its_pg_at_smaller_pg_num(m in 1u32..100_000, hash in any::<u64>()) {
            let after = pg_seed_for_hash(hash, m).expect("valid");
            for n in [1, m / 3 + 1, m / 2 + 1, m] {
                prop_assert_eq!(pg_ancestor(after, n), pg_seed_for_hash(hash, n).expect("valid"));
            }
        }
    }
}
