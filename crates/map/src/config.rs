//! Cluster-wide settings and flags kept in the map, so that the monitors store them through
//! Raft and every daemon learns a change with the next map (`shoal config set`, `shoal osd set`).
//!
//! Only the settings listed in [`SETTINGS`] exist: each has a unit in its name, a default, and
//! bounds that [`crate::Command::ConfigSet`] checks, so a typo or an absurd value is refused with
//! an error naming the problem instead of silently doing nothing.

use crate::MapError;

/// One setting: its name (unit last), default, bounds and what it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub name: &'static str,
    pub default: u64,
    pub min: u64,
    pub max: u64,
    pub help: &'static str,
}

/// A down OSD still in the cluster is marked out after this long, so its PGs get their
/// redundancy back elsewhere without an operator (0: never). Ceph's `mon_osd_down_out_interval`.
pub const DOWN_OUT_INTERVAL_SECS: &str = "mon_osd_down_out_interval_secs";
/// Objects (or backfill chunks) each OSD recovers at once, across its PGs.
pub const RECOVERY_MAX_OPS: &str = "osd_recovery_max_ops";

/// Bytes of object data each OSD has in flight to recovery and backfill pushes at once, across
/// its PGs (at least one push is always allowed, whatever its size). Ceph bounds the same with
/// `osd_recovery_max_chunk` and `osd_max_backfills`. The default, 16 MiB, keeps what three
/// primaries push to one target under the worker's 64 MiB queue bound, beyond which pacing steps
/// aside (at 64 MiB a client write's p99 during a recovery was 21 ms, at 16 MiB 17 ms; decision
/// 0020).
pub const RECOVERY_MAX_BYTES: &str = "osd_recovery_max_inflight_bytes";
/// Data in one backfill push: small objects go together up to about this much, larger ones in
/// parts of this size, so that neither end spends longer than one such part's read or write
/// between two client operations (decision 0021). Ceph's `osd_recovery_max_chunk`. The bound
/// goes down to 64 bytes so that the simulation can send its small objects in parts. An object
/// with more xattrs and omap than this is recovered and backfilled in parts too (decision 0044).
pub const BACKFILL_CHUNK_BYTES: &str = "osd_backfill_chunk_bytes";
/// The largest backfill chunk allowed. A chunk of small objects can end up to twice the setting
/// (the last object goes in whole while the chunk is under it), and twice this must stay within
/// the object data one message carries beside its header (the OSD asserts it), or a chunk would
/// be refused by its own sender at every attempt and the PG would never finish backfilling.
pub const BACKFILL_CHUNK_BYTES_MAX: u64 = 16 << 20;
/// Objects in one backfill push at most (each costs its reads on the primary and its metadata
/// updates on the target, so small objects bound a push's length by their number). Measured with
/// 4 KiB objects (decision 0021): 16 gave a client p99 of 3.5x quiet during a recovery, 8 2.1x,
/// 4 2.0x at a quarter more recovery time than 8.
pub const BACKFILL_CHUNK_OBJECTS: &str = "osd_backfill_chunk_objects";
/// A primary whose backfill push a target refused for lack of space (it is past
/// [`crate::BACKFILLFULL_PERMILLE`], or its store is out of space) sends that target nothing more
/// of the PG for this long, then tries again. Ceph's `osd_backfill_retry_interval`.
pub const BACKFILL_RETRY_INTERVAL_MS: &str = "osd_backfill_retry_interval_ms";
/// While clients are doing I/O on an OSD, recovery and backfill may take at most this percentage
/// of its worker's time (100: no limit); with no client I/O they run flat out. Ceph reaches for
/// the same with `osd_recovery_sleep` and its mClock profiles.
pub const RECOVERY_BUSY_SHARE_PCT: &str = "osd_recovery_busy_share_pct";
/// Each PG is scrubbed lightly (object lists, sizes, metadata digests) about this often (0: only
/// on request). Ceph's `osd_scrub_min_interval`.
pub const SCRUB_INTERVAL_SECS: &str = "osd_scrub_interval_secs";
/// Each PG is deep-scrubbed (every byte read and checked) about this often (0: only on request).
/// Ceph's `osd_deep_scrub_interval`.
pub const DEEP_SCRUB_INTERVAL_SECS: &str = "osd_deep_scrub_interval_secs";

/// Every setting there is.
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: DOWN_OUT_INTERVAL_SECS,
        default: 600,
        min: 0,
        max: 30 * 24 * 3600,
        help: "seconds a down OSD stays in before the monitors mark it out (0: never)",
    },
    Setting {
        name: RECOVERY_MAX_OPS,
        default: 8,
        min: 1,
        max: 1024,
        help: "objects or backfill chunks each OSD recovers at once",
    },
    Setting {
        name: RECOVERY_MAX_BYTES,
        default: 16 << 20,
        min: 1 << 20,
        max: 64 << 30,
        help: "bytes of recovery and backfill pushes each OSD has in flight at once",
    },
    Setting {
        name: BACKFILL_CHUNK_BYTES,
        default: 1 << 20,
        min: 64,
        max: BACKFILL_CHUNK_BYTES_MAX,
        help: "bytes of data in one backfill push; larger objects (data, or xattrs and omap) are sent in parts of this size",
    },
    Setting {
        name: BACKFILL_CHUNK_OBJECTS,
        default: 8,
        min: 1,
        max: 1024,
        help: "objects in one backfill push at most",
    },
    Setting {
        name: BACKFILL_RETRY_INTERVAL_MS,
        default: 30_000,
        min: 10,
        max: 3_600_000,
        help: "milliseconds a primary waits before sending more backfill to a target that refused it as too full",
    },
    Setting {
        name: RECOVERY_BUSY_SHARE_PCT,
        default: 10,
        min: 1,
        max: 100,
        help: "percent of an OSD's worker time recovery may take while clients do I/O (100: no limit)",
    },
    Setting {
        name: SCRUB_INTERVAL_SECS,
        default: 24 * 3600,
        min: 0,
        max: 365 * 24 * 3600,
        help: "seconds between light scrubs of each PG (0: only on request)",
    },
    Setting {
        name: DEEP_SCRUB_INTERVAL_SECS,
        default: 7 * 24 * 3600,
        min: 0,
        max: 365 * 24 * 3600,
        help: "seconds between deep scrubs of each PG (0: only on request)",
    },
];

/// The flags there are.
pub const FLAGS: &[(&str, &str)] = &[("noout", "down OSDs are not marked out automatically (maintenance)")];

/// The setting called `name`, or an error listing the valid names.
pub fn setting(name: &str) -> Result<&'static Setting, MapError> {
    SETTINGS.iter().find(|s| s.name == name).ok_or_else(|| {
        let names: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
        MapError::InvalidConfig(format!("unknown setting {name:?}; the settings are {}", names.join(", ")))
    })
}

/// Checks `value` against `name`'s bounds.
pub fn check_value(name: &str, value: u64) -> Result<(), MapError> {
    let s = setting(name)?;
    if value < s.min || value > s.max {
        return Err(MapError::InvalidConfig(format!("{name} must be between {} and {}, not {value}", s.min, s.max)));
    }
    Ok(())
}

/// Checks that `flag` exists.
pub fn check_flag(flag: &str) -> Result<(), MapError> {
    if FLAGS.iter().any(|(f, _)| *f == flag) {
        return Ok(());
    }
    let names: Vec<&str> = FLAGS.iter().map(|(f, _)| *f).collect();
    Err(MapError::InvalidConfig(format!("unknown flag {flag:?}; the flags are {}", names.join(", "))))
}
