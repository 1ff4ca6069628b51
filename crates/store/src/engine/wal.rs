//! The engine's commit log: a region at the start of the data device holding one record per
//! transaction (its complete metadata batch), written with direct I/O next to the data.
//!
//! Why it exists: a transaction's new data and its log record live on the same device, so a
//! single device flush makes both durable. The metadata batch is then handed to the KV store
//! without a sync of its own. A durable 4 KiB write therefore costs one flush and two blocks
//! (data and record), instead of a flush for the data plus a flush of the KV journal, or a
//! copy of the data through the KV journal plus a second write to its place.
//!
//! Recovery: every batch also stores its sequence number under `meta/applied_seq`. At mount,
//! records are read from the start of the region; those with a sequence number above the KV
//! store's `applied_seq` are applied in order, until the first record that is torn, belongs to
//! an older lap, or breaks the sequence, or whose new data does not match its checksums (a
//! power failure before the flush can leave the record on the medium without its data; such a
//! transaction was never acknowledged as durable, and neither was any after it). Only records
//! past every record's `flushed_through` are verified: older ones are known durable, and their
//! blocks may legitimately hold newer data by now (the engine reuses freed blocks only once a
//! durable record says the freeing transaction was flushed, which keeps this rule sound). A *checkpoint* (device flush, KV sync) makes every
//! record redundant, after which the log starts again at its first block.
//!
//! In-place overwrites (decision 0040): a small overwrite of blocks an object already has is not
//! copied to new blocks; its data travels in the record itself and is written to its place only
//! once the record is known durable. Recovery writes the in-place data of every record of the
//! current *lap* (the records since the last checkpoint, recognised by `meta/lap_start`) again,
//! in order, including records the KV store already holds: the device may have lost those
//! writes, or never received them, while the KV store already points at their checksums. This
//! is sound because a block written in place is never reused within the lap that wrote it.
//!
//! Record layout (little-endian), padded with zeros to whole blocks:
//! `magic u32 | version u16 | reserved u16 | seq u64 | payload_len u32 | payload_crc u32 |
//! header_crc u32 | reserved u32 | payload` where payload is the postcard encoding of the batch
//! (version 1: batch, written ranges, claim; version 2 adds the in-place writes).

use serde::{Deserialize, Serialize};
use shoal_util::{AlignedBuf, crc32c};

use super::device::{BLOCK_BYTES, Device};
use super::kv::{Batch, Ks};
use crate::error::{Result, StoreError};

const MAGIC: u32 = 0x474F_4C53; // "SLOG"
/// Version written by this code. Version 1 records (written before in-place overwrites existed)
/// are still read, so a store that crashed under an older build recovers under this one.
const VERSION: u16 = 2;
const VERSION_1: u16 = 1;
const HEADER_BYTES: usize = 32;

/// Key in the `meta` keyspace of the sequence number of the last batch applied to the KV store.
pub const APPLIED_SEQ_KEY: &[u8] = b"applied_seq";
/// Key in the `meta` keyspace of the sequence number of the first record of the current lap:
/// records at the start of the region with smaller numbers belong to an older lap.
pub const LAP_START_KEY: &[u8] = b"lap_start";

/// A version 1 record's body.
#[derive(Serialize, Deserialize)]
struct PayloadV1 {
    ops: Vec<(u8, Vec<u8>, Option<Vec<u8>>)>,
    written: Vec<(u64, u64)>,
    flushed_through: u64,
}

#[derive(Serialize, Deserialize)]
struct Payload {
    ops: Vec<(u8, Vec<u8>, Option<Vec<u8>>)>,
    /// Device ranges `(offset, length)` of the data the transaction wrote, which recovery
    /// verifies before it applies the record.
    written: Vec<(u64, u64)>,
    /// Every transaction up to this sequence number was on stable storage (a device flush had
    /// completed) when this record was written.
    flushed_through: u64,
    /// Data to write in place: `(device offset, whole blocks)`, in the order the transaction
    /// wrote them (a later piece over the same block wins).
    inplace: Vec<(u64, Vec<u8>)>,
}

/// A transaction read back from the log.
pub struct Recovered {
    pub seq: u64,
    pub batch: Batch,
    pub written: Vec<(u64, u64)>,
    pub flushed_through: u64,
    pub inplace: Vec<(u64, Vec<u8>)>,
}

/// What [`Log::recover`] found.
pub struct Recovery {
    /// In-place writes of the current lap's records that the KV store already holds, in order:
    /// to be written again before anything else.
    pub inplace_applied: Vec<(u64, Vec<u8>)>,
    /// Transactions beyond the KV store's, in order.
    pub records: Vec<Recovered>,
}

fn ks_from_u8(v: u8) -> Result<Ks> {
    super::kv::ALL_KEYSPACES
        .get(v as usize)
        .copied()
        .ok_or_else(|| StoreError::Corrupt(format!("log record names unknown keyspace {v}")))
}

/// A byte string borrowed from the batch, encoded with `serialize_bytes`. Postcard writes a byte
/// string exactly as it writes a `Vec<u8>` (a varint length, then the bytes), so
/// [`PayloadRef`] encodes to the same bytes as [`Payload`] without copying every key and value
/// first, and without encoding them one `u8` at a time.
struct RawBytes<'a>(&'a [u8]);

impl Serialize for RawBytes<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

/// [`Payload`] borrowed from a batch, for encoding (recovery decodes [`Payload`]).
#[derive(Serialize)]
struct PayloadRef<'a> {
    ops: Vec<(u8, RawBytes<'a>, Option<RawBytes<'a>>)>,
    written: &'a [(u64, u64)],
    flushed_through: u64,
    inplace: Vec<(u64, RawBytes<'a>)>,
}

/// A transaction's in-place writes: `(device offset, whole blocks)`.
pub type Inplace<'a> = [(u64, &'a [u8])];

/// The record body for `batch`, borrowing its keys and values.
fn payload<'a>(
    batch: &'a Batch,
    written: &'a [(u64, u64)],
    inplace: &Inplace<'a>,
    flushed_through: u64,
) -> PayloadRef<'a> {
    PayloadRef {
        ops: batch.ops.iter().map(|((ks, k), v)| (*ks as u8, RawBytes(k), v.as_deref().map(RawBytes))).collect(),
        written,
        flushed_through,
        inplace: inplace.iter().map(|(at, data)| (*at, RawBytes(data))).collect(),
    }
}

/// Bytes of `payload`'s postcard encoding, without encoding it.
fn body_bytes(payload: &PayloadRef<'_>) -> usize {
    match postcard::serialize_with_flavor(payload, postcard::ser_flavors::Size::default()) {
        Ok(n) => n,
        Err(e) => unreachable!("sizing a log payload cannot fail: {e}"),
    }
}

/// A record's size on the device: header and body padded to whole blocks.
fn padded_record_bytes(body_bytes: usize) -> usize {
    (HEADER_BYTES + body_bytes).div_ceil(BLOCK_BYTES as usize) * BLOCK_BYTES as usize
}

/// Bytes of a record's block-padded encoding, as [`encode_record`] would produce it: computed
/// without encoding (the engine reserves log space with it before a record's checksums exist).
#[must_use]
pub fn record_bytes(batch: &Batch, written: &[(u64, u64)], inplace: &Inplace<'_>, flushed_through: u64) -> u64 {
    padded_record_bytes(body_bytes(&payload(batch, written, inplace, flushed_through))) as u64
}

/// Encodes a record for `batch` with sequence number `seq`, padded to whole blocks. `written`
/// lists the device ranges of the transaction's new data, `inplace` its in-place writes.
#[must_use]
pub fn encode_record(
    seq: u64,
    batch: &Batch,
    written: &[(u64, u64)],
    inplace: &Inplace<'_>,
    flushed_through: u64,
) -> AlignedBuf {
    let payload = payload(batch, written, inplace, flushed_through);
    let body_len = body_bytes(&payload);
    let total = padded_record_bytes(body_len);
    // The body is encoded in place, after the header; the padding stays zero.
    let mut buf = AlignedBuf::zeroed(total);
    let written_len = match postcard::to_slice(&payload, &mut buf[HEADER_BYTES..HEADER_BYTES + body_len]) {
        Ok(b) => b.len(),
        Err(e) => unreachable!("encoding a log payload into its measured size cannot fail: {e}"),
    };
    assert_eq!(written_len, body_len, "a log payload encoded to another size than measured");
    let mut header = [0u8; HEADER_BYTES];
    header[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    header[4..6].copy_from_slice(&VERSION.to_le_bytes());
    header[8..16].copy_from_slice(&seq.to_le_bytes());
    header[16..20].copy_from_slice(&(body_len as u32).to_le_bytes());
    header[20..24].copy_from_slice(&crc32c(&buf[HEADER_BYTES..HEADER_BYTES + body_len]).to_le_bytes());
    let hcrc = crc32c(&header[..24]);
    header[24..28].copy_from_slice(&hcrc.to_le_bytes());
    buf[..HEADER_BYTES].copy_from_slice(&header);
    buf
}

/// Parses the header in `block` (the first block of a record): `Some((version, seq,
/// payload_len, payload_crc))` if it is an intact header of a version this code reads.
fn parse_header(block: &[u8]) -> Option<(u16, u64, usize, u32)> {
    let u32_at = |at: usize| u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]]);
    if u32_at(0) != MAGIC || u32_at(24) != crc32c(&block[..24]) {
        return None;
    }
    let version = u16::from_le_bytes([block[4], block[5]]);
    if version != VERSION && version != VERSION_1 {
        return None;
    }
    let seq = u64::from_le_bytes(block[8..16].try_into().ok()?);
    Some((version, seq, u32_at(16) as usize, u32_at(20)))
}

/// Decodes a record body of `version`.
fn decode_payload(version: u16, seq: u64, body: &[u8]) -> Result<Payload> {
    let undecodable = |e: postcard::Error| StoreError::Corrupt(format!("log record {seq} is undecodable: {e}"));
    if version == VERSION_1 {
        let p: PayloadV1 = postcard::from_bytes(body).map_err(undecodable)?;
        return Ok(Payload { ops: p.ops, written: p.written, flushed_through: p.flushed_through, inplace: Vec::new() });
    }
    postcard::from_bytes(body).map_err(undecodable)
}

/// The log's place on the device and where the next record goes.
#[derive(Debug)]
pub struct Log {
    /// Device offset of the region.
    pub offset: u64,
    pub len_bytes: u64,
    /// Offset of the next record, relative to `offset`.
    head: u64,
}

impl Log {
    #[must_use]
    pub fn new(offset: u64, len_bytes: u64) -> Self {
        assert!(offset.is_multiple_of(BLOCK_BYTES) && len_bytes.is_multiple_of(BLOCK_BYTES) && len_bytes > 0);
        Self { offset, len_bytes, head: 0 }
    }

    /// Largest record the log takes; bigger transactions commit without it (see the engine).
    #[must_use]
    pub fn max_record_bytes(&self) -> u64 {
        self.len_bytes / 4
    }

    /// Whether a record of `len` bytes fits before the end of the region.
    #[must_use]
    pub fn fits(&self, len: u64) -> bool {
        self.head + len <= self.len_bytes
    }

    /// Claims the next `len` bytes of the log and returns their device offset; the caller
    /// writes the record there.
    pub fn reserve(&mut self, len: u64) -> u64 {
        assert!(self.fits(len), "log record of {len} bytes does not fit");
        assert_eq!(len % BLOCK_BYTES, 0, "log records are whole blocks");
        let at = self.offset + self.head;
        self.head += len;
        at
    }

    /// Writes `record` at the head (not durable until the device is flushed).
    pub fn append<D: Device>(&mut self, dev: &D, record: &AlignedBuf) -> Result<()> {
        let at = self.reserve(record.len() as u64);
        dev.write_at(record, at).map_err(|e| StoreError::io("writing the commit log", e))
    }

    /// Starts a new lap at the first block. Only valid right after a checkpoint.
    pub fn reset(&mut self) {
        self.head = 0;
    }

    /// Reads the current lap: the records from the start of the region whose sequence numbers
    /// run on from one at or above `lap_start`. Returns the in-place writes of those the KV store
    /// already holds (up to `applied_seq`) and the whole batches of those after it, in order
    /// (see the module documentation for where the scan stops).
    pub fn recover<D: Device>(&self, dev: &D, applied_seq: u64, lap_start: u64) -> Result<Recovery> {
        let mut out = Recovery { inplace_applied: Vec::new(), records: Vec::new() };
        // The sequence number the next record of the lap must carry, once the first is known.
        let mut next: Option<u64> = None;
        let mut pos = 0u64;
        let mut block = AlignedBuf::zeroed(BLOCK_BYTES as usize);
        while pos + BLOCK_BYTES <= self.len_bytes {
            dev.read_uncached(&mut block, self.offset + pos)
                .map_err(|e| StoreError::io("reading the commit log", e))?;
            let Some((version, seq, payload_len, payload_crc)) = parse_header(&block) else { break };
            let total = (HEADER_BYTES + payload_len).div_ceil(BLOCK_BYTES as usize) as u64 * BLOCK_BYTES;
            let in_lap = match next {
                None => seq >= lap_start,
                Some(n) => seq == n,
            };
            // Past the lap (an older lap's records), or a gap after what the KV store holds.
            if !in_lap || pos + total > self.len_bytes || seq > applied_seq + 1 + out.records.len() as u64 {
                break;
            }
            let mut rec = AlignedBuf::zeroed(total as usize);
            dev.read_uncached(&mut rec, self.offset + pos).map_err(|e| StoreError::io("reading the commit log", e))?;
            let body = &rec[HEADER_BYTES..HEADER_BYTES + payload_len];
            if crc32c(body) != payload_crc {
                if seq <= applied_seq {
                    // The KV store has it (fjall wrote its journal before the device got the
                    // record). Never flushed, so none of its blocks were written in place:
                    // nothing to write again, and the records after it are still read.
                    next = Some(seq + 1);
                    pos += total;
                    continue;
                }
                break; // torn: this transaction was never acknowledged as durable
            }
            let payload = decode_payload(version, seq, body)?;
            if seq <= applied_seq {
                out.inplace_applied.extend(payload.inplace);
            } else {
                let mut batch = Batch::default();
                for (ks, key, value) in payload.ops {
                    batch.ops.insert((ks_from_u8(ks)?, key), value);
                }
                out.records.push(Recovered {
                    seq,
                    batch,
                    written: payload.written,
                    flushed_through: payload.flushed_through,
                    inplace: payload.inplace,
                });
            }
            next = Some(seq + 1);
            pos += total;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::device::MemDevice;

    proptest::proptest! {
        /// The borrowed encoding is byte for byte the owned one that recovery decodes.
        #[test]
        fn borrowed_payload_encodes_like_the_owned_one(
            ops in proptest::collection::vec(
                (0u8..4, proptest::collection::vec(proptest::num::u8::ANY, 0..300),
                 proptest::option::of(proptest::collection::vec(proptest::num::u8::ANY, 0..5000))),
                0..20),
            written in proptest::collection::vec((proptest::num::u64::ANY, proptest::num::u64::ANY), 0..5),
            flushed_through in proptest::num::u64::ANY,
        ) {
            let inplace: Vec<(u64, Vec<u8>)> = written.iter().map(|(at, len)| (*at, vec![*len as u8; (*len % 9000) as usize])).collect();
            let owned = Payload { ops: ops.clone(), written: written.clone(), flushed_through, inplace: inplace.clone() };
            let borrowed = PayloadRef {
                ops: ops.iter().map(|(ks, k, v)| (*ks, RawBytes(k), v.as_deref().map(RawBytes))).collect(),
                written: &written,
                flushed_through,
                inplace: inplace.iter().map(|(at, d)| (*at, RawBytes(d))).collect(),
            };
            let a = postcard::to_stdvec(&owned).unwrap();
            proptest::prop_assert_eq!(&a, &postcard::to_stdvec(&borrowed).unwrap());
            // The size the engine reserves log space by is the size it then encodes.
            proptest::prop_assert_eq!(body_bytes(&borrowed), a.len());
            let back: Payload = postcard::from_bytes(&a).unwrap();
            proptest::prop_assert_eq!(back.ops, ops);
            proptest::prop_assert_eq!(back.inplace, inplace);
        }
    }

    /// Writes a version 1 record, as builds before in-place overwrites did.
    fn encode_v1(seq: u64, batch: &Batch) -> AlignedBuf {
        let ops = batch.ops.iter().map(|((ks, k), v)| (*ks as u8, k.clone(), v.clone())).collect();
        let body = postcard::to_stdvec(&PayloadV1 { ops, written: Vec::new(), flushed_through: 0 }).unwrap();
        let mut buf = AlignedBuf::zeroed(padded_record_bytes(body.len()));
        buf[HEADER_BYTES..HEADER_BYTES + body.len()].copy_from_slice(&body);
        buf[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        buf[4..6].copy_from_slice(&VERSION_1.to_le_bytes());
        buf[8..16].copy_from_slice(&seq.to_le_bytes());
        buf[16..20].copy_from_slice(&(body.len() as u32).to_le_bytes());
        let crc = crc32c(&body);
        buf[20..24].copy_from_slice(&crc.to_le_bytes());
        let hcrc = crc32c(&buf[..24]);
        buf[24..28].copy_from_slice(&hcrc.to_le_bytes());
        buf
    }

    #[test]
    fn version_1_records_are_still_recovered() {
        let dev = MemDevice::new(1 << 20);
        let mut log = Log::new(0, 64 * 1024);
        let mut b = Batch::default();
        b.put(Ks::Meta, b"old".to_vec(), vec![1; 100]);
        log.append(&dev, &encode_v1(1, &b)).unwrap();
        let mut b2 = Batch::default();
        b2.put(Ks::Meta, b"new".to_vec(), vec![2; 100]);
        log.append(&dev, &encode_record(2, &b2, &[], &[(8192, &[7u8; 4096][..])], 1)).unwrap();
        let got = log.recover(&dev, 0, 0).unwrap();
        assert_eq!(got.records.len(), 2);
        assert!(got.records[0].batch.ops.contains_key(&(Ks::Meta, b"old".to_vec())));
        assert!(got.records[0].inplace.is_empty());
        assert_eq!(got.records[1].inplace, vec![(8192, vec![7u8; 4096])]);
    }

    #[test]
    fn in_place_writes_of_applied_records_of_the_lap_are_returned_and_older_laps_ignored() {
        let dev = MemDevice::new(1 << 20);
        let mut log = Log::new(0, 64 * 1024);
        let b = Batch::default();
        for seq in 5..=7u64 {
            log.append(&dev, &encode_record(seq, &b, &[], &[(4096 * seq, &[seq as u8; 4096][..])], 0)).unwrap();
        }
        // Records 5 and 6 are in the KV store; 7 is not.
        let got = log.recover(&dev, 6, 5).unwrap();
        assert_eq!(got.inplace_applied, vec![(4096 * 5, vec![5u8; 4096]), (4096 * 6, vec![6u8; 4096])]);
        assert_eq!(got.records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![7]);
        // After a checkpoint the lap starts at 8: the records left at the start are an older
        // lap's, whose in-place writes must never be written again.
        let got = log.recover(&dev, 7, 8).unwrap();
        assert!(got.inplace_applied.is_empty() && got.records.is_empty());
    }

    #[test]
    fn records_round_trip_and_stop_at_gaps() {
        let dev = MemDevice::new(1 << 20);
        let mut log = Log::new(4096, 64 * 1024);
        for seq in 1..=3u64 {
            let mut b = Batch::default();
            b.put(Ks::Meta, format!("k{seq}").into_bytes(), vec![seq as u8; 5000]);
            log.append(&dev, &encode_record(seq, &b, &[], &[], 0)).unwrap();
        }
        let got = log.recover(&dev, 1, 0).unwrap().records;
        assert_eq!(got.iter().map(|g| g.seq).collect::<Vec<_>>(), vec![2, 3]);
        assert!(got[0].batch.ops.contains_key(&(Ks::Meta, b"k2".to_vec())));
        // A new lap overwrites the start; the stale records after it are not applied.
        log.reset();
        let mut b = Batch::default();
        b.put(Ks::Meta, b"k4".to_vec(), vec![4]);
        log.append(&dev, &encode_record(4, &b, &[], &[], 0)).unwrap();
        let got = log.recover(&dev, 3, 0).unwrap().records;
        assert_eq!(got.iter().map(|g| g.seq).collect::<Vec<_>>(), vec![4]);
    }

    #[test]
    fn a_torn_record_the_kv_store_already_holds_is_skipped() {
        let dev = MemDevice::new(1 << 20);
        let mut log = Log::new(0, 64 * 1024);
        let b = Batch::default();
        for seq in 1..=3u64 {
            log.append(&dev, &encode_record(seq, &b, &[], &[(4096 * seq, &[seq as u8; 4096][..])], 0)).unwrap();
        }
        // Damage record 1's body (its header, in the first block, stays intact; the body ends
        // a few bytes into the second block).
        let mut block = AlignedBuf::zeroed(4096);
        dev.read_at(&mut block, 4096).unwrap();
        block[0] ^= 0xff;
        dev.write_at(&block, 4096).unwrap();
        let got = log.recover(&dev, 1, 1).unwrap();
        assert!(got.inplace_applied.is_empty(), "nothing of the torn record is written again");
        assert_eq!(got.records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![2, 3]);
    }

    #[test]
    fn torn_record_ends_recovery() {
        let dev = MemDevice::new(1 << 20);
        let mut log = Log::new(0, 64 * 1024);
        let mut b = Batch::default();
        b.put(Ks::Meta, b"k".to_vec(), vec![1; 6000]);
        let mut rec = encode_record(1, &b, &[], &[], 0);
        rec[5000] ^= 0xff;
        log.append(&dev, &rec).unwrap();
        assert!(log.recover(&dev, 0, 0).unwrap().records.is_empty());
    }
}
