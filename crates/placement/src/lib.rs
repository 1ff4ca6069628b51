//! Placement: which placement group (PG) an object belongs to, and which OSDs hold a PG.
//!
//! In a Ceph-like cluster there is no lookup table of object locations. Every client and every
//! OSD computes placement from three small inputs: the object's name, the pool's `pg_num`, and
//! the cluster map. This crate is that computation. It is a pure library (no I/O, no async, no
//! clocks, no randomness), because two machines computing a different answer for the same
//! inputs would read and write different OSDs: every function here is deterministic, and the
//! only "randomness" is hashing with a fixed, versioned algorithm ([`hash`]).
//!
//! Placement is two steps:
//!
//! 1. **Object → PG** ([`pg_for_object`]): the object name's stable hash, reduced to
//!    `0..pg_num` by Ceph's *stable modulo* ([`pg`]), so that growing `pg_num` splits PGs into
//!    children instead of reshuffling every object.
//! 2. **PG → OSDs** ([`pg_to_osds`], [`select()`]): a descent of the map's tree of buckets
//!    (root → racks → hosts → OSDs, [`map`]) choosing a child at each level by weighted
//!    *straw2* ([`straw2`]), once per replica, with retries so that replicas land on distinct
//!    OSDs in distinct failure domains, and never on an OSD the caller marks unusable. Straw2
//!    places data in proportion to weight and moves only what it must when the map changes.
//!
//! Whether an OSD is up or in is not part of [`PlacementMap`]: it changes often and is passed
//! as a predicate, so marking an OSD out moves exactly its PGs (with one replica; with more,
//! a few percent of those PGs also change another slot, see [`mod@select`]).
//!
//! **Data movement across levels.** Straw2 is minimal *within one bucket*: a child's weight
//! change only moves choices to or from that child. But adding an OSD to a host also raises the
//! weight of the host and of its rack, so PGs that newly pick that rack (or host) then choose
//! among *all* of its children, and many land on the OSD's neighbours rather than on the new
//! OSD. Removing an OSD from the map likewise pushes PGs off its neighbours. With one replica,
//! every PG that moves still moves *towards* the new OSD (into its rack, its host, or onto it)
//! or away from the removed one's rack, and nothing moves between unrelated parts of the tree
//! (the tests check this); Ceph's CRUSH behaves the same way.
//! Measured with [`sim`] at 1,000 OSDs in 100 hosts and 4 racks, one replica: adding an OSD to
//! an existing host moved 2.7 times its weight share, adding it in a new host of a rack 1.8
//! times, and removing an OSD from the map 2.4 times its share, while marking it out moved
//! exactly its share. With hosts directly under the root, an OSD added in a new host moves
//! exactly its share. So the cheapest way to retire an OSD is to set its weight to zero (one
//! movement) and then remove it (no further movement), rather than marking it out and then
//! removing it (two movements).
//!
//! [`sim`] simulates a cluster to measure balance and movement; the `shoal placement simulate`
//! command is meant to print its report.
//!
//! ```
//! use shoal_placement::{BucketKind, OsdId, PlacementMap, Weight, pg_for_object, pg_to_osds};
//!
//! let mut map = PlacementMap::new();
//! for h in 0..3u32 {
//!     let host = format!("host-{h}");
//!     map.add_host(&host)?;
//!     map.add_osd(OsdId(h), &host, Weight::ONE)?;
//! }
//! let pg = pg_for_object(1, 128, "my-object")?;
//! let down = OsdId(2);
//! let osds = pg_to_osds(&map, pg.pool, pg.seed, 2, BucketKind::Host, |osd| osd != down)?;
//! assert_eq!(osds.len(), 2);
//! assert!(!osds.contains(&down));
//! # Ok::<(), shoal_placement::PlacementError>(())
//! ```

pub mod error;
pub mod hash;
pub mod map;
pub mod pg;
pub mod select;
pub mod sim;
pub mod straw2;

pub use error::PlacementError;
pub use hash::object_hash;
pub use map::{BucketId, BucketKind, OsdId, PlacementMap, Weight};
pub use pg::{PgId, pg_for_object, stable_mod};
pub use select::{MAX_ATTEMPTS, select};
pub use sim::{SimulateConfig, SimulationReport, simulate};

/// The OSDs of PG `pg_seed` of pool `pool`, for a pool of `size` replicas whose copies must be
/// in distinct buckets of kind `failure_domain`; OSDs for which `is_usable` returns false (down
/// or out) are skipped. The first OSD is the primary. See [`select()`] for the algorithm and the
/// fallback when there are fewer usable failure domains than replicas.
///
/// Contract: deterministic in all its inputs. `pg_seed` should be below the pool's `pg_num`
/// (as returned by [`pg_for_object`]), but any value is placed. The list may be shorter than
/// `size` when fewer usable OSDs exist (a degraded PG); `size == 0` gives an empty list.
///
/// Errors: [`PlacementError::NoFailureDomain`] if the map has no bucket of kind
/// `failure_domain`; [`PlacementError::NoUsableOsd`] if `size > 0` and no OSD of positive
/// weight is usable.
pub fn pg_to_osds(
    map: &PlacementMap,
    pool: u32,
    pg_seed: u32,
    size: usize,
    failure_domain: BucketKind,
    is_usable: impl Fn(OsdId) -> bool,
) -> Result<Vec<OsdId>, PlacementError> {
    if !map.has_kind(failure_domain) {
        return Err(PlacementError::NoFailureDomain(failure_domain));
    }
    if size == 0 {
        return Ok(Vec::new());
    }
    let pg = PgId { pool, seed: pg_seed };
    let osds = select(map, pg.placement_seed(), size, failure_domain, is_usable);
    if osds.is_empty() {
        return Err(PlacementError::NoUsableOsd(pg));
    }
    Ok(osds)
}
