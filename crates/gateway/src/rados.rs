//! Thin helpers over the cluster client for the operations the gateway repeats: whole-record
//! reads and writes, guarded writes, and omap ranges.

use shoal_client::Client;
use shoal_proto::osd::{ObjOp, OpOutput};

use crate::error::GatewayError;

/// The whole data of `object`, or `None` if it does not exist.
pub async fn read_all(client: &Client, pool: &str, object: &str) -> Result<Option<Vec<u8>>, GatewayError> {
    match client.op(pool, object, vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }], Vec::new()).await {
        Ok(r) => Ok(Some(r.data)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Xattr `name` of `object`, or `None` if it or the object does not exist.
pub async fn get_xattr(client: &Client, pool: &str, object: &str, name: &str) -> Result<Option<Vec<u8>>, GatewayError> {
    match client.op(pool, object, vec![ObjOp::GetXattr { name: name.into() }], Vec::new()).await {
        Ok(r) => match r.outputs.into_iter().next() {
            Some(OpOutput::Xattr(v)) => Ok(v),
            other => Err(GatewayError::Internal(format!("xattr read of {object} answered {other:?}"))),
        },
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The xattr every record carries: a digest of its bytes, the token of [`replace_record`]'s
/// compare-and-swap.
pub const DIGEST_XATTR: &str = "v";

fn digest(data: &[u8]) -> Vec<u8> {
    xxhash_rust::xxh3::xxh3_64(data).to_le_bytes().to_vec()
}

/// Replaces `object`'s data with `data` (and its digest); with `exclusive`, only if it does not
/// exist (else the error answers `is_exists`).
pub async fn write_record(
    client: &Client,
    pool: &str,
    object: &str,
    data: Vec<u8>,
    exclusive: bool,
) -> Result<(), GatewayError> {
    write_record_before(client, pool, object, data, exclusive, None).await
}

/// [`write_record`] that takes effect before `expiry` or never
/// ([`Client::op_parts_before`]).
pub async fn write_record_before(
    client: &Client,
    pool: &str,
    object: &str,
    data: Vec<u8>,
    exclusive: bool,
    expiry: Option<std::time::Instant>,
) -> Result<(), GatewayError> {
    let mut ops = Vec::with_capacity(2);
    if exclusive {
        ops.push(ObjOp::Create { exclusive: true });
    }
    ops.push(ObjOp::WriteFull { len_bytes: data.len() as u64 });
    ops.push(ObjOp::SetXattr { name: DIGEST_XATTR.into(), value: digest(&data) });
    client.op_parts_before(pool, object, ops, vec![bytes::Bytes::from(data)], expiry).await?;
    Ok(())
}

/// Replaces a record written by [`write_record`] whose bytes were `old` with `new`, only if it
/// still holds `old` (else the error answers `is_conflict`): a compare-and-swap.
pub async fn replace_record(
    client: &Client,
    pool: &str,
    object: &str,
    old: &[u8],
    new: Vec<u8>,
) -> Result<(), GatewayError> {
    let ops = vec![
        ObjOp::AssertXattr { name: DIGEST_XATTR.into(), value: Some(digest(old)) },
        ObjOp::WriteFull { len_bytes: new.len() as u64 },
        ObjOp::SetXattr { name: DIGEST_XATTR.into(), value: digest(&new) },
    ];
    client.op(pool, object, ops, new).await?;
    Ok(())
}

/// Removes a record written by [`write_record`] only if it still holds `old`; a missing or
/// replaced record is left alone (returns whether it was removed).
pub async fn remove_record(client: &Client, pool: &str, object: &str, old: &[u8]) -> Result<bool, GatewayError> {
    let ops = vec![ObjOp::AssertXattr { name: DIGEST_XATTR.into(), value: Some(digest(old)) }, ObjOp::Remove];
    match client.op(pool, object, ops, Vec::new()).await {
        Ok(_) => Ok(true),
        Err(e) if e.is_not_found() || e.code() == Some(shoal_proto::ErrorCode::Conflict) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Removes `object`; a missing one is not an error.
pub async fn remove(client: &Client, pool: &str, object: &str) -> Result<(), GatewayError> {
    match client.op(pool, object, vec![ObjOp::Remove], Vec::new()).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Runs write operations (no data) on `object`.
pub async fn write_ops(client: &Client, pool: &str, object: &str, ops: Vec<ObjOp>) -> Result<(), GatewayError> {
    write_ops_answered(client, pool, object, ops).await?;
    Ok(())
}

/// [`write_ops`], returning one output per operation: what the reads among them (xattrs and omap
/// values, [`ObjOp::reads_beside_writes`]) saw just before the writes, `Done` for each write — and
/// for each read too when the request was a resend answered from the PG log (read again then).
/// Concurrent requests on one object may be sent as one ([`Client::op_combined`]); each still
/// gets exactly the answer it would have had alone.
pub async fn write_ops_answered(
    client: &Client,
    pool: &str,
    object: &str,
    ops: Vec<ObjOp>,
) -> Result<Vec<OpOutput>, GatewayError> {
    let count = ops.len();
    // Index partitions take two such requests per S3 write, from every writer of the bucket at
    // once: concurrent ones share a trip (decision 0042).
    let outputs = client.op_combined(pool, object, ops).await?.outputs;
    if outputs.len() != count {
        return Err(GatewayError::Internal(format!("{count} operations answered with {} outputs", outputs.len())));
    }
    Ok(outputs)
}

/// Runs guarded write operations on `object`: true if they were applied, false if a guard
/// refused them (nothing changed: someone else changed what they assert first).
pub async fn guarded_ops(client: &Client, pool: &str, object: &str, ops: Vec<ObjOp>) -> Result<bool, GatewayError> {
    match write_ops(client, pool, object, ops).await {
        Ok(()) => Ok(true),
        Err(e) if e.is_conflict() => Ok(false),
        Err(e) => Err(e),
    }
}

/// The value of omap key `key` of `object` (`None`: no such key or object).
pub async fn omap_get(client: &Client, pool: &str, object: &str, key: &[u8]) -> Result<Option<Vec<u8>>, GatewayError> {
    match client.op(pool, object, vec![ObjOp::OmapGet { keys: vec![key.to_vec()] }], Vec::new()).await {
        Ok(r) => match r.outputs.into_iter().next() {
            Some(OpOutput::Omap(mut found)) => Ok(found.pop().and_then(|(_, v)| v)),
            other => Err(GatewayError::Internal(format!("omap get answered {other:?}"))),
        },
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The values of omap keys `keys` of `object`, in the order asked (`None`: no such key; all
/// `None` when there is no such object).
pub async fn omap_get_many(
    client: &Client,
    pool: &str,
    object: &str,
    keys: Vec<Vec<u8>>,
) -> Result<Vec<Option<Vec<u8>>>, GatewayError> {
    match client.op(pool, object, vec![ObjOp::OmapGet { keys: keys.clone() }], Vec::new()).await {
        Ok(r) => omap_values(&keys, r.outputs.into_iter().next()),
        Err(e) if e.is_not_found() => Ok(vec![None; keys.len()]),
        Err(e) => Err(e.into()),
    }
}

/// The values of `keys`, in the order asked, from the output of an `OmapGet` of them.
pub(crate) fn omap_values(keys: &[Vec<u8>], output: Option<OpOutput>) -> Result<Vec<Option<Vec<u8>>>, GatewayError> {
    match output {
        Some(OpOutput::Omap(found)) => {
            let mut out = vec![None; keys.len()];
            for (k, v) in found {
                if let Some(i) = keys.iter().position(|x| *x == k) {
                    out[i] = v;
                }
            }
            Ok(out)
        }
        other => Err(GatewayError::Internal(format!("omap get answered {other:?}"))),
    }
}

/// Omap entries (key, value) in key order.
pub(crate) type OmapEntries = Vec<(Vec<u8>, Vec<u8>)>;

/// The entries of an `OmapList` output.
pub(crate) fn omap_entries(output: Option<OpOutput>) -> Result<OmapEntries, GatewayError> {
    match output {
        Some(OpOutput::OmapList(entries)) => Ok(entries),
        other => Err(GatewayError::Internal(format!("omap list answered {other:?}"))),
    }
}

/// Up to `max` omap entries of `object` after `after` (exclusive), in key order; a missing
/// object has none.
pub async fn omap_list(
    client: &Client,
    pool: &str,
    object: &str,
    after: Option<Vec<u8>>,
    max: u32,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>, GatewayError> {
    match client.op(pool, object, vec![ObjOp::OmapList { after, max }], Vec::new()).await {
        Ok(r) => omap_entries(r.outputs.into_iter().next()),
        Err(e) if e.is_not_found() => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

/// Every omap entry of `object` whose key starts with `prefix`, up to `limit` of them (the
/// caller bounds what it holds).
pub async fn omap_prefix(
    client: &Client,
    pool: &str,
    object: &str,
    prefix: &[u8],
    limit: usize,
) -> Result<OmapEntries, GatewayError> {
    collect_prefix(prefix, limit, |after, max| omap_list(client, pool, object, Some(after), max)).await
}

/// The entries whose key starts with `prefix`, up to `limit`, read page by page through `list`
/// (entries after a key, at most a page of them, in key order).
pub async fn collect_prefix<F, Fut>(prefix: &[u8], limit: usize, mut list: F) -> Result<OmapEntries, GatewayError>
where
    F: FnMut(Vec<u8>, u32) -> Fut,
    Fut: std::future::Future<Output = Result<OmapEntries, GatewayError>>,
{
    const PAGE: u32 = 1000;
    let mut out = Vec::new();
    // Keys after the bare prefix are the prefix's entries and then everything above them.
    let mut after = prefix.to_vec();
    while out.len() < limit {
        let page = list(after.clone(), PAGE).await?;
        let full = page.len() == PAGE as usize;
        for (k, v) in page {
            if !k.starts_with(prefix) || out.len() >= limit {
                return Ok(out);
            }
            after.clone_from(&k);
            out.push((k, v));
        }
        if !full {
            break;
        }
    }
    Ok(out)
}
