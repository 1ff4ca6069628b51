//! `shoal placement simulate` end to end: the JSON a script would parse.

use std::process::Command;

#[test]
fn simulate_prints_balance_and_movement_as_json() {
    let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["placement", "simulate", "--osds", "60", "--pgs", "6000", "--replicas", "3", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["config"]["osds"], 60);
    assert_eq!(v["hosts"], 6);
    // Every PG got its three copies on a 6-host map, none short.
    assert_eq!(v["balance"]["copies"], 18_000);
    assert_eq!(v["balance"]["short_pgs"], 0);
    // Marking an OSD out moves only what it held: about one sixtieth of the copies.
    let moved = v["mark_out"]["moved_fraction"].as_f64().unwrap();
    assert!(moved > 0.0 && moved < 0.05, "mark out moved {moved}");
}

#[test]
fn simulate_rejects_an_impossible_map() {
    let out = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["placement", "simulate", "--osds", "0", "--pgs", "10"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!out.stderr.is_empty(), "the error must say what is wrong");
}
