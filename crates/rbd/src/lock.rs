//! One writer at a time: an exclusive lock per image, kept in the image's header as xattr
//! `lock` ([`LockRecord`]: the holder's identity and when it last renewed).
//!
//! The holder renews it every third of its lease; a lock not renewed for a whole lease is
//! stale, and the next writer takes it over (so a server killed with SIGKILL is replaced once its
//! lease runs out). Every change is a compare-and-swap on the xattr, so two would-be holders
//! cannot both win, and a holder whose renewal finds another record has lost the lock and must
//! stop writing at once ([`Image::with_fence`](crate::Image::with_fence)).
//!
//! A holder that has not noticed yet (it has not renewed since, its process was paused, its
//! clock runs slow) must not write either. So whoever breaks or takes over a lock first fences
//! the holder's client instance off the cluster (the map's blocklist, decision 0092) and records
//! the epoch that did it in xattr `lock_fence`; a new holder's client reaches that epoch before
//! [`acquire`] returns, so its requests carry it and every primary serves them only with the
//! fence in place: none of the old holder's requests is applied after any of the new one's.
//!
//! Durability: when [`acquire`], [`renew`], [`release`] or [`break_lock`] returns, the change is on
//! every replica, and so is the fence in the monitors' map.

use serde::{Deserialize, Serialize};
use shoal_client::Client;
use shoal_map::Command;
use shoal_proto::osd::{ObjOp, OpOutput};

use crate::error::RbdError;
use crate::header::{self, header_object};

const LOCK_XATTR: &str = "lock";
/// The epoch of the map that fenced off the last holder a break or takeover replaced (a decimal
/// number); a new holder reaches it before writing.
const FENCE_XATTR: &str = "lock_fence";
/// How long a fenced holder stays on the blocklist: far longer than any lease, so that a holder
/// paused for minutes still finds itself fenced when it resumes.
pub const FENCE_EXPIRE_MS: u64 = 3_600_000;

/// Who holds an image's lock, since when, and for how long without renewal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRecord {
    /// `HOST:PID:RANDOM`, unique per server process.
    pub holder: String,
    /// What holds it, for people (`nbd serve 127.0.0.1:10809`).
    pub description: String,
    pub acquired_unix_ms: u64,
    pub renewed_unix_ms: u64,
    pub lease_ms: u64,
    /// The holder's client instance ([`Client::instance_id`]), which a break or takeover fences
    /// off; 0 in records written before fencing existed (such a holder is not fenced).
    #[serde(default)]
    pub client: u64,
}

impl LockRecord {
    /// Whether the holder has missed its renewal for a whole lease.
    pub fn is_stale(&self, now_unix_ms: u64) -> bool {
        now_unix_ms.saturating_sub(self.renewed_unix_ms) > self.lease_ms
    }
}

pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// A holder identity for this process.
pub fn holder_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
    let mut b = [0u8; 4];
    let _ = getrandom::fill(&mut b);
    format!("{host}:{}:{:08x}", std::process::id(), u32::from_le_bytes(b))
}

fn encode(r: &LockRecord) -> Vec<u8> {
    serde_json::to_vec(r).unwrap_or_default()
}

/// The lock record of image `name` and its raw bytes (for a compare-and-swap), if locked.
pub async fn read(client: &Client, pool: &str, name: &str) -> Result<Option<(LockRecord, Vec<u8>)>, RbdError> {
    Ok(read_with_fence(client, pool, name).await?.0)
}

/// The lock record as [`read`] gives it, and the epoch of the last fence (0: none).
async fn read_with_fence(
    client: &Client,
    pool: &str,
    name: &str,
) -> Result<(Option<(LockRecord, Vec<u8>)>, u64), RbdError> {
    let id = header::lookup(client, pool, name).await?;
    let ops = vec![ObjOp::GetXattr { name: LOCK_XATTR.into() }, ObjOp::GetXattr { name: FENCE_XATTR.into() }];
    let r = client.op(pool, &header_object(&id), ops, Vec::new()).await?;
    let corrupt = |reason: String| RbdError::Corrupt { name: name.to_string(), reason };
    let mut outputs = r.outputs.into_iter();
    let record = match outputs.next() {
        Some(OpOutput::Xattr(Some(bytes))) => {
            let rec = serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("lock record: {e}")))?;
            Some((rec, bytes))
        }
        _ => None,
    };
    let fence_epoch = match outputs.next() {
        Some(OpOutput::Xattr(Some(bytes))) => {
            std::str::from_utf8(&bytes).ok().and_then(|t| t.parse::<u64>().ok()).ok_or_else(|| {
                corrupt(format!("lock fence epoch {:?} is not a number", String::from_utf8_lossy(&bytes)))
            })?
        }
        _ => 0,
    };
    Ok((record, fence_epoch))
}

/// Fences the holder of `rec` off the cluster (decision 0092) and returns the epoch that did
/// it; 0 when there is nothing to fence: a record from before fencing existed, or one of this
/// very client instance (a server that takes its own lock again).
async fn fence_off(client: &Client, name: &str, rec: &LockRecord) -> Result<u64, RbdError> {
    if rec.client == 0 || rec.client == client.instance_id() {
        return Ok(0);
    }
    let now = now_unix_ms();
    let command =
        Command::Blocklist { client: rec.client, until_unix_ms: now.saturating_add(FENCE_EXPIRE_MS), now_unix_ms: now };
    let epoch = client.mon().command(command).await?;
    tracing::warn!(
        image = name,
        holder = rec.holder,
        client = format_args!("{:016x}", rec.client),
        epoch,
        "fenced off the image lock's holder"
    );
    Ok(epoch)
}

/// Waits until this client's map has reached `epoch` (a fence), so that every request it sends
/// from now on carries it.
async fn reach(client: &Client, epoch: u64) -> Result<(), RbdError> {
    if epoch > 0 {
        let timeout_ms = client.mon().config().op_timeout_ms;
        client.mon().wait_for_epoch(epoch, timeout_ms).await?;
    }
    Ok(())
}

/// Replaces the lock record `old` (its bytes) with `new`, compare-and-swap, and records
/// `fence_epoch` if given; `false` if the record was no longer `old` (nothing changed). Marked as made to free space (decision 0045), so a full cluster takes it: a
/// lease that could not be renewed while the cluster is full would fence its writer for good, and
/// a fenced writer cannot even take the discards that give the space back.
async fn swap(
    client: &Client,
    pool: &str,
    name: &str,
    old: Option<Vec<u8>>,
    new: Option<&LockRecord>,
    fence_epoch: Option<u64>,
) -> Result<bool, RbdError> {
    shoal_client::freeing_space(async {
        let id = header::lookup(client, pool, name).await?;
        let mut ops = vec![ObjOp::AssertXattr { name: LOCK_XATTR.into(), value: old }];
        ops.push(match new {
            Some(r) => ObjOp::SetXattr { name: LOCK_XATTR.into(), value: encode(r) },
            None => ObjOp::RemoveXattr { name: LOCK_XATTR.into() },
        });
        if let Some(epoch) = fence_epoch {
            ops.push(ObjOp::SetXattr { name: FENCE_XATTR.into(), value: epoch.to_string().into_bytes() });
        }
        match client.op(pool, &header_object(&id), ops, Vec::new()).await {
            Ok(_) => Ok(true),
            Err(e) if header::is_conflict(&e) => Ok(false),
            Err(e) => Err(e.into()),
        }
    })
    .await
}

/// Takes image `name`'s lock for `holder`, taking over a stale one. Fails with
/// [`RbdError::Locked`] naming the live holder. A stale holder is fenced off first, and this
/// client reaches the last fence's epoch before it returns (see the module's documentation).
pub async fn acquire(
    client: &Client,
    pool: &str,
    name: &str,
    holder: &str,
    description: &str,
    lease_ms: u64,
) -> Result<LockRecord, RbdError> {
    // A few rounds: each lost compare-and-swap means someone else changed the lock meanwhile.
    for _ in 0..8 {
        let now = now_unix_ms();
        let (current, fenced_at) = read_with_fence(client, pool, name).await?;
        let mut fence = None;
        if let Some((rec, _)) = &current
            && rec.holder != holder
        {
            if !rec.is_stale(now) {
                return Err(RbdError::Locked {
                    name: name.to_string(),
                    holder: rec.description.clone(),
                    id: rec.holder.clone(),
                });
            }
            tracing::warn!(image = name, holder = rec.holder, "taking over a stale image lock");
            fence = Some(fence_off(client, name, rec).await?).filter(|e| *e > fenced_at);
        }
        let mine = LockRecord {
            holder: holder.to_string(),
            description: description.to_string(),
            acquired_unix_ms: now,
            renewed_unix_ms: now,
            lease_ms,
            client: client.instance_id(),
        };
        if swap(client, pool, name, current.map(|(_, b)| b), Some(&mine), fence).await? {
            reach(client, fence.unwrap_or(fenced_at)).await?;
            return Ok(mine);
        }
    }
    Err(RbdError::Conflict(name.to_string()))
}

/// Renews `held`; returns the new record, or `None` if the lock is no longer this holder's (it
/// was broken or taken over): the caller must stop writing. See [`replace_own`] for a record
/// an earlier renewal changed.
pub async fn renew(client: &Client, pool: &str, name: &str, held: &LockRecord) -> Result<Option<LockRecord>, RbdError> {
    let next = LockRecord { renewed_unix_ms: now_unix_ms(), ..held.clone() };
    Ok(replace_own(client, pool, name, held, Some(&next)).await?.then_some(next))
}

/// Releases `held` (nothing happens if it is no longer this holder's).
pub async fn release(client: &Client, pool: &str, name: &str, held: &LockRecord) -> Result<(), RbdError> {
    replace_own(client, pool, name, held, None).await.map(|_| ())
}

/// Replaces this holder's record with `new` (compare-and-swap); `false` if the lock is no longer
/// this holder's. A record that is not `held` but names this holder and the same acquisition is
/// still this holder's: an earlier renewal whose answer was lost (a client timeout while the
/// cluster could not answer) was applied after all. It is replaced in turn rather than taken for
/// a takeover (holder ids are unique per process, so nobody else writes such a record).
async fn replace_own(
    client: &Client,
    pool: &str,
    name: &str,
    held: &LockRecord,
    new: Option<&LockRecord>,
) -> Result<bool, RbdError> {
    if swap(client, pool, name, Some(encode(held)), new, None).await? {
        return Ok(true);
    }
    match read(client, pool, name).await? {
        Some((current, bytes))
            if current.holder == held.holder && current.acquired_unix_ms == held.acquired_unix_ms =>
        {
            swap(client, pool, name, Some(bytes), new, None).await
        }
        _ => Ok(false),
    }
}

/// Removes image `name`'s lock whoever holds it (`shoal rbd lock break`), fencing its holder off
/// the cluster first; returns the record it removed and the epoch of the fence (0 if the holder
/// could not be fenced: a record from before fencing existed).
pub async fn break_lock(client: &Client, pool: &str, name: &str) -> Result<Option<(LockRecord, u64)>, RbdError> {
    let (Some((rec, bytes)), fenced_at) = read_with_fence(client, pool, name).await? else { return Ok(None) };
    let epoch = fence_off(client, name, &rec).await?;
    // The header's primary then has the fence when it removes the record (the request carries
    // the epoch), and so does every primary by the time a new holder's requests reach it.
    reach(client, epoch).await?;
    if swap(client, pool, name, Some(bytes), None, Some(epoch).filter(|e| *e > fenced_at)).await? {
        Ok(Some((rec, epoch)))
    } else {
        Err(RbdError::Conflict(name.to_string()))
    }
}

/// Refuses an offline operation (rollback, a write benchmark) while a live holder has the lock.
pub async fn check_unlocked(client: &Client, pool: &str, name: &str) -> Result<(), RbdError> {
    if let Some((rec, _)) = read(client, pool, name).await?
        && !rec.is_stale(now_unix_ms())
    {
        return Err(RbdError::Locked { name: name.to_string(), holder: rec.description, id: rec.holder });
    }
    Ok(())
}
