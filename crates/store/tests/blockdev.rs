//! The `block` backend on a real kernel block device: a loop device over a file. Needs root
//! (CI runs as root); elsewhere the test says it was skipped and passes.

use std::process::Command;

use shoal_store::{BackendKind, Durability, MkfsOptions, Transaction};

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

struct Loop(String);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

#[test]
fn block_store_on_a_loop_device() {
    if !is_root() {
        eprintln!("skipped: attaching a loop device needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("disk.img");
    std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
    let out = Command::new("losetup").args(["-f", "--show"]).arg(&img).output().expect("losetup must be installed");
    assert!(out.status.success(), "losetup failed: {}", String::from_utf8_lossy(&out.stderr));
    let dev = Loop(String::from_utf8(out.stdout).unwrap().trim().to_string());

    let store_dir = dir.path().join("store");
    let opts =
        MkfsOptions { backend: BackendKind::Block, size_bytes: 0, device: Some(dev.0.clone().into()), force: false };
    let store = shoal_store::mkfs(&store_dir, &opts).unwrap();
    assert_eq!(
        store.usage().unwrap().size_bytes,
        (64 << 20) - 4096 - (4 << 20),
        "label and a 4 MiB log come off the top"
    );
    let mut txn = Transaction::new();
    txn.create_collection("c").write("c", "big", 0, vec![7u8; 3 << 20]).write("c", "small", 0, b"hello".to_vec());
    store.commit(txn, Durability::Sync).unwrap();
    drop(store);

    // The device is opened exclusively while mounted: a second opener is refused by the kernel.
    let store = shoal_store::open(&store_dir).unwrap();
    let held = std::fs::OpenOptions::new().read(true).custom_flags_excl().open(&dev.0);
    assert!(held.is_err(), "an O_EXCL open of a mounted device must fail");
    assert_eq!(store.read_all("c", "big").unwrap(), vec![7u8; 3 << 20]);
    assert_eq!(store.read_all("c", "small").unwrap(), b"hello");
    assert!(store.fsck().unwrap().is_clean());
    drop(store);

    // A store whose device link points at another device is refused, not misread.
    let other = dir.path().join("other.img");
    std::fs::File::create(&other).unwrap().set_len(64 << 20).unwrap();
    std::fs::remove_file(store_dir.join("block")).unwrap();
    std::os::unix::fs::symlink(&other, store_dir.join("block")).unwrap();
    let err = shoal_store::open(&store_dir).err().expect("mounting with the wrong device must fail");
    assert!(err.to_string().contains("label"), "{err}");
}

trait ExclOpen {
    fn custom_flags_excl(&mut self) -> &mut Self;
}

impl ExclOpen for std::fs::OpenOptions {
    fn custom_flags_excl(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(rustix::fs::OFlags::EXCL.bits() as i32)
    }
}
