//! A PG's peering record on one OSD, next to its log: when a primary last activated this OSD for
//! the PG (`last_epoch_started`), whether it is being backfilled (and how far), and which objects
//! it is known to miss. All of it lives in the omap of one object ([`INFO_OBJECT`]) of the PG's
//! log collection and changes only in transactions that also change what it describes: an
//! activation replaces it together with the log, a recovered object leaves the missing set in the
//! transaction that writes it, a backfill chunk moves the cursor in the transaction that copies
//! the chunk. So after a crash the record always matches the store.
//!
//! Keys: `les` → u64 big-endian; `backfill` → the cursor's bytes (present only while
//! backfilling; empty: nothing copied yet); `m` + object name → the needed version's key,
//! followed, for a copy here that holds writes the PG's history rolled back, by the newest
//! version of the history it holds (16 bytes) and those writes (36 bytes each: version, request
//! id, operation count; decision 0063).

use std::collections::BTreeMap;

use shoal_map::PgId;
use shoal_proto::osd::{Eversion, ReqId};
use shoal_store::{ObjectStore, StoreError, Transaction};

use crate::pglog::log_collection;

/// The object holding a PG's peering record in its omap (in the PG's log collection).
pub const INFO_OBJECT: &str = "info";
const KEY_LES: &[u8] = b"les";
const KEY_BACKFILL: &[u8] = b"backfill";
const MISSING_PREFIX: u8 = b'm';
/// Writes of one object recorded as held by a divergent copy at most: a copy holding more has
/// no record (an operator's revert then refuses it rather than keep writes it cannot name).
pub const MAX_DIVERGENT_WRITES: usize = 64;
/// Operations of one recorded write at most (a revert logs a write with as many operations that
/// change nothing, so that a resend is answered with one result per operation): a copy holding
/// a larger one has no record.
pub const MAX_DIVERGENT_OPS: u32 = 1024;
const DIVERGENT_WRITE_BYTES: usize = 36;
/// Entries read from a record at most: a missing set is bounded by two logs (the authoritative
/// entries past the common point plus this OSD's divergent ones), so anything beyond is damage.
const MAX_RECORD_KEYS: usize = 8192;

/// The peering record in memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PgMeta {
    /// Epoch of the last activation of this OSD for the PG (0: never).
    pub les: u64,
    /// `Some(cursor)` while backfilling: objects named after the cursor are not trustworthy.
    pub backfill: Option<String>,
    /// Objects missing or stale here → the version needed (`0'0`: whatever the authority holds).
    pub missing: BTreeMap<String, Eversion>,
    /// Missing objects whose copy here holds writes the PG's history rolled back (divergent
    /// writes this OSD applied as an old primary or its replica, dropped from its log by an
    /// activation), with what the copy holds: what lets an operator's revert keep such a copy
    /// without applying a client's resend of one of those writes twice (decision 0063). Only
    /// for objects of `missing`; stored with their missing record, and gone with it.
    pub held_divergent: BTreeMap<String, DivergentCopy>,
}

/// What a copy holding writes its PG's history rolled back holds (see
/// [`PgMeta::held_divergent`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DivergentCopy {
    /// The newest version of the PG's history the copy holds: the common point of this OSD's log
    /// with the authoritative one when the writes were rolled back. The history's writes of the
    /// object after it are not in the copy; every one up to it is.
    pub common: Eversion,
    /// The rolled-back writes of the object, oldest first (at most [`MAX_DIVERGENT_WRITES`]):
    /// the copy holds each of them up to the version stored with it.
    pub writes: Vec<DivergentWrite>,
}

/// One write a divergent copy holds: its version (in no log any more), its request and how many
/// operations it had (a resend is answered with one result per operation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DivergentWrite {
    pub version: Eversion,
    pub reqid: ReqId,
    pub op_count: u32,
}

impl DivergentCopy {
    fn encode_after(&self, v: &mut Vec<u8>) {
        v.extend_from_slice(&self.common.to_key());
        for w in &self.writes {
            v.extend_from_slice(&w.version.to_key());
            v.extend_from_slice(&w.reqid.client.to_be_bytes());
            v.extend_from_slice(&w.reqid.tid.to_be_bytes());
            v.extend_from_slice(&w.op_count.to_be_bytes());
        }
    }

    /// Decodes what follows a missing record's needed version (`None` if nothing does).
    fn decode(v: &[u8]) -> Result<Option<DivergentCopy>, &'static str> {
        if v.is_empty() {
            return Ok(None);
        }
        if v.len() < 16 || !(v.len() - 16).is_multiple_of(DIVERGENT_WRITE_BYTES) {
            return Err("divergent writes are not 16 + 36n bytes");
        }
        let count = (v.len() - 16) / DIVERGENT_WRITE_BYTES;
        if count == 0 || count > MAX_DIVERGENT_WRITES {
            return Err("divergent writes: none, or more than the bound");
        }
        let be_u64 = |b: &[u8]| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_be_bytes(a)
        };
        let common = Eversion::from_key(&v[..16]).ok_or("divergent common point is not a version")?;
        let mut writes = Vec::with_capacity(count);
        for c in v[16..].chunks_exact(DIVERGENT_WRITE_BYTES) {
            let mut n = [0u8; 4];
            n.copy_from_slice(&c[32..36]);
            let op_count = u32::from_be_bytes(n);
            if !(1..=MAX_DIVERGENT_OPS).contains(&op_count) {
                return Err("divergent write's operation count out of bounds");
            }
            writes.push(DivergentWrite {
                version: Eversion::from_key(&c[..16]).ok_or("divergent write's version")?,
                reqid: ReqId { client: be_u64(&c[16..24]), tid: be_u64(&c[24..32]) },
                op_count,
            });
        }
        Ok(Some(DivergentCopy { common, writes }))
    }
}

impl PgMeta {
    /// Reads PG `pg`'s record (the default if the PG has none here).
    pub fn load(store: &dyn ObjectStore, pg: PgId) -> Result<PgMeta, StoreError> {
        let coll = log_collection(pg);
        let mut meta = PgMeta::default();
        if !store.collection_exists(&coll)? || !store.exists(&coll, INFO_OBJECT)? {
            return Ok(meta);
        }
        let mut after: Option<Vec<u8>> = None;
        let mut read = 0usize;
        loop {
            let page = store.omap_list(&coll, INFO_OBJECT, after.as_deref(), 1024)?;
            let Some((last, _)) = page.last() else { break };
            after = Some(last.clone());
            read += page.len();
            if read > MAX_RECORD_KEYS {
                return Err(StoreError::Corrupt(format!("PG {pg}'s peering record has over {MAX_RECORD_KEYS} keys")));
            }
            for (k, v) in page {
                meta.decode_key(pg, &k, v)?;
            }
        }
        Ok(meta)
    }

    fn decode_key(&mut self, pg: PgId, k: &[u8], v: Vec<u8>) -> Result<(), StoreError> {
        let bad = |what: &str| StoreError::Corrupt(format!("PG {pg}'s peering record: {what}"));
        if k == KEY_LES {
            let b: [u8; 8] = v.as_slice().try_into().map_err(|_| bad("les is not 8 bytes"))?;
            self.les = u64::from_be_bytes(b);
        } else if k == KEY_BACKFILL {
            self.backfill = Some(String::from_utf8(v).map_err(|_| bad("backfill cursor is not UTF-8"))?);
        } else if k.first() == Some(&MISSING_PREFIX) {
            let name = std::str::from_utf8(&k[1..]).map_err(|_| bad("missing object name is not UTF-8"))?;
            let need =
                v.get(..16).and_then(Eversion::from_key).ok_or_else(|| bad("missing version is not 16 bytes"))?;
            if let Some(held) = DivergentCopy::decode(&v[16..]).map_err(bad)? {
                self.held_divergent.insert(name.to_string(), held);
            }
            self.missing.insert(name.to_string(), need);
        } else {
            return Err(bad("unknown key"));
        }
        Ok(())
    }

    /// Adds to `txn` the replacement of the stored record by `self` (the log collection and
    /// object must exist or be created earlier in `txn`).
    pub fn write_whole(&self, txn: &mut Transaction, pg: PgId) {
        let coll = log_collection(pg);
        txn.touch(&coll, INFO_OBJECT).omap_clear(&coll, INFO_OBJECT);
        let mut entries = vec![(KEY_LES.to_vec(), self.les.to_be_bytes().to_vec())];
        if let Some(cursor) = &self.backfill {
            entries.push((KEY_BACKFILL.to_vec(), cursor.as_bytes().to_vec()));
        }
        for (name, need) in &self.missing {
            let mut value = need.to_key().to_vec();
            if let Some(held) = self.held_divergent.get(name) {
                held.encode_after(&mut value);
            }
            entries.push((missing_key(name), value));
        }
        txn.omap_set(&coll, INFO_OBJECT, entries);
    }

    /// Adds to `txn` that `object` is missing here, needing version `need`, with no rolled-back
    /// writes recorded (the log collection must exist).
    pub fn write_missing(txn: &mut Transaction, pg: PgId, object: &str, need: Eversion) {
        let coll = log_collection(pg);
        txn.touch(&coll, INFO_OBJECT).omap_set(&coll, INFO_OBJECT, vec![(missing_key(object), need.to_key().to_vec())]);
    }

    /// Adds to `txn` that `object` is no longer missing.
    pub fn write_recovered(txn: &mut Transaction, pg: PgId, object: &str) {
        txn.omap_remove(&log_collection(pg), INFO_OBJECT, vec![missing_key(object)]);
    }

    /// Adds to `txn` the new backfill cursor (`None`: backfill complete).
    pub fn write_backfill(txn: &mut Transaction, pg: PgId, cursor: Option<&str>) {
        let coll = log_collection(pg);
        match cursor {
            Some(c) => {
                txn.touch(&coll, INFO_OBJECT).omap_set(
                    &coll,
                    INFO_OBJECT,
                    vec![(KEY_BACKFILL.to_vec(), c.as_bytes().to_vec())],
                );
            }
            None => {
                txn.touch(&coll, INFO_OBJECT).omap_remove(&coll, INFO_OBJECT, vec![KEY_BACKFILL.to_vec()]);
            }
        }
    }

    /// `name` is no longer missing here (in memory: [`PgMeta::write_recovered`] is its stored
    /// counterpart), nor recorded as holding rolled-back writes.
    pub fn recovered(&mut self, name: &str) {
        self.missing.remove(name);
        self.held_divergent.remove(name);
    }

    /// Records that this OSD's copy of missing `object` holds `writes` (oldest first), which the
    /// PG's history rolled back, on top of the history up to `common`. A copy that already had
    /// a record, or holds more writes than the bound (or one with more operations), keeps none: what it holds cannot be named
    /// (a copy missing since an earlier rollback takes no writes, so this does not happen).
    pub fn record_divergent(&mut self, object: &str, common: Eversion, writes: Vec<DivergentWrite>) {
        debug_assert!(self.missing.contains_key(object), "divergent writes recorded for an object not missing");
        let nameable = !writes.is_empty()
            && writes.len() <= MAX_DIVERGENT_WRITES
            && writes.iter().all(|w| (1..=MAX_DIVERGENT_OPS).contains(&w.op_count));
        if self.held_divergent.contains_key(object) || !nameable {
            tracing::warn!(
                object,
                writes = writes.len(),
                "a copy's rolled-back writes cannot be recorded: a revert will refuse it"
            );
            self.held_divergent.remove(object);
            return;
        }
        self.held_divergent.insert(object.to_string(), DivergentCopy { common, writes });
    }

    /// Whether the object `name` can be trusted here: not missing, and not beyond the backfill
    /// cursor. (For a head with clones, whether the cursor also passed them is the caller's to
    /// check: see `OsdCore::on_pull`.)
    #[must_use]
    pub fn has(&self, name: &str) -> bool {
        !self.missing.contains_key(name) && self.backfill.as_deref().is_none_or(|c| name <= c)
    }
}

fn missing_key(name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + name.len());
    k.push(MISSING_PREFIX);
    k.extend_from_slice(name.as_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_store::Durability;
    use shoal_store::engine::MemEngine;

    #[test]
    fn record_round_trips_and_changes_in_place() {
        let store = MemEngine::new_mem(64 << 20).expect("store");
        let pg = PgId { pool: 1, seed: 3 };
        assert_eq!(PgMeta::load(&store, pg).expect("load"), PgMeta::default());
        let mut meta = PgMeta { les: 42, backfill: Some(String::new()), ..PgMeta::default() };
        meta.missing.insert("a".into(), Eversion { epoch: 4, seq: 2 });
        meta.missing.insert("b/ü".into(), Eversion::default());
        let write = |seq, tid| DivergentWrite {
            version: Eversion { epoch: 5, seq },
            reqid: ReqId { client: 9, tid },
            op_count: 2,
        };
        meta.record_divergent("b/ü", Eversion { epoch: 4, seq: 7 }, vec![write(8, 1), write(9, 3)]);
        let mut txn = Transaction::new();
        txn.create_collection(&log_collection(pg));
        meta.write_whole(&mut txn, pg);
        store.commit(txn, Durability::Sync).expect("commit");
        assert_eq!(PgMeta::load(&store, pg).expect("load"), meta);

        let mut txn = Transaction::new();
        PgMeta::write_recovered(&mut txn, pg, "a");
        PgMeta::write_backfill(&mut txn, pg, Some("m"));
        store.commit(txn, Durability::Sync).expect("commit");
        let back = PgMeta::load(&store, pg).expect("load");
        assert_eq!(back.backfill.as_deref(), Some("m"));
        assert!(!back.missing.contains_key("a") && back.missing.contains_key("b/ü"));
        assert_eq!(back.held_divergent, meta.held_divergent, "rolled-back writes kept with the missing record");
        assert!(back.has("a") && !back.has("b/ü") && !back.has("z"));

        let mut txn = Transaction::new();
        PgMeta::write_backfill(&mut txn, pg, None);
        store.commit(txn, Durability::Sync).expect("commit");
        assert_eq!(PgMeta::load(&store, pg).expect("load").backfill, None);

        // Damaged records are refused, not half read.
        for bad in [vec![0u8; 15], vec![0u8; 16 + 16], vec![0u8; 16 + 16 + 35]] {
            let mut txn = Transaction::new();
            txn.omap_set(&log_collection(pg), INFO_OBJECT, vec![(missing_key("c"), bad)]);
            store.commit(txn, Durability::Sync).expect("commit");
            assert!(PgMeta::load(&store, pg).is_err(), "a damaged missing record is an error");
        }
    }

    #[test]
    fn a_copy_whose_rolled_back_writes_cannot_be_named_has_no_record() {
        let mut meta = PgMeta::default();
        meta.missing.insert("x".into(), Eversion { epoch: 3, seq: 1 });
        let write = |seq: u64| DivergentWrite {
            version: Eversion { epoch: 4, seq },
            reqid: ReqId { client: 1, tid: seq },
            op_count: 1,
        };
        let too_many: Vec<_> = (0..=MAX_DIVERGENT_WRITES as u64).map(write).collect();
        meta.record_divergent("x", Eversion::default(), too_many);
        assert!(meta.held_divergent.is_empty(), "over the bound: no record");
        meta.record_divergent("x", Eversion::default(), vec![write(1)]);
        meta.record_divergent("x", Eversion::default(), vec![write(2)]);
        assert!(meta.held_divergent.is_empty(), "a second rollback of the same copy: no record");
        meta.record_divergent("x", Eversion::default(), vec![write(3)]);
        meta.recovered("x");
        assert!(meta.missing.is_empty() && meta.held_divergent.is_empty());
    }
}
