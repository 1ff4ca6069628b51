//! A PG's peering record on one OSD, next to its log: when a primary last activated this OSD for
//! the PG (`last_epoch_started`), whether it is being backfilled (and how far), and which objects
//! it is known to miss. All of it lives in the omap of one object ([`INFO_OBJECT`]) of the PG's
//! log collection and changes only in transactions that also change what it describes: an
//! activation replaces it together with the log, a recovered object leaves the missing set in the
//! transaction that writes it, a backfill chunk moves the cursor in the transaction that copies
//! the chunk. So after a crash the record always matches the store.
//!
//! Keys: `les` → u64 big-endian; `backfill` → the cursor's bytes (present only while
//! backfilling; empty: nothing copied yet); `m` + object name → the needed version's key.

use std::collections::BTreeMap;

use shoal_map::PgId;
use shoal_proto::osd::Eversion;
use shoal_store::{ObjectStore, StoreError, Transaction};

use crate::pglog::log_collection;

/// The object holding a PG's peering record in its omap (in the PG's log collection).
pub const INFO_OBJECT: &str = "info";
const KEY_LES: &[u8] = b"les";
const KEY_BACKFILL: &[u8] = b"backfill";
const MISSING_PREFIX: u8 = b'm';
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
            let need = Eversion::from_key(&v).ok_or_else(|| bad("missing version is not 16 bytes"))?;
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
            entries.push((missing_key(name), need.to_key().to_vec()));
        }
        txn.omap_set(&coll, INFO_OBJECT, entries);
    }

    /// Adds to `txn` that `object` is missing here, needing version `need` (the log collection
    /// must exist).
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
        let mut meta = PgMeta { les: 42, backfill: Some(String::new()), missing: BTreeMap::new() };
        meta.missing.insert("a".into(), Eversion { epoch: 4, seq: 2 });
        meta.missing.insert("b/ü".into(), Eversion::default());
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
        assert!(back.has("a") && !back.has("b/ü") && !back.has("z"));

        let mut txn = Transaction::new();
        PgMeta::write_backfill(&mut txn, pg, None);
        store.commit(txn, Durability::Sync).expect("commit");
        assert_eq!(PgMeta::load(&store, pg).expect("load").backfill, None);
    }
}
