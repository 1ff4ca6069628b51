//! Image snapshots on disk-backed OSDs survive the OSD: an image with a snapshot and later
//! overwrites, the OSD killed with SIGKILL and the cluster restarted on its data, and the
//! snapshot still reads its old bytes while the image reads its new ones (issue 10). Recovery
//! moving clones between members is covered in `crates/osd/tests/replication.rs`.

use crate::common;

use common::{Down, ok, shoal, sigkill};

#[test]
fn snapshot_contents_survive_an_osd_killed_and_restarted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let d = dir.display().to_string();
    ok(&shoal(tmp.path(), &["up", "--dir", &d, "--osds", "1", "--backend", "block", "--osd-size", "512M"]));
    let _down = Down(dir.clone());

    // An image imported with known bytes (1 MiB objects, so the overwrite touches several).
    let first: Vec<u8> = (0..24u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let first_path = tmp.path().join("first.raw");
    std::fs::write(&first_path, &first).unwrap();
    let p = first_path.display().to_string();
    ok(&shoal(&dir, &["rbd", "import", &p, "data/img", "--object-size", "1M"]));
    ok(&shoal(&dir, &["rbd", "snap", "create", "data/img@before"]));

    // Overwritten after the snapshot (sequential 256 KiB writes over the first 16 MiB).
    let bench = ["rbd", "bench", "data/img", "--io-type", "write", "--io-size", "256K", "--io-threads", "4"];
    ok(&shoal(&dir, &[&bench[..], &["--io-total", "16M", "--io-pattern", "seq"]].concat()));
    let head = shoal(&dir, &["rbd", "export", "data/img", "-"]);
    assert!(head.status.success());
    assert_eq!(head.stdout.len(), first.len());
    assert_ne!(head.stdout[..16 << 20], first[..16 << 20], "the bench did not overwrite the image");
    assert_eq!(head.stdout[16 << 20..], first[16 << 20..], "the bench wrote past its range");

    // The OSD killed with SIGKILL, the cluster restarted on its data.
    sigkill(&dir, "osd.0");
    ok(&shoal(&dir, &["down", "--dir", &d, "--keep"]));
    let again = ok(&shoal(tmp.path(), &["up", "--dir", &d]));
    assert!(again.contains("restarting"), "{again}");

    // The snapshot reads the bytes from before the overwrite, the image the bytes after.
    let snap = shoal(&dir, &["rbd", "export", "data/img@before", "-"]);
    assert!(snap.status.success(), "{}", String::from_utf8_lossy(&snap.stderr));
    assert!(snap.stdout == first, "the snapshot changed across the restart");
    let now = shoal(&dir, &["rbd", "export", "data/img", "-"]);
    assert!(now.stdout == head.stdout, "the image changed across the restart");
    let listed = ok(&shoal(&dir, &["rbd", "snap", "ls", "data/img"]));
    assert!(listed.contains("before"), "{listed}");
}
