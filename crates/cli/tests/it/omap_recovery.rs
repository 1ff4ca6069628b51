//! Objects with more omap than a recovery chunk, on real OSD processes with disk-backed stores:
//! an OSD of a size-3 pool is killed with SIGKILL, the objects' omaps grow while it is away (and
//! new ones are written), and it comes back. Recovery brings it every change — pushed to it, or
//! pulled by it where it leads a PG, in parts of the 64 KiB chunk set here (decision 0044) — and
//! once the cluster is clean, every member's store holds exactly the same data, xattrs, omap and
//! stored version of every object (read offline, after fsck).

use crate::common;

use std::time::Duration;

use common::{ok, shoal};
use shoal_proto::osd::ObjOp;

const OBJECTS: u32 = 6;
/// Omap values per request, and their size: 256 KiB per request, four chunks' worth.
const VALUES_PER_REQUEST: u32 = 8;
const VALUE_BYTES: usize = 32 << 10;

/// One request that grows object `i`'s omap by a round of entries, rewrites its data and sets an
/// xattr, so that every round changes all three.
fn round_ops(i: u32, round: u32) -> (Vec<ObjOp>, Vec<u8>) {
    let entries = (0..VALUES_PER_REQUEST)
        .map(|k| (format!("r{round}-k{k:02}").into_bytes(), vec![(i * 31 + round * 7 + k) as u8; VALUE_BYTES]))
        .collect();
    let data = vec![(i + round) as u8; 10_000 + round as usize];
    let ops = vec![
        ObjOp::WriteFull { len_bytes: data.len() as u64 },
        ObjOp::SetXattr { name: "round".into(), value: round.to_be_bytes().to_vec() },
        ObjOp::OmapSet { entries },
    ];
    (ops, data)
}

#[test]
fn objects_with_large_omaps_recover_whole_on_every_member() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, _down) = common::up_block(tmp.path(), 3, "1G");
    ok(&shoal(&dir, &["pool", "create", "wide", "--size", "3", "--min-size", "2", "--pg-num", "4"]));
    ok(&shoal(&dir, &["config", "set", "osd_backfill_chunk_bytes", "65536"]));
    let (rt, client) = common::admin_client(&dir);
    let write = |i: u32, round: u32| {
        let (ops, data) = round_ops(i, round);
        rt.block_on(client.op("wide", &format!("wide-{i}"), ops, data)).unwrap_or_else(|e| panic!("wide-{i}: {e}"));
    };
    for i in 0..OBJECTS {
        write(i, 0);
    }
    common::sigkill(&dir, "osd.2");
    common::wait_osd(&client, 2, false, Duration::from_secs(30));
    // While osd.2 is away: every object's omap doubles, and new objects appear.
    for i in 0..OBJECTS {
        write(i, 1);
    }
    for i in OBJECTS..OBJECTS + 2 {
        write(i, 0);
        write(i, 1);
    }
    let mut osd2 = common::start_block_osd(&dir, 2, "1G", &[]);
    common::wait_osd(&client, 2, true, Duration::from_secs(30));
    common::wait_clean(&dir, 3, Duration::from_secs(120));
    drop(client);
    drop(rt);
    ok(&shoal(&dir, &["down", "--dir", &dir.display().to_string()]));
    // `shoal down` stopped the restarted OSD too (by its pid file): reap it.
    osd2.wait().expect("osd.2 exits");

    let stores: Vec<shoal_store::Store> = (0..3).map(|osd| common::fsck_and_open_store(&dir, osd)).collect();
    let map_pool = |name: &str| common::pg_collection_holding(&stores[0], name);
    for i in 0..OBJECTS + 2 {
        let name = format!("wide-{i}");
        let coll = map_pool(&name);
        let state = |s: &shoal_store::Store| {
            let data = s.read_all(&coll, &name).unwrap_or_else(|e| panic!("{name}: {e}"));
            let xattrs = s.list_xattrs(&coll, &name).expect("xattrs");
            let omap = s.omap_list(&coll, &name, None, 10_000).expect("omap");
            let version = s.version(&coll, &name).expect("version");
            (data, xattrs, omap, version)
        };
        let want = state(&stores[0]);
        assert_eq!(want.2.len(), 2 * VALUES_PER_REQUEST as usize, "{name}: both rounds' entries");
        assert_eq!(want.1, vec![("round".to_string(), 1u32.to_be_bytes().to_vec())], "{name}");
        assert_ne!(want.3, (0, 0), "{name} has a stored version");
        for (osd, s) in stores.iter().enumerate().skip(1) {
            let got = state(s);
            assert!(
                got == want,
                "osd.{osd}'s {name} differs from osd.0's (omap {} vs {} entries, versions {:?} vs {:?})",
                got.2.len(),
                want.2.len(),
                got.3,
                want.3
            );
        }
    }
}
