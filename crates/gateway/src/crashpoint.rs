//! Crash points for the crash tests: with `SHOAL_GATEWAY_CRASH=POINT:KEY` in its environment, a
//! gateway aborts (no cleanup, as SIGKILL would stop it) when a write of object key KEY (or a split
//! of bucket KEY's index) reaches POINT. Without the variable this costs one comparison per point.

use std::sync::OnceLock;

/// The environment variable naming the crash point.
pub const ENV: &str = "SHOAL_GATEWAY_CRASH";

/// After the tails are written, before the head (the commit).
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
