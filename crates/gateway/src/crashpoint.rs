//! Crash points for the crash tests: with `SHOAL_GATEWAY_CRASH=POINT:KEY` in its environment, a
//! gateway aborts (no cleanup, as SIGKILL would stop it) when a write of object key KEY (or a split
//! of bucket KEY's index) reaches POINT. Without the variable this costs one comparison per point.
//!
//! Jitter for the race tests: with `SHOAL_GATEWAY_JITTER_MS=N`, a write pauses for a random 0..N
//! ms between its steps (after its prepare, after its head), so that racing writes of one key
//! interleave their steps in every order instead of almost always finishing one at a time.
//!
//! Pauses for the tests of one interleaving: with `SHOAL_GATEWAY_PAUSE=POINT:KEY:MS`, a gateway
//! sleeps MS milliseconds each time a write of KEY reaches POINT, so that a test can run other
//! requests (through another gateway) inside that window, every time, not by chance.

use std::sync::OnceLock;

/// The environment variable naming the crash point.
pub const ENV: &str = "SHOAL_GATEWAY_CRASH";

/// The environment variable setting the most a write pauses between its steps, in ms.
pub const JITTER_ENV: &str = "SHOAL_GATEWAY_JITTER_MS";

/// The environment variable naming a pause point, its key and its length.
pub const PAUSE_ENV: &str = "SHOAL_GATEWAY_PAUSE";

/// The most a pause point may sleep: a test's window, never a hang.
const MAX_PAUSE_MS: u64 = 30_000;

/// In an index completion, once it knows the key's entry and head (read, or observed by the
/// writer), before its first guarded swap.
pub const COMPLETE_SWAP: &str = "complete-swap";

/// The most jitter a test may ask for: a pause longer than this would be a stall, not a race.
const MAX_JITTER_MS: u64 = 1000;

/// After the tails are written, before the head (the commit); also a pause point, standing in
/// for a head request the cluster holds back.
pub const AFTER_TAILS: &str = "after-tails";
/// After the head is written, before the index completion.
pub const AFTER_HEAD: &str = "after-head";

/// Index partition splits (KEY: the bucket's name): after the first copy, after the fence,
/// after the commit (before the publication).
pub const SPLIT_COPIED: &str = "split-copied";
pub const SPLIT_FENCED: &str = "split-fenced";
pub const SPLIT_COMMITTED: &str = "split-committed";

/// Index partition merges (KEY: the bucket's name): after the first copy, after the fence,
/// after the commit (before the publication).
pub const MERGE_COPIED: &str = "merge-copied";
pub const MERGE_FENCED: &str = "merge-fenced";
pub const MERGE_COMMITTED: &str = "merge-committed";

/// A bucket deletion (KEY: the bucket's name), after its first partition is made dead and
/// before the others are.
pub const DELETE_PARTLY: &str = "delete-partly";

/// Aborts the process if the configured crash point is `point` for `key`.
pub fn reached(point: &str, key: &str) {
    static SPEC: OnceLock<Option<(String, String)>> = OnceLock::new();
    let spec = SPEC.get_or_init(|| {
        let v = std::env::var(ENV).ok()?;
        let (p, k) = v.split_once(':')?;
        Some((p.to_string(), k.to_string()))
    });
    if let Some((p, k)) = spec
        && p == point
        && k == key
    {
        eprintln!("{ENV}: crashing at {point} of {key:?}");
        std::process::abort();
    }
}

/// Sleeps for the configured time if the configured pause point is `point` for `key`.
pub async fn pause(point: &str, key: &str) {
    static SPEC: OnceLock<Option<(String, String, u64)>> = OnceLock::new();
    let spec = SPEC.get_or_init(|| {
        let v = std::env::var(PAUSE_ENV).ok()?;
        let (p, rest) = v.split_once(':')?;
        // The key may hold colons; the length is after the last one.
        let (k, ms) = rest.rsplit_once(':')?;
        Some((p.to_string(), k.to_string(), ms.parse::<u64>().ok()?.min(MAX_PAUSE_MS)))
    });
    if let Some((p, k, ms)) = spec
        && p == point
        && k == key
    {
        tracing::info!(point, key, ms, "pausing at a test's pause point");
        tokio::time::sleep(std::time::Duration::from_millis(*ms)).await;
    }
}

/// Pauses for a random time up to the configured jitter (none without [`JITTER_ENV`]).
pub async fn jitter() {
    static MAX_MS: OnceLock<u64> = OnceLock::new();
    let max_ms = *MAX_MS.get_or_init(|| {
        std::env::var(JITTER_ENV).ok().and_then(|v| v.parse::<u64>().ok()).map_or(0, |ms| ms.min(MAX_JITTER_MS))
    });
    if max_ms == 0 {
        return;
    }
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_err() {
        return;
    }
    let ms = u64::from_le_bytes(b) % (max_ms + 1);
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
}
