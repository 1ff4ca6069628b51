//! The exclusive lock of a block image (`shoal_rbd::lock`) against a real cluster: a renewal whose
//! answer was lost but which was applied leaves a record this holder must still recognise as its
//! own (decision 0061), while a record another holder wrote is a takeover, and a release of a
//! lock no longer this holder's changes nothing; and a write under a fence carries the lock's
//! write deadline, so one past it is never applied.

use crate::common;

use common::{Down, ok, shoal};
use shoal_client::Client;
use shoal_rbd::lock;

/// A one-OSD RAM cluster in `tmp/c` with an 8 MiB image `data/img`, and an admin client.
fn cluster_with_image(tmp: &std::path::Path) -> (Down, tokio::runtime::Runtime, Client) {
    let dir = tmp.join("c");
    let d = dir.display().to_string();
    ok(&shoal(tmp, &["up", "--dir", &d, "--osds", "1", "--osd-size", "256M", "--no-gateway"]));
    let down = Down(dir.clone());
    ok(&shoal(&dir, &["rbd", "create", "data/img", "--size", "8M"]));
    let (rt, client) = common::admin_client(&dir);
    (down, rt, client)
}

#[test]
fn a_holder_recognises_its_own_record_after_a_lost_renewal_answer_and_nobody_elses() {
    let tmp = tempfile::tempdir().unwrap();
    let (_down, rt, client) = cluster_with_image(tmp.path());
    rt.block_on(async {
        let held = lock::acquire(&client, "data", "img", "me:1:aa", "test", 60_000).await.expect("acquire");
        // A renewal applied in the cluster whose answer never came back: the holder still has
        // `held`, the cluster the renewed record.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let applied = lock::renew(&client, "data", "img", &held).await.expect("renew").expect("still mine");
        assert!(applied.renewed_unix_ms > held.renewed_unix_ms);
        // Renewing from the stale record finds the holder's own record and renews it.
        let again = lock::renew(&client, "data", "img", &held).await.expect("renew again");
        let again = again.expect("the holder's own record was taken for a takeover");
        assert_eq!((again.holder.as_str(), again.acquired_unix_ms), ("me:1:aa", held.acquired_unix_ms));
        let (now, _) = lock::read(&client, "data", "img").await.expect("read").expect("locked");
        assert_eq!(now, again);

        // Another holder takes over (the lock broken, then acquired): a renewal from either of
        // this holder's records now finds the lock gone, and a release changes nothing.
        lock::break_lock(&client, "data", "img").await.expect("break").expect("a record");
        let other = lock::acquire(&client, "data", "img", "other:2:bb", "test", 60_000).await.expect("acquire");
        assert_eq!(lock::renew(&client, "data", "img", &again).await.expect("renew"), None);
        assert_eq!(lock::renew(&client, "data", "img", &held).await.expect("renew"), None);
        lock::release(&client, "data", "img", &again).await.expect("release");
        let (now, _) = lock::read(&client, "data", "img").await.expect("read").expect("still locked");
        assert_eq!(now, other);
        // Its own release, from a record a lost renewal answer left behind, does release it.
        let renewed = lock::renew(&client, "data", "img", &other).await.expect("renew").expect("mine");
        assert!(renewed.renewed_unix_ms >= other.renewed_unix_ms);
        lock::release(&client, "data", "img", &other).await.expect("release");
        assert!(lock::read(&client, "data", "img").await.expect("read").is_none(), "the lock was not released");
    });
}

#[test]
fn a_write_past_its_locks_write_deadline_is_never_applied() {
    let tmp = tempfile::tempdir().unwrap();
    let (_down, rt, client) = cluster_with_image(tmp.path());
    rt.block_on(async {
        let fence = std::sync::Arc::new(shoal_rbd::Fence::new());
        let image = shoal_rbd::Image::open(&client, "data", "img", false)
            .await
            .expect("open")
            .with_fence(fence.clone())
            .with_wait_ms(300);
        let lease = std::time::Duration::from_secs(10);
        // The last renewal started a whole lease ago: its deadline has passed, though the fence
        // is still open (the holder has not noticed yet). The write is never sent.
        fence.renewed(lease, lease);
        let data = bytes::Bytes::from(vec![0x5a; 4096]);
        let refused = image.write(4096, data.clone()).await.expect_err("a write past the deadline");
        assert!(matches!(refused, shoal_rbd::RbdError::Client(shoal_client::ClientError::Expired)), "{refused}");
        assert!(image.read(4096, 4096).await.expect("read").iter().all(|b| *b == 0), "the write was applied");
        // Renewed: the same write goes through.
        fence.renewed(std::time::Duration::ZERO, lease);
        image.write(4096, data.clone()).await.expect("a write within the deadline");
        assert_eq!(image.read(4096, 4096).await.expect("read"), data);
    });
}
