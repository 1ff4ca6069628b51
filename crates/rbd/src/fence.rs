//! Whether a writable image handle may write, as the holder of the image's exclusive lock
//! ([`crate::lock`]) decides.
//!
//! Three states. **Open**: the lock is held and renewed; writes go ahead. **Suspended**: the lock
//! could not be renewed for a whole lease, because the cluster could not serve the image's header
//! (a PG below `min_size`, OSDs restarting): another writer may take the lock over once the lease
//! has lapsed, so this handle must not write — but nobody may have, and a renewal that finds its
//! own record unchanged proves it. Writes therefore wait, rather than fail: a file system on the
//! device must not go read-only because of a failover (the ceph-csi rbd-nbd complaint). **Closed**:
//! the lock was taken over or broken, or the server is stopping; writes fail at once, for good.
//!
//! Only Open → Suspended → Open and any state → Closed happen; Closed is final.
//!
//! An open fence also carries a **write deadline**: half a lease after the last renewal started
//! (another server takes the lock over a whole lease after that time, by its own clock; the other
//! half is the margin for the two servers' clocks). Every write is sent with it as its expiry
//! (decision 0032), so a write the cluster holds (a PG peering) can take effect only before it,
//! never after another server took over (decision 0061). The holder suspends the fence when the
//! deadline passes without a renewal.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

const OPEN: u8 = 0;
const SUSPENDED: u8 = 1;
const CLOSED: u8 = 2;

/// Why a write was not let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The lock is lost for good.
    Closed,
    /// The lock stayed unrenewed for the whole wait.
    StillSuspended { waited_ms: u64 },
}

/// A writable handle's fence, shared by the handle and the task that renews its lock.
#[derive(Debug, Default)]
pub struct Fence {
    state: AtomicU8,
    changed: Notify,
    /// The write deadline (`None`: writes carry none, as for a handle whose lock nobody renews).
    deadline: std::sync::Mutex<Option<Instant>>,
}

impl Fence {
    /// An open fence (the lock was just taken) whose writes carry no deadline until
    /// [`Fence::renewed`] sets one.
    #[must_use]
    pub fn new() -> Fence {
        Fence::default()
    }

    /// The lock was renewed (or taken) with a record `age` old when it landed (how long ago the
    /// renewal that wrote it started) and a lease of `lease`: writes may take effect until half a
    /// lease after the record's time.
    pub fn renewed(&self, age: Duration, lease: Duration) {
        let deadline = Instant::now() + (lease / 2).saturating_sub(age);
        if let Ok(mut d) = self.deadline.lock() {
            *d = Some(deadline);
        }
    }

    /// [`Fence::renewed`] by the lock record `rec` that just landed (its age by this host's
    /// clock, which wrote it).
    pub fn renewed_by(&self, rec: &crate::lock::LockRecord) {
        let age_ms = crate::lock::now_unix_ms().saturating_sub(rec.renewed_unix_ms);
        self.renewed(Duration::from_millis(age_ms), Duration::from_millis(rec.lease_ms));
    }

    /// Whether the write deadline is still ahead (a holder that sets none never has one).
    pub fn before_deadline(&self) -> bool {
        self.deadline().is_some_and(|d| d > Instant::now())
    }

    /// The write deadline, if the holder sets one.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline.lock().ok().and_then(|d| *d)
    }

    /// Whether the lock is held and renewed: only then may the handle keep what it read ahead
    /// (nobody else can change the image).
    pub fn is_open(&self) -> bool {
        self.state.load(Ordering::Acquire) == OPEN
    }

    pub fn is_closed(&self) -> bool {
        self.state.load(Ordering::Acquire) == CLOSED
    }

    /// The lock went unrenewed for a whole lease: writes wait from now on. Returns whether this
    /// changed the state (it was open).
    pub fn suspend(&self) -> bool {
        self.state.compare_exchange(OPEN, SUSPENDED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// The lock was renewed: waiting writes go ahead. A closed fence stays closed. Returns whether
    /// this changed the state (it was suspended).
    pub fn reopen(&self) -> bool {
        let changed = self.state.compare_exchange(SUSPENDED, OPEN, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if changed {
            self.changed.notify_waiters();
        }
        changed
    }

    /// The lock is lost (or being released): writes fail from now on, waiting ones too.
    pub fn close(&self) {
        self.state.store(CLOSED, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// Lets a write through once the fence is open: at once if it is, after waiting at most
    /// `wait` while it is suspended; refused if it is or becomes closed.
    pub async fn writable(&self, wait: Duration) -> Result<(), Refused> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before the state is read, so that a change between the two still wakes
            // this waiter.
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.state.load(Ordering::Acquire) {
                OPEN => return Ok(()),
                CLOSED => return Err(Refused::Closed),
                _ => {}
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(Refused::StillSuspended { waited_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn writes_wait_while_suspended_and_go_once_reopened_or_fail_once_closed() {
        let fence = std::sync::Arc::new(Fence::new());
        assert_eq!(fence.writable(Duration::ZERO).await, Ok(()));
        assert!(fence.suspend());
        assert!(!fence.suspend(), "already suspended");
        assert!(!fence.is_open());
        // A suspended fence holds the write for the whole wait, then refuses it.
        assert_eq!(fence.writable(Duration::from_millis(50)).await, Err(Refused::StillSuspended { waited_ms: 50 }));
        // Reopened while a write waits: it goes.
        let waiting = tokio::spawn({
            let fence = fence.clone();
            async move { fence.writable(Duration::from_secs(60)).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(fence.reopen());
        assert_eq!(waiting.await.unwrap(), Ok(()));
        assert!(fence.is_open());
        // Closed while a write waits: it fails, and the fence never opens again.
        assert!(fence.suspend());
        let waiting = tokio::spawn({
            let fence = fence.clone();
            async move { fence.writable(Duration::from_secs(60)).await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        fence.close();
        assert_eq!(waiting.await.unwrap(), Err(Refused::Closed));
        assert!(!fence.reopen() && !fence.suspend());
        assert!(fence.is_closed());
        assert_eq!(fence.writable(Duration::from_secs(1)).await, Err(Refused::Closed));
    }

    #[test]
    fn the_write_deadline_is_half_a_lease_after_the_renewal_started() {
        let fence = Fence::new();
        assert_eq!(fence.deadline(), None, "no deadline until the lock is renewed");
        let before = Instant::now();
        fence.renewed(Duration::from_secs(1), Duration::from_secs(10));
        let deadline = fence.deadline().expect("a deadline");
        assert!(deadline >= before + Duration::from_secs(4) && deadline <= Instant::now() + Duration::from_secs(4));
        // A renewal that took longer than half a lease gives a deadline already passed.
        fence.renewed(Duration::from_secs(6), Duration::from_secs(10));
        assert!(fence.deadline().expect("a deadline") <= Instant::now());
    }
}
