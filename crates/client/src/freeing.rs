//! Requests made to free space (decision 0045): a delete's bookkeeping, a discard, garbage
//! collection. A full cluster refuses writes, but the few small writes that go with a removal (an
//! index record, a garbage collection entry, a lease) must still be taken, or a user of the S3
//! gateway or a block image could never delete their way out of a full cluster.
//!
//! The marking is a scope, not a parameter: every request a future sends while it runs inside
//! [`freeing_space`] carries [`shoal_proto::osd::OsdOp::frees_space`], however deep in the
//! gateway's or the image's helpers it is made. A task spawned from inside the scope is outside
//! it (tokio's task-locals do not follow `spawn`); the client's own tasks that send on a caller's
//! behalf ([`crate::Client::op_combined`]'s rounds) carry the mark over themselves.

use std::future::Future;

tokio::task_local! {
    static FREEING_SPACE: bool;
}

/// Runs `f` with every cluster request it sends marked as part of freeing space.
pub async fn freeing_space<F: Future>(f: F) -> F::Output {
    FREEING_SPACE.scope(true, f).await
}

/// Runs `f` marked as [`freeing_space`] if `marked`, else as it is.
pub(crate) async fn scoped<F: Future>(marked: bool, f: F) -> F::Output {
    FREEING_SPACE.scope(marked, f).await
}

/// Whether the running task is inside [`freeing_space`].
#[must_use]
pub fn is_freeing_space() -> bool {
    FREEING_SPACE.try_with(|m| *m).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_mark_holds_inside_the_scope_only() {
        assert!(!is_freeing_space());
        assert!(freeing_space(async { is_freeing_space() }).await);
        assert!(!scoped(false, async { is_freeing_space() }).await);
        // A nested unmarked scope wins inside it, and the outer mark holds again after it.
        let (inner, outer) =
            freeing_space(async { (scoped(false, async { is_freeing_space() }).await, is_freeing_space()) }).await;
        assert!(!inner && outer);
        // Spawned tasks are outside the scope: the client's own tasks must carry the mark over.
        let spawned = freeing_space(async { tokio::spawn(async { is_freeing_space() }).await.expect("join") }).await;
        assert!(!spawned);
        assert!(!is_freeing_space());
    }
}
