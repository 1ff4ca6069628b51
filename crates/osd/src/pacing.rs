//! Pacing of recovery against client I/O, in time: how long the worker leaves background work
//! (recovery and backfill pushes, pulls and the answers to them) waiting while clients are busy.
//!
//! The lanes (`lanes.rs`) put client I/O first *within* what is queued, but a worker busy with a
//! 4 MiB push cannot be interrupted: a client write that arrives meanwhile waits for it. When
//! recovery runs flat out the worker is nearly always busy with one, and every client operation
//! pays for it (measured after `osd out` with 2 GiB of 4 MiB objects and 100,000 of 4 KiB on four
//! disk-backed OSDs: a one-at-a-time 4 KiB writer fell from ~450 to ~70 writes a second, its p99
//! from 5 to 94 ms, for the whole 23 s of the recovery). So while clients are active, background
//! work may take at most a share of the worker's time (`osd_recovery_busy_share_pct`): after each
//! batch with background work that took `d`, the next background event waits `d × (100 − share) /
//! share`. With no client I/O in the last [`CLIENT_ACTIVE_WINDOW`], recovery runs unpaced.
//!
//! Pacing only ever delays background events, never reorders anything: the lanes still hand out
//! a background event a client operation waits for, and any background event with a barrier
//! (a map, a tick, peering) queued behind it, at once.

use std::time::{Duration, Instant};

/// Clients count as active for this long after their last operation on this OSD.
pub const CLIENT_ACTIVE_WINDOW: Duration = Duration::from_millis(500);
/// The longest single wait pacing imposes (a pathologically slow batch does not stop recovery
/// for long; the share is then not kept, and recovery goes on).
pub const MAX_PACE: Duration = Duration::from_millis(200);

/// When background work may go next.
#[derive(Debug, Default)]
pub struct Pacer {
    last_client: Option<Instant>,
    background_not_before: Option<Instant>,
}

impl Pacer {
    /// Whether background work may go at `now`.
    #[must_use]
    pub fn background_ok(&self, now: Instant) -> bool {
        self.background_not_before.is_none_or(|t| now >= t)
    }

    /// How long from `now` until background work may go (zero if it may now).
    #[must_use]
    pub fn wait(&self, now: Instant) -> Duration {
        self.background_not_before.map_or(Duration::ZERO, |t| t.saturating_duration_since(now))
    }

    /// Records a batch that ended at `now` after `took`: whether it held client work
    /// (foreground) and background work, and the share background work may take while clients
    /// are active, in percent (100: no limit).
    pub fn record(&mut self, now: Instant, took: Duration, client: bool, background: bool, share_pct: u64) {
        assert!((1..=100).contains(&share_pct), "recovery share {share_pct}% outside 1..=100");
        if client {
            self.last_client = Some(now);
        }
        let clients_active = self.last_client.is_some_and(|t| now.saturating_duration_since(t) < CLIENT_ACTIVE_WINDOW);
        if !background || !clients_active || share_pct >= 100 {
            return;
        }
        let idle = took.saturating_mul(u32::try_from(100 - share_pct).unwrap_or(u32::MAX))
            / u32::try_from(share_pct).unwrap_or(1);
        self.background_not_before = Some(now + idle.min(MAX_PACE));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn background_work_waits_its_share_only_while_clients_are_active() {
        let t0 = Instant::now();
        let mut p = Pacer::default();
        // No client yet: a 10 ms push does not hold the next one back.
        p.record(t0 + 10 * MS, 10 * MS, false, true, 10);
        assert!(p.background_ok(t0 + 10 * MS));
        // A client write, then a 10 ms push: at a 10% share the next waits 90 ms.
        p.record(t0 + 11 * MS, MS, true, false, 10);
        p.record(t0 + 21 * MS, 10 * MS, false, true, 10);
        assert!(!p.background_ok(t0 + 110 * MS));
        assert_eq!(p.wait(t0 + 101 * MS), 10 * MS);
        assert!(p.background_ok(t0 + 111 * MS));
        assert_eq!(p.wait(t0 + 111 * MS), Duration::ZERO);
        // At 50% the wait equals the work; at 100% there is none.
        p.record(t0 + 130 * MS, 10 * MS, true, true, 50);
        assert_eq!(p.wait(t0 + 130 * MS), 10 * MS);
        p.record(t0 + 150 * MS, 10 * MS, true, true, 100);
        assert_eq!(p.wait(t0 + 150 * MS), Duration::ZERO);
        // Clients gone for longer than the window: unpaced again.
        let later = t0 + 150 * MS + CLIENT_ACTIVE_WINDOW;
        p.record(later, 10 * MS, false, true, 10);
        assert!(p.background_ok(later));
    }

    #[test]
    fn a_slow_batch_does_not_stop_recovery_for_long() {
        let t0 = Instant::now();
        let mut p = Pacer::default();
        p.record(t0 + 1000 * MS, 1000 * MS, true, true, 1);
        assert_eq!(p.wait(t0 + 1000 * MS), MAX_PACE);
    }
}
