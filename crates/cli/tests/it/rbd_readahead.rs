//! Read-ahead of a sequential reader (`shoal_rbd::readahead`) against a real cluster: a stream of
//! reads is served from units fetched ahead, a write into a unit already fetched is seen by the
//! next read of it, and a snapshot's handle reads ahead too. The image is opened the way `nbd
//! serve` opens a writable export (fenced by its lock), with read-ahead on.

use crate::common;

use std::sync::Arc;

use bytes::Bytes;
use common::{Down, ok, shoal};
use shoal_client::{Client, ClusterConfig};
use shoal_rbd::Image;

const MIB: u64 = 1 << 20;
const READ_BYTES: u64 = 512 << 10;

fn pattern(len: u64, seed: u32) -> Vec<u8> {
    (0..len as u32).map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 11) as u8).collect()
}

#[test]
fn a_sequential_reader_is_served_ahead_and_sees_every_write_acknowledged_before_its_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let d = dir.display().to_string();
    ok(&shoal(tmp.path(), &["up", "--dir", &d, "--osds", "1", "--osd-size", "1G", "--no-gateway"]));
    let _down = Down(dir.clone());
    ok(&shoal(&dir, &["rbd", "create", "data/img", "--size", "64M"]));

    let cfg = ClusterConfig::from_conf_file(&dir.join("shoal.toml"), "client.admin").expect("conf");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let client = Client::connect(cfg).await.expect("connect");
        let image = Image::open(&client, "data", "img", false)
            .await
            .expect("open")
            .with_fence(Arc::new(shoal_rbd::Fence::new()))
            .with_readahead(16 * MIB);
        let mut expected = pattern(64 * MIB, 1);
        image.write(0, Bytes::from(expected.clone())).await.expect("fill");

        // A stream through the first unit: after a few reads the units after it are fetched.
        for i in 0..8 {
            let at = i * READ_BYTES;
            let got = image.read(at, READ_BYTES).await.expect("read");
            assert!(got[..] == expected[at as usize..(at + READ_BYTES) as usize], "read at {at} differs");
        }
        let counts = image.readahead_counts().expect("the handle reads ahead");
        assert!(counts.units_fetched >= 3, "{counts:?}");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;

        // Overwrite part of a unit already fetched (unit 2), acknowledged before it is read.
        let new = pattern(MIB, 7);
        let at = 9 * MIB;
        image.write(at, Bytes::from(new.clone())).await.expect("overwrite");
        expected[at as usize..(at + MIB) as usize].copy_from_slice(&new);

        // The stream goes on through units 1 to 3: every byte is the image's now.
        for i in 8..32 {
            let at = i * READ_BYTES;
            let got = image.read(at, READ_BYTES).await.expect("read");
            let want = &expected[at as usize..(at + READ_BYTES) as usize];
            assert!(got[..] == *want, "read at {at} differs after the write");
        }
        let counts = image.readahead_counts().expect("counts");
        assert!(counts.reads_served >= 8, "the stream was served ahead: {counts:?}");

        // A handle that may not read ahead (read-only on a live image) does not.
        let viewer = Image::open(&client, "data", "img", true).await.expect("open read-only").with_readahead(16 * MIB);
        assert!(viewer.readahead_counts().is_none(), "another writer could change what it fetched");
    });

    // A snapshot's export reads ahead, and reads its own bytes.
    ok(&shoal(&dir, &["rbd", "snap", "create", "data/img@s"]));
    let cfg = ClusterConfig::from_conf_file(&dir.join("shoal.toml"), "client.admin").expect("conf");
    rt.block_on(async {
        let client = Client::connect(cfg).await.expect("connect");
        let writer = Image::open(&client, "data", "img", false).await.expect("open");
        let snap = Image::open_snap(&client, "data", "img", "s").await.expect("open snap").with_readahead(16 * MIB);
        let before: Vec<u8> = writer.read(0, 16 * MIB).await.expect("read").to_vec();
        writer.write(0, Bytes::from(vec![0xee; (16 * MIB) as usize])).await.expect("overwrite after the snapshot");
        let mut seen = Vec::new();
        for i in 0..32 {
            seen.extend_from_slice(&snap.read(i * READ_BYTES, READ_BYTES).await.expect("snap read"));
        }
        assert!(seen == before, "the snapshot's export reads other bytes than the snapshot's");
        assert!(snap.readahead_counts().is_some_and(|c| c.reads_served > 0), "{:?}", snap.readahead_counts());
    });
}
