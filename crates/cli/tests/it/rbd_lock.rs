//! The exclusive lock of a block image (`shoal_rbd::lock`) against a real cluster: a renewal whose
//! answer was lost but which was applied leaves a record this holder must still recognise as its
//! own (decision 0061), while a record another holder wrote is a takeover, and a release of a
//! lock no longer this holder's changes nothing; a write under a fence carries the lock's
//! write deadline, so one past it is never applied; and a holder whose lock is broken or taken
//! over is fenced off the cluster at once, whatever its own clock and lease say (decision 0092).

use crate::common;

use common::{Down, fails_with, json, ok, shoal};
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

/// Opens `data/img` for writing under a fence that believes its lock good for another 30 s: a
/// holder that has not noticed it lost the lock (a paused process, a slow clock).
async fn writer(client: &Client) -> shoal_rbd::Image {
    let fence = std::sync::Arc::new(shoal_rbd::Fence::new());
    fence.renewed(std::time::Duration::ZERO, std::time::Duration::from_secs(60));
    shoal_rbd::Image::open(client, "data", "img", false).await.expect("open").with_fence(fence).with_wait_ms(300)
}

fn block(byte: u8) -> bytes::Bytes {
    bytes::Bytes::from(vec![byte; 4096])
}

#[test]
fn a_broken_lock_fences_its_holder_off_at_once_and_the_next_holder_writes_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (_down, rt, old) = cluster_with_image(tmp.path());
    let dir = tmp.path().join("c");
    let (_rt2, new) = common::admin_client(&dir);
    rt.block_on(async {
        let held = lock::acquire(&old, "data", "img", "old:1:aa", "test", 60_000).await.expect("acquire");
        assert_eq!(held.client, old.instance_id());
        let image = writer(&old).await;
        image.write(0, block(0x11)).await.expect("the holder writes");
        let locks = json(&ok(&shoal(&dir, &["rbd", "lock", "ls", "data/img", "--json"])));
        assert_eq!(locks["locks"][0]["client"], format!("{:016x}", old.instance_id()), "{locks}");

        // The operator breaks the lock. The holder's lease and write deadline say it may still
        // write for half a minute, and it has not renewed: its writes are refused at once all
        // the same, by the cluster, and nothing of them is applied.
        let broke = json(&ok(&shoal(&dir, &["rbd", "lock", "break", "data/img", "--json"])));
        assert_eq!(broke["fenced"]["client"], format!("{:016x}", old.instance_id()), "{broke}");
        let refused = image.write(0, block(0x22)).await.expect_err("a fenced holder's write");
        assert!(refused.is_blocklisted(), "{refused}");
        assert_eq!(refused.errno(), 1, "reported as EPERM, like a lost lock");
        let renewal = lock::renew(&old, "data", "img", &held).await.expect_err("a fenced holder's renewal");
        assert!(renewal.is_blocklisted(), "{renewal}");

        // The next holder takes the free lock and writes; what it reads is what it wrote.
        lock::acquire(&new, "data", "img", "new:2:bb", "test", 60_000).await.expect("acquire after the break");
        let image = writer(&new).await;
        assert_eq!(image.read(0, 4096).await.expect("read"), block(0x11), "a fenced write was applied");
        image.write(0, block(0x33)).await.expect("the new holder writes");
        assert_eq!(image.read(0, 4096).await.expect("read"), block(0x33));
    });
    // The fence is listed, with its client instance, until it lapses or is removed.
    let listed = json(&ok(&shoal(&dir, &["osd", "blocklist", "ls", "--json"])));
    let entry = &listed["blocklist"][0];
    assert_eq!(entry["client"], format!("{:016x}", old.instance_id()), "{listed}");
    assert!(entry["expires_in_s"].as_u64().is_some_and(|s| s > 3000), "{listed}");
    fails_with(&shoal(&dir, &["osd", "blocklist", "rm", "not-hex"]), "hex digits");
    fails_with(&shoal(&dir, &["osd", "blocklist", "rm", "00000000000000ab"]), "is not blocklisted");
    let removed =
        json(&ok(&shoal(&dir, &["osd", "blocklist", "rm", &format!("{:016x}", old.instance_id()), "--json"])));
    let listed = json(&ok(&shoal(&dir, &["osd", "blocklist", "ls", "--json"])));
    assert_eq!(listed["blocklist"], serde_json::json!([]), "{listed}");
    // Let back in, the old client is served again (reads; the lock is another's).
    rt.block_on(async {
        let epoch = removed["epoch"].as_u64().expect("the removal's epoch");
        old.mon().wait_for_epoch(epoch, 10_000).await.expect("the old client's map catches up");
        let image = shoal_rbd::Image::open(&old, "data", "img", true).await.expect("open read-only");
        assert_eq!(image.read(0, 4096).await.expect("read"), block(0x33));
    });
}

#[test]
fn a_takeover_of_a_stale_lock_fences_its_holder_off_before_the_new_holder_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let (_down, rt, old) = cluster_with_image(tmp.path());
    let (_rt2, new) = common::admin_client(&tmp.path().join("c"));
    rt.block_on(async {
        // A lease of 300 ms that the holder never renews: stale by the next holder's clock, while
        // the holder itself (paused, or its clock behind) still thinks it may write.
        lock::acquire(&old, "data", "img", "old:1:aa", "test", 300).await.expect("acquire");
        let image = writer(&old).await;
        image.write(0, block(0x11)).await.expect("the holder writes");
        let live = lock::acquire(&new, "data", "img", "new:2:bb", "test", 60_000).await.expect_err("live");
        assert!(matches!(live, shoal_rbd::RbdError::Locked { .. }), "{live}");
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        let taken = lock::acquire(&new, "data", "img", "new:2:bb", "test", 60_000).await.expect("take over");
        assert_eq!(taken.client, new.instance_id());
        // The new holder's map already has the fence (acquire reached it), so the old holder is
        // refused from here on, and only the new holder's write lands.
        assert!(new.mon().map().is_blocklisted(old.instance_id()));
        let refused = image.write(0, block(0x22)).await.expect_err("the old holder's write");
        assert!(refused.is_blocklisted(), "{refused}");
        let image = writer(&new).await;
        image.write(4096, block(0x33)).await.expect("the new holder writes");
        assert_eq!(image.read(0, 8192).await.expect("read"), [block(0x11), block(0x33)].concat());
    });
}
