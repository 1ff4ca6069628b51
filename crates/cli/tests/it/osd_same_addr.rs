//! An OSD restarted at the address of its earlier run, before the monitors noticed that run was
//! gone (a fixed `--addr`, or the kernel handing out the same port), boots as a new
//! incarnation: the map records a new `up_from`, so its PGs start a new interval.

use crate::common;

use std::time::{Duration, Instant};

use common::{ok, shoal, sigkill, start_daemon};
use shoal_client::{Client, ClusterConfig};
use shoal_map::OsdId;

#[test]
fn an_osd_restarted_at_its_old_address_boots_as_a_new_incarnation() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, _down) = common::up_block(tmp.path(), 1, "256M");
    ok(&shoal(&dir, &["obj", "put", "--pool", "data", "before", "/etc/hostname"]));

    let cfg = ClusterConfig::from_conf_file(&dir.join("shoal.toml"), "client.admin").expect("conf");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let client = rt.block_on(Client::connect(cfg)).expect("connect");
    let info = |c: &Client| c.mon().map().osds[&OsdId(0)].clone();
    let before = info(&client);
    let addr = before.addr.expect("osd.0's address");

    // Killed, and started again at once at the same address: the monitors still show it up.
    sigkill(&dir, "osd.0");
    let conf = dir.join("shoal.toml").display().to_string();
    let args: Vec<String> = ["osd", "run", "--conf", &conf, "--id", "0", "--host", "host-0", "--backend", "block"]
        .into_iter()
        .map(String::from)
        .chain(["--size".to_string(), "256M".to_string(), "--addr".to_string(), addr.to_string()])
        .collect();
    let mut osd = start_daemon(&dir, "osd.0", &args, &[]);
    std::fs::write(dir.join("osd.0.pid"), format!("{}\n", osd.id())).expect("pid file");

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = info(&client);
        if now.up && now.up_from > before.up_from {
            assert_eq!(now.addr, Some(addr), "restarted elsewhere");
            break;
        }
        if Instant::now() >= deadline {
            let log = std::fs::read_to_string(dir.join("osd.0.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            panic!(
                "no new incarnation of osd.0 in the map: {now:?} (was {before:?}); its log ends:\n{}",
                tail.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // And it serves what its earlier run stored.
    let got = ok(&shoal(&dir, &["obj", "get", "--pool", "data", "before"]));
    assert_eq!(got, std::fs::read_to_string("/etc/hostname").expect("hostname"));
    let _ = osd.kill();
    let _ = osd.wait();
}
