//! Consistency check of an engine store: every extent verified against its checksums, and the
//! space accounting (extents plus free space must tile the device exactly once).

use std::collections::HashMap;

use shoal_util::crc32c;

use super::device::{BLOCK_BYTES, Device};
use super::kv::{Ks, KvRead};
use super::layout::{self, Onode, Superblock};
use crate::api::FsckReport;
use crate::error::Result;

/// Largest device read fsck issues at once, so its memory stays bounded.
const FSCK_READ_BYTES: u64 = 1 << 20;

fn split_object_key(key: &[u8]) -> (String, String) {
    let mut parts = key.splitn(2, |b| *b == 0);
    let coll = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let obj = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    (coll, obj)
}

/// Checks the store. The caller has checkpointed (the KV store holds everything) and holds the
/// writer lock.
/// `coll_objects` is the engine's count of objects per collection, checked against the records.
pub fn check<R: KvRead, D: Device>(
    kv: &R,
    dev: &D,
    sb: &Superblock,
    coll_objects: &HashMap<String, u64>,
) -> Result<FsckReport> {
    let mut report = FsckReport::default();
    let data_start = sb.log_offset + sb.log_bytes;
    let mut used: Vec<(u64, u64, String)> = Vec::new();

    let mut colls = Vec::new();
    kv.scan(Ks::Colls, &[], None, &mut |k, _| {
        colls.push(k.to_vec());
        true
    })?;
    report.collections = colls.len() as u64;

    let mut onodes = Vec::new();
    kv.scan(Ks::Onodes, &[], None, &mut |k, v| {
        onodes.push((k.to_vec(), v.to_vec()));
        true
    })?;
    let mut counted: HashMap<String, u64> = HashMap::new();
    for (key, value) in onodes {
        report.objects += 1;
        let (coll, obj) = split_object_key(&key);
        *counted.entry(coll.clone()).or_default() += 1;
        let name = format!("{coll}/{obj}");
        if !colls.iter().any(|c| c.as_slice() == coll.as_bytes()) {
            report.errors.push(format!("{name}: its collection does not exist"));
        }
        let onode: Onode = match Onode::decode(&value) {
            Ok(o) => o,
            Err(e) => {
                report.errors.push(format!("{name}: {e}"));
                continue;
            }
        };
        let prefix = layout::child_prefix(&coll, &obj);
        let end = layout::prefix_end(&prefix);
        let mut extents = Vec::new();
        kv.scan(Ks::Extents, &prefix, end.as_deref(), &mut |k, v| {
            extents.push((k.to_vec(), v.to_vec()));
            true
        })?;
        let mut logical_end = 0u64;
        for (k, v) in extents {
            let (off, e) = match layout::decode_extent(&k, &v) {
                Ok(x) => x,
                Err(err) => {
                    report.errors.push(format!("{name}: {err}"));
                    continue;
                }
            };
            let blocks = e.len_bytes / BLOCK_BYTES;
            let shape_ok = e.len_bytes > 0
                && e.len_bytes % BLOCK_BYTES == 0
                && off % BLOCK_BYTES == 0
                && e.phys % BLOCK_BYTES == 0
                && e.csums.len() as u64 == blocks
                && e.phys >= data_start
                && e.phys + e.len_bytes <= sb.device_bytes;
            if !shape_ok {
                report
                    .errors
                    .push(format!("{name}: malformed extent at offset {off} (device {}+{})", e.phys, e.len_bytes));
                continue;
            }
            if off < logical_end {
                report.errors.push(format!("{name}: extents overlap at offset {off}"));
            }
            logical_end = off + e.len_bytes;
            if off >= onode.size_bytes.div_ceil(BLOCK_BYTES) * BLOCK_BYTES {
                report.errors.push(format!("{name}: extent at offset {off} lies past the object's end"));
            }
            used.push((e.phys, e.len_bytes, name.clone()));
            // Verify the data in bounded pieces.
            let mut done = 0u64;
            while done < e.len_bytes {
                let n = (e.len_bytes - done).min(FSCK_READ_BYTES);
                let mut buf = shoal_util::AlignedBuf::zeroed(n as usize);
                if let Err(err) = dev.read_uncached(&mut buf, e.phys + done) {
                    report.errors.push(format!("{name}: read error at device offset {}: {err}", e.phys + done));
                    break;
                }
                for (i, block) in buf.chunks_exact(BLOCK_BYTES as usize).enumerate() {
                    let idx = (done / BLOCK_BYTES) as usize + i;
                    if crc32c(block) != e.csums[idx] {
                        report.errors.push(format!(
                            "{name}: checksum mismatch at object offset {} (device offset {})",
                            off + idx as u64 * BLOCK_BYTES,
                            e.phys + idx as u64 * BLOCK_BYTES
                        ));
                    }
                }
                report.bytes_verified += n;
                done += n;
            }
        }
    }

    let mut free_bytes = 0u64;
    kv.scan(Ks::Free, &[], None, &mut |k, v| {
        match (layout::decode_u64("free key", k), layout::decode_u64("free length", v)) {
            (Ok(off), Ok(len)) => {
                free_bytes += len;
                used.push((off, len, "free space".into()));
            }
            _ => report.errors.push(format!("malformed free-space record {k:?}")),
        }
        true
    })?;

    used.sort_unstable_by_key(|u| u.0);
    let mut expect = data_start;
    for (off, len, owner) in &used {
        if *off < expect {
            report.errors.push(format!("device blocks at {off}+{len} ({owner}) are claimed twice"));
        } else if *off > expect {
            report
                .errors
                .push(format!("device blocks at {expect}+{} are neither used nor free (leaked)", off - expect));
        }
        expect = expect.max(off + len);
    }
    if expect < sb.device_bytes {
        report
            .errors
            .push(format!("device blocks at {expect}+{} are neither used nor free (leaked)", sb.device_bytes - expect));
    }
    let _ = free_bytes;
    let mut colls_counted: Vec<&String> = counted.keys().chain(coll_objects.keys()).collect();
    colls_counted.sort_unstable();
    colls_counted.dedup();
    for coll in colls_counted {
        let (found, kept) = (counted.get(coll).copied().unwrap_or(0), coll_objects.get(coll).copied().unwrap_or(0));
        if found != kept {
            report
                .errors
                .push(format!("collection {coll}: {found} objects recorded, but the count in memory says {kept}"));
        }
    }
    Ok(report)
}
