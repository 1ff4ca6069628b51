//! The cluster map's commands: validation, epochs, incrementals that replay to identical maps.

use std::collections::BTreeMap;

use shoal_map::{Change, ClusterMap, Command, MapError, OsdId, PoolSetting, Weight};

fn map_with_osds(n: u32) -> ClusterMap {
    let mut map = ClusterMap::new("test-fsid", BTreeMap::new());
    for i in 0..n {
        let cmd = Command::CreateOsd { id: None, host: format!("host-{i}"), weight: Weight::ONE };
        map.execute(&cmd).expect("create osd");
        let addr = format!("127.0.0.1:{}", 7000 + i).parse().expect("addr");
        map.execute(&Command::OsdBoot { id: OsdId(i), addr }).expect("boot");
    }
    map
}

fn create_pool(name: &str, size: u32) -> Command {
    Command::CreatePool { name: name.into(), size, min_size: None, pg_num: 32, max_object_bytes: None }
}

#[test]
fn epochs_grow_and_incrementals_replay_to_the_same_map() {
    let mut map = ClusterMap::new("f", BTreeMap::new());
    let mut follower = map.clone();
    let mut incs = Vec::new();
    for i in 0..4 {
        let cmd = Command::CreateOsd { id: None, host: format!("h{}", i % 2), weight: Weight::ONE };
        incs.push(map.execute(&cmd).unwrap().unwrap());
    }
    incs.push(map.execute(&create_pool("data", 2)).unwrap().unwrap());
    incs.push(map.execute(&Command::OsdOut { id: OsdId(1) }).unwrap().unwrap());
    assert_eq!(map.epoch, 7);
    for inc in &incs {
        follower.apply_incremental(inc).unwrap();
    }
    assert_eq!(postcard::to_allocvec(&map).unwrap(), postcard::to_allocvec(&follower).unwrap());
    // A gap is refused and leaves the follower unchanged.
    let mut stale = ClusterMap::new("f", BTreeMap::new());
    assert_eq!(stale.apply_incremental(&incs[2]), Err(MapError::EpochGap { have: 1, got: 4 }));
    assert_eq!(stale.epoch, 1);
}

#[test]
fn pool_commands_are_validated() {
    let mut map = map_with_osds(3);
    map.execute(&create_pool("data", 3)).unwrap();
    assert_eq!(map.execute(&create_pool("data", 1)), Err(MapError::DuplicatePool("data".into())));
    assert_eq!(map.execute(&create_pool("big", 4)), Err(MapError::SizeTooLarge { size: 4, osds: 3 }));
    assert!(matches!(map.execute(&create_pool("bad/name", 1)), Err(MapError::InvalidPoolName { .. })));
    assert!(matches!(map.execute(&create_pool("", 1)), Err(MapError::InvalidPoolName { .. })));
    assert!(matches!(map.execute(&create_pool("zero", 0)), Err(MapError::InvalidPoolSetting(_))));
    let rm = Command::RemovePool { name: "nope".into() };
    assert_eq!(map.execute(&rm), Err(MapError::UnknownPool("nope".into())));
    let shrink = Command::SetPool { name: "data".into(), setting: PoolSetting::PgNum(16) };
    assert!(matches!(map.execute(&shrink), Err(MapError::InvalidPoolSetting(_))));
    // No splitting: a new count would map objects to PGs that do not hold them.
    let grow = Command::SetPool { name: "data".into(), setting: PoolSetting::PgNum(64) };
    let Err(MapError::InvalidPoolSetting(why)) = map.execute(&grow) else { panic!("pg_num growth accepted") };
    assert!(why.contains("splitting"), "{why}");
    assert_eq!(map.pool_by_name("data").unwrap().pg_num, 32);
    assert_eq!(map.pool_by_name("data").unwrap().min_size, 2);
    map.execute(&Command::RemovePool { name: "data".into() }).unwrap();
    assert!(map.pool_by_name("data").is_err());
}

#[test]
fn idempotent_commands_make_no_epoch() {
    let mut map = map_with_osds(2);
    let epoch = map.epoch;
    assert_eq!(map.execute(&Command::OsdIn { id: OsdId(0) }), Ok(None));
    let addr = "127.0.0.1:7000".parse().unwrap();
    assert_eq!(map.execute(&Command::OsdBoot { id: OsdId(0), addr }), Ok(None));
    assert_eq!(map.epoch, epoch);
    assert_eq!(map.execute(&Command::OsdDown { id: OsdId(9) }), Err(MapError::UnknownOsd(OsdId(9))));
}

/// A client that lost the answer to a repeatable command resends it (`MonClient::command`): the
/// repeat must succeed and change nothing. The others must not be resent blindly: their repeat
/// fails, or would create a second thing.
#[test]
fn repeatable_commands_succeed_unchanged_when_repeated_and_the_others_are_not_repeatable() {
    let mut map = map_with_osds(3);
    map.execute(&create_pool("data", 2)).unwrap();
    let addr = "127.0.0.1:7100".parse().unwrap();
    let repeatable = [
        Command::OsdOut { id: OsdId(1) },
        Command::OsdIn { id: OsdId(1) },
        Command::OsdDown { id: OsdId(2) },
        Command::OsdBoot { id: OsdId(2), addr },
        Command::OsdFull { id: OsdId(0), full: true },
        Command::SetPool { name: "data".into(), setting: PoolSetting::Size(3) },
        Command::SetPool { name: "data".into(), setting: PoolSetting::MinSize(2) },
        Command::AuthAdd { entity: "client.app".into(), key: [7; 32] },
        Command::ConfigSet { key: "osd_recovery_max_ops".into(), value: Some(2) },
        Command::SetFlag { flag: "noout".into(), on: true },
        Command::Blocklist { client: 0xfeed, until_unix_ms: 5_000, now_unix_ms: 1_000 },
    ];
    for cmd in &repeatable {
        assert!(cmd.repeatable(), "{cmd:?}");
        assert!(map.execute(cmd).expect("first").is_some(), "{cmd:?} changed nothing the first time");
        let epoch = map.epoch;
        assert_eq!(map.execute(cmd), Ok(None), "{cmd:?} repeated");
        assert_eq!(map.epoch, epoch);
    }
    let once_only = [
        Command::CreateOsd { id: None, host: "host-9".into(), weight: Weight::ONE },
        create_pool("more", 2),
        Command::AuthRemove { entity: "client.app".into() },
        Command::RemovePool { name: "more".into() },
        Command::Unblocklist { client: 0xfeed },
    ];
    for cmd in &once_only {
        assert!(!cmd.repeatable(), "{cmd:?}");
        let before = map.osds.len();
        map.execute(cmd).expect("first");
        let again = map.execute(cmd);
        assert!(again.is_err() || map.osds.len() > before + 1, "{cmd:?} repeated harmlessly: {again:?}");
    }
}

#[test]
fn placement_uses_only_up_and_in_osds_on_distinct_hosts() {
    let mut map = map_with_osds(4);
    map.execute(&create_pool("data", 3)).unwrap();
    let pool = map.pool_by_name("data").unwrap().id;
    for i in 0..200 {
        let loc = map.locate(pool, &format!("obj-{i}")).unwrap();
        assert_eq!(loc.osds.len(), 3);
        let mut hosts: Vec<_> = loc.osds.iter().map(|o| map.osds[o].host.clone()).collect();
        hosts.sort();
        hosts.dedup();
        assert_eq!(hosts.len(), 3, "replicas on distinct hosts");
    }
    map.execute(&Command::OsdDown { id: OsdId(2) }).unwrap();
    map.execute(&Command::OsdOut { id: OsdId(3) }).unwrap();
    for i in 0..200 {
        let loc = map.locate(pool, &format!("obj-{i}")).unwrap();
        assert_eq!(loc.osds.len(), 2, "only two usable OSDs remain");
        assert!(!loc.osds.contains(&OsdId(2)) && !loc.osds.contains(&OsdId(3)));
    }
    assert!(matches!(map.prepare(&Command::OsdIn { id: OsdId(3) }), Ok(Some(Change::OsdIn { .. }))));
}

#[test]
fn auth_keys_are_validated_and_redacted() {
    let mut map = map_with_osds(1);
    let add = Command::AuthAdd { entity: "client.bob".into(), key: [7; 32] };
    let inc = map.execute(&add).unwrap().unwrap();
    assert_eq!(map.auth["client.bob"], [7; 32]);
    assert_eq!(map.execute(&add), Ok(None), "the same key again is no change");
    assert!(matches!(inc.change.redacted(), Change::Redacted));
    assert!(map.redacted().auth.is_empty());
    // A follower applying the redacted incremental stays at the same epoch, without the key.
    let mut follower = map.redacted();
    follower.epoch -= 1;
    follower.apply_incremental(&shoal_map::Incremental { epoch: inc.epoch, change: inc.change.redacted() }).unwrap();
    assert_eq!(follower.epoch, map.epoch);
    map.execute(&Command::AuthAdd { entity: "osd.7".into(), key: [2; 32] }).unwrap();
    map.execute(&Command::AuthRemove { entity: "osd.7".into() }).unwrap();
    for bad in ["mon.0", "osd.x", "osd.01", "client.", "client.admin", "client.a b", "bob"] {
        let cmd = Command::AuthAdd { entity: bad.into(), key: [1; 32] };
        assert!(matches!(map.execute(&cmd), Err(MapError::InvalidEntity { .. })), "{bad}");
    }
    let rm = Command::AuthRemove { entity: "client.carol".into() };
    assert_eq!(map.execute(&rm), Err(MapError::UnknownEntity("client.carol".into())));
    map.execute(&Command::AuthRemove { entity: "client.bob".into() }).unwrap();
    assert!(map.auth.is_empty());
}

#[test]
fn full_flag_is_set_cleared_and_survives_incrementals() {
    let mut map = map_with_osds(2);
    let mut follower = map.clone();
    assert!(!map.osds[&OsdId(1)].full, "a new OSD is not full");
    let set = map.execute(&Command::OsdFull { id: OsdId(1), full: true }).unwrap().expect("a new epoch");
    assert_eq!(set.change, Change::OsdFull { id: OsdId(1), full: true });
    assert!(map.osds[&OsdId(1)].full);
    assert!(!map.osds[&OsdId(0)].full, "only the named OSD is flagged");
    // Setting what is already set needs no epoch; an unknown OSD is named.
    assert_eq!(map.execute(&Command::OsdFull { id: OsdId(1), full: true }), Ok(None));
    assert_eq!(map.execute(&Command::OsdFull { id: OsdId(7), full: true }), Err(MapError::UnknownOsd(OsdId(7))));
    let clear = map.execute(&Command::OsdFull { id: OsdId(1), full: false }).unwrap().expect("a new epoch");
    follower.apply_incremental(&set).unwrap();
    assert!(follower.osds[&OsdId(1)].full);
    follower.apply_incremental(&clear).unwrap();
    assert_eq!(postcard::to_allocvec(&map).unwrap(), postcard::to_allocvec(&follower).unwrap());
}

#[test]
fn used_share_is_in_thousandths_and_never_overflows() {
    use shoal_map::used_permille;
    assert_eq!(used_permille(0, 0), 0, "a store without capacity counts as empty");
    assert_eq!(used_permille(95, 100), 950);
    assert_eq!(used_permille(949_999, 1_000_000), 949, "rounded down");
    assert_eq!(used_permille(u64::MAX, u64::MAX), 1000);
    assert_eq!(used_permille(u64::MAX / 2, u64::MAX), 499);
}

#[test]
fn activation_records_name_holders_apart_from_members_and_forget_removed_ones() {
    let mut map = map_with_osds(3);
    map.execute(&create_pool("data", 2)).unwrap();
    let pg = shoal_map::PgId { pool: 1, seed: 0 };
    let acting = map.pg_osds(pg).unwrap();
    let primary = acting[0];
    let other = (0..3).map(OsdId).find(|o| !acting.contains(o)).expect("an OSD outside the acting set");
    let proposal = |holders: Vec<OsdId>| shoal_map::ActivationProposal {
        pg,
        prior_epoch: 0,
        activated_at: map.epoch,
        members: acting.clone(),
        holders,
    };
    // A holder that is also a member is refused: the record would say a member lacks what it holds.
    let request = |proposal| shoal_map::ActivationRequest { proposal, interval: map.pg_interval(pg).unwrap() };
    let bad = Command::PgActivated { by: primary, records: vec![request(proposal(vec![acting[1]]))] };
    assert_eq!(map.prepare(&bad), Ok(None));
    let good = Command::PgActivated { by: primary, records: vec![request(proposal(vec![other]))] };
    map.execute(&good).unwrap().expect("a change");
    assert_eq!(map.pg_active[&pg].holders, vec![other]);
    assert_eq!(map.pg_active[&pg].members, acting);
    // Removing the holder for good declares what it held lost: no record names it any more.
    map.execute(&Command::OsdDown { id: other }).unwrap();
    map.execute(&Command::OsdOut { id: other }).unwrap();
    map.execute(&Command::RemoveOsd { id: other }).unwrap();
    assert!(map.pg_active[&pg].holders.is_empty());
    assert_eq!(map.pg_active[&pg].members, acting);
}

#[test]
fn an_operator_gives_up_only_the_activation_record_seen() {
    let mut map = map_with_osds(3);
    map.execute(&create_pool("data", 2)).unwrap();
    let pg = shoal_map::PgId { pool: 1, seed: 0 };
    let forget = |record_epoch| Command::PgForgetHistory { pg, record_epoch };
    let refused = |map: &ClusterMap, cmd: &Command, why: &str| {
        let e = map.prepare(cmd).expect_err("refused");
        assert!(e.to_string().contains(why), "{e}");
    };
    refused(&map, &forget(0), "no activation record");
    let acting = map.pg_osds(pg).unwrap();
    let record = shoal_map::ActivationProposal {
        pg,
        prior_epoch: 0,
        activated_at: map.epoch,
        members: acting.clone(),
        holders: Vec::new(),
    };
    let request = shoal_map::ActivationRequest { proposal: record, interval: map.pg_interval(pg).unwrap() };
    map.execute(&Command::PgActivated { by: acting[0], records: vec![request] }).unwrap().expect("a change");
    let seen = map.pg_active[&pg].epoch;
    refused(&map, &forget(seen - 1), "peered since");
    refused(
        &map,
        &Command::PgForgetHistory { pg: shoal_map::PgId { pool: 1, seed: 999 }, record_epoch: seen },
        "no such PG",
    );
    assert!(!forget(seen).repeatable(), "a repeat must look at the map first");
    map.execute(&forget(seen)).unwrap().expect("a change");
    assert!(!map.pg_active.contains_key(&pg), "the record is gone");
    refused(&map, &forget(seen), "no activation record");
}

/// A request, by the first of `members`, to record PG `pg`'s first activation, made at
/// `activated_at` in `interval`.
fn first_record(pg: shoal_map::PgId, members: &[OsdId], activated_at: u64, interval: Vec<(OsdId, u64)>) -> Command {
    Command::PgActivated {
        by: members[0],
        records: vec![shoal_map::ActivationRequest {
            proposal: shoal_map::ActivationProposal {
                pg,
                prior_epoch: 0,
                activated_at,
                members: members.to_vec(),
                holders: Vec::new(),
            },
            interval,
        }],
    }
}

#[test]
fn an_activation_is_recorded_only_in_the_interval_it_was_made_in() {
    let mut map = map_with_osds(3);
    map.execute(&create_pool("data", 2)).unwrap();
    let pg = shoal_map::PgId { pool: 1, seed: 0 };
    let acting = map.pg_osds(pg).unwrap();
    let made_in = map.pg_interval(pg).unwrap();
    assert_eq!(made_in.iter().map(|(o, _)| *o).collect::<Vec<_>>(), acting, "the interval lists the acting set");
    let request = |activated_at, interval| first_record(pg, &acting, activated_at, interval);
    let in_time = request(map.epoch, made_in.clone());
    // A member restarts: same acting set, a new interval. The activation of the old one is
    // dropped; one made in the new interval is recorded.
    let member = acting[1];
    map.execute(&Command::OsdDown { id: member }).unwrap();
    let addr = "127.0.0.1:7999".parse().unwrap();
    map.execute(&Command::OsdBoot { id: member, addr }).unwrap();
    assert_eq!(map.pg_osds(pg).unwrap(), acting, "the same acting set");
    assert_ne!(map.pg_interval(pg).unwrap(), made_in, "a new interval");
    assert_eq!(map.prepare(&in_time), Ok(None), "an activation of a past interval was recorded");
    let now = request(map.epoch, map.pg_interval(pg).unwrap());
    map.execute(&now).unwrap().expect("recorded");
    assert_eq!(map.pg_active[&pg].members, acting);
}

#[test]
fn an_activation_is_not_recorded_after_its_interval_went_and_came_back() {
    // The acting set of the activation's interval is the acting set again, with the same
    // `up_from`s, but another OSD was up and acting in between: a primary of that interval may
    // have activated the same members since (decision 0090).
    let mut map = map_with_osds(3);
    map.execute(&create_pool("data", 3)).unwrap();
    let pg = shoal_map::PgId { pool: 1, seed: 0 };
    let acting = map.pg_osds(pg).unwrap();
    let away = acting[0];
    map.execute(&Command::OsdDown { id: away }).unwrap();
    let survivors = map.pg_osds(pg).unwrap();
    assert!(!survivors.contains(&away));
    let made_in = map.pg_interval(pg).unwrap();
    let activated_at = map.epoch;
    let request = |activated_at, interval| first_record(pg, &survivors, activated_at, interval);
    let stale = request(activated_at, made_in.clone());
    assert_eq!(map.pg_interval_since.get(&pg), Some(&activated_at), "the interval began with the OSD going down");
    // The OSD comes back (a new interval, led by it) and goes down again.
    let addr = "127.0.0.1:7999".parse().unwrap();
    map.execute(&Command::OsdBoot { id: away, addr }).unwrap();
    assert_eq!(map.pg_osds(pg).unwrap(), acting, "the OSD acts again");
    map.execute(&Command::OsdDown { id: away }).unwrap();
    assert_eq!(map.pg_interval(pg).unwrap(), made_in, "the same OSDs with the same up_from");
    assert_eq!(map.prepare(&stale), Ok(None), "an activation of an interval that went and came back was recorded");
    // One made in the interval as it is now is recorded; changes that move no interval keep it.
    let now = request(map.epoch, made_in);
    map.execute(&Command::SetFlag { flag: "noout".into(), on: true }).unwrap();
    map.execute(&now).unwrap().expect("recorded");
    assert_eq!(map.pg_active[&pg].members, survivors);
}

#[test]
fn blocklisted_instances_are_listed_until_removed_or_expired_by_a_later_entry() {
    let mut map = map_with_osds(1);
    let mut follower = map.clone();
    let add = |client, until_unix_ms, now_unix_ms| Command::Blocklist { client, until_unix_ms, now_unix_ms };
    let mut incs = vec![map.execute(&add(1, 10_000, 1_000)).unwrap().unwrap()];
    incs.push(map.execute(&add(2, 20_000, 2_000)).unwrap().unwrap());
    assert!(map.is_blocklisted(1) && map.is_blocklisted(2) && !map.is_blocklisted(3));
    // An entry lapses only in the map's terms: it stays listed (and refused by OSDs, which read
    // no clock) until a later entry is added by a caller whose clock has passed it.
    let inc = map.execute(&add(3, 40_000, 15_000)).unwrap().unwrap();
    assert_eq!(inc.change, Change::Blocklist { client: 3, until_unix_ms: 40_000, expired: vec![1] });
    incs.push(inc);
    assert!(!map.is_blocklisted(1) && map.is_blocklisted(2) && map.is_blocklisted(3));
    // Adding a listed instance again moves its lapse time, and is never expired by itself.
    incs.push(map.execute(&add(2, 90_000, 30_000)).unwrap().unwrap());
    assert_eq!(map.blocklist.get(&2), Some(&90_000));
    incs.push(map.execute(&Command::Unblocklist { client: 3 }).unwrap().unwrap());
    assert_eq!(map.execute(&Command::Unblocklist { client: 3 }), Err(MapError::NotBlocklisted { client: 3 }));
    assert_eq!(map.blocklist.keys().copied().collect::<Vec<_>>(), vec![2]);
    for inc in &incs {
        follower.apply_incremental(inc).unwrap();
    }
    assert_eq!(postcard::to_allocvec(&follower).unwrap(), postcard::to_allocvec(&map).unwrap());
    // Bounded: a full list refuses a new instance by name, but still takes one whose entries
    // have lapsed, and still moves a listed instance's time.
    for c in 100..(100 + shoal_map::MAX_BLOCKLIST_ENTRIES as u64 - 1) {
        map.execute(&add(c, 1_000_000, 40_000)).unwrap();
    }
    assert_eq!(map.blocklist.len(), shoal_map::MAX_BLOCKLIST_ENTRIES);
    let full = map.execute(&add(7, 1_000_000, 40_000));
    assert!(matches!(full, Err(MapError::BlocklistFull { .. })), "{full:?}");
    assert!(full.unwrap_err().to_string().contains("shoal osd blocklist rm"));
    map.execute(&add(2, 2_000_000, 40_000)).expect("a listed instance's time moves on a full list");
    map.execute(&add(7, 3_000_000, 1_500_000)).expect("lapsed entries make room");
    assert_eq!(map.blocklist.keys().copied().collect::<Vec<_>>(), vec![2, 7]);
}
