//! The sans-I/O monitor core, driven by hand: validation, replies, subscriptions, heartbeats,
//! leadership.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use shoal_map::{ActivationProposal, Change, ClusterMap, Command, CommandSession, MonInfo, OsdId, PgId, Weight};
use shoal_mon::core::{Action, CoreConfig, Event, MonCore, Reply, ReplyTo};
use shoal_mon::sessions::SessionTable;
use shoal_proto::ErrorCode;
use shoal_proto::mon::{MapUpdate, OsdStats};

fn map() -> ClusterMap {
    let addr: SocketAddr = "127.0.0.1:6789".parse().unwrap();
    ClusterMap::new("fsid-test", BTreeMap::from([(0, MonInfo { addr })]))
}

fn to(conn: u64, request_id: u64) -> ReplyTo {
    ReplyTo { conn, request_id }
}

fn cmd(core: &mut MonCore, t: ReplyTo, command: Command, now_ms: u64) -> Vec<Action> {
    core.handle(Event::Command { to: Some(t), command, session: None, forwarded: false, now_ms })
}

fn cmd_in(core: &mut MonCore, t: ReplyTo, command: Command, session: CommandSession) -> Vec<Action> {
    core.handle(Event::Command { to: Some(t), command, session: Some(session), forwarded: false, now_ms: 0 })
}

fn stats(osd: u32) -> OsdStats {
    OsdStats {
        osd: OsdId(osd),
        map_epoch: 1,
        pg_states: vec![],
        objects: 0,
        used_bytes: 0,
        capacity_bytes: 1 << 30,
        read_ops_per_s: 0.0,
        write_ops_per_s: 0.0,
        read_bytes_per_s: 0.0,
        write_bytes_per_s: 0.0,
        degraded_objects: 0,
        misplaced_objects: 0,
        unfound_objects: 0,
        recovery_objects_per_s: 0.0,
        stray_pgs: 0,
        unreachable_peers: Vec::new(),
    }
}

/// Commits every proposal in `actions` by feeding it back (what the simulation does instead of
/// Raft), repeatedly, and returns every action produced along the way.
fn commit_all(core: &mut MonCore, mut actions: Vec<Action>) -> Vec<Action> {
    let mut all = Vec::new();
    let mut index = core.applied_index();
    for _ in 0..1000 {
        let proposals: Vec<(Change, Option<CommandSession>)> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Propose { change, session, .. } => Some((change.clone(), *session)),
                _ => None,
            })
            .collect();
        all.append(&mut actions);
        if proposals.is_empty() {
            return all;
        }
        for (change, session) in proposals {
            index += 1;
            actions.extend(core.handle(Event::Applied { index, change, session }));
        }
    }
    panic!("proposals never stop");
}

fn command_replies(actions: &[Action]) -> Vec<(ReplyTo, Result<u64, shoal_proto::RemoteError>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Reply { to, reply: Reply::Command(r) } => Some((*to, r.clone())),
            _ => None,
        })
        .collect()
}

fn proposals(actions: &[Action]) -> Vec<Change> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Propose { change, .. } => Some(change.clone()),
            _ => None,
        })
        .collect()
}

fn create_osds(core: &mut MonCore, n: u32) {
    for i in 0..n {
        let a = cmd(
            core,
            to(1, u64::from(i)),
            Command::CreateOsd { id: None, host: format!("h{i}"), weight: Weight::ONE },
            0,
        );
        let r = commit_all(core, a);
        assert!(command_replies(&r)[0].1.is_ok());
    }
}

#[test]
fn commands_are_validated_with_codes_and_messages() {
    let mut core = MonCore::standalone(CoreConfig::new(0), map());
    create_osds(&mut core, 2);

    let a = cmd(&mut core, to(1, 10), Command::RemovePool { name: "nope".into() }, 0);
    let r = command_replies(&a);
    let e = r[0].1.clone().unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
    assert!(e.message.contains("nope"), "{}", e.message);

    let create = Command::CreatePool { name: "rbd".into(), size: 3, min_size: None, pg_num: 8, max_object_bytes: None };
    let a = cmd(&mut core, to(1, 11), create, 0);
    let e = command_replies(&a)[0].1.clone().unwrap_err();
    assert_eq!(e.code, ErrorCode::Invalid);
    assert!(e.message.contains("size 3") && e.message.contains("2 OSDs"), "{}", e.message);
    assert!(proposals(&a).is_empty());

    let create = Command::CreatePool { name: "rbd".into(), size: 2, min_size: None, pg_num: 8, max_object_bytes: None };
    let a = cmd(&mut core, to(1, 12), create.clone(), 0);
    let r = commit_all(&mut core, a);
    assert_eq!(command_replies(&r), vec![(to(1, 12), Ok(4))]);
    let a = cmd(&mut core, to(1, 13), create, 0);
    let e = command_replies(&a)[0].1.clone().unwrap_err();
    assert_eq!(e.code, ErrorCode::Exists);
    assert!(e.message.contains("rbd"), "{}", e.message);

    let bad = Command::CreatePool { name: "a b".into(), size: 1, min_size: None, pg_num: 8, max_object_bytes: None };
    let e = command_replies(&cmd(&mut core, to(1, 14), bad, 0))[0].1.clone().unwrap_err();
    assert_eq!(e.code, ErrorCode::Invalid);
    assert!(e.message.contains("a b"), "{}", e.message);

    // Already satisfied: no proposal, the current epoch.
    let a = cmd(&mut core, to(1, 15), Command::OsdIn { id: OsdId(0) }, 0);
    assert!(proposals(&a).is_empty());
    assert_eq!(command_replies(&a), vec![(to(1, 15), Ok(4))]);
}

#[test]
fn proposals_are_serialized_and_prepared_against_the_latest_map() {
    let mut core = MonCore::standalone(CoreConfig::new(0), map());
    create_osds(&mut core, 1);
    let p = |name: &str| Command::CreatePool {
        name: name.into(),
        size: 1,
        min_size: None,
        pg_num: 4,
        max_object_bytes: None,
    };
    let a1 = cmd(&mut core, to(1, 1), p("a"), 0);
    let a2 = cmd(&mut core, to(1, 2), p("b"), 0);
    let a3 = cmd(&mut core, to(1, 3), p("a"), 0);
    assert_eq!(proposals(&a1).len(), 1);
    assert!(a2.is_empty() && a3.is_empty(), "queued behind the in-flight proposal");
    let all = commit_all(&mut core, a1);
    let replies = command_replies(&all);
    assert_eq!(replies[0], (to(1, 1), Ok(3)));
    assert_eq!(replies[1], (to(1, 2), Ok(4)));
    assert_eq!(replies[2].1.as_ref().unwrap_err().code, ErrorCode::Exists);
    let ids: Vec<u32> = core.map().pools.keys().copied().collect();
    assert_eq!(ids, vec![1, 2], "distinct pool ids");
}

#[test]
fn failed_proposal_is_reported_and_the_queue_moves_on() {
    let mut core = MonCore::standalone(CoreConfig::new(0), map());
    let a = cmd(&mut core, to(1, 1), Command::CreateOsd { id: None, host: "h".into(), weight: Weight::ONE }, 0);
    assert_eq!(proposals(&a).len(), 1);
    let b = cmd(&mut core, to(1, 2), Command::CreateOsd { id: None, host: "h".into(), weight: Weight::ONE }, 0);
    assert!(b.is_empty());
    let e = shoal_proto::RemoteError::new(ErrorCode::NoQuorum, "lost leadership");
    let id = match &a[0] {
        Action::Propose { id, .. } => *id,
        other => panic!("{other:?}"),
    };
    assert!(core.handle(Event::ProposalFailed { id: id + 1, error: e.clone() }).is_empty(), "not in flight");
    let r = core.handle(Event::ProposalFailed { id, error: e.clone() });
    assert_eq!(command_replies(&r), vec![(to(1, 1), Err(e))]);
    assert_eq!(proposals(&r).len(), 1, "the next command is proposed");
}

fn apply_n(core: &mut MonCore, n: u32) {
    for i in 0..n {
        let a =
            cmd(core, to(9, u64::from(i)), Command::CreateOsd { id: None, host: "h".into(), weight: Weight::ONE }, 0);
        commit_all(core, a);
    }
}

fn map_reply(actions: &[Action]) -> MapUpdate {
    actions
        .iter()
        .find_map(|a| match a {
            Action::Reply { reply: Reply::Map(m), .. } => Some((**m).clone()),
            _ => None,
        })
        .expect("a map reply")
}

#[test]
fn subscribers_catch_up_with_incrementals_or_the_full_map() {
    let mut cfg = CoreConfig::new(0);
    cfg.history_len = 5;
    let mut core = MonCore::standalone(cfg, map());
    apply_n(&mut core, 8); // epochs 2..=9, history holds 5..=9
    assert_eq!(core.map().epoch, 9);

    let m = map_reply(&core.handle(Event::GetMap { to: to(2, 1), have_epoch: 0, subscribe: false }));
    assert_eq!(m.full.as_ref().map(|m| m.epoch), Some(9));

    let m = map_reply(&core.handle(Event::GetMap { to: to(2, 2), have_epoch: 6, subscribe: false }));
    assert!(m.full.is_none());
    assert_eq!(m.incrementals.iter().map(|i| i.epoch).collect::<Vec<_>>(), vec![7, 8, 9]);

    // Epoch 4 is exactly one before the oldest kept incremental (5): still reachable.
    let m = map_reply(&core.handle(Event::GetMap { to: to(2, 3), have_epoch: 4, subscribe: false }));
    assert_eq!(m.incrementals.len(), 5);
    let m = map_reply(&core.handle(Event::GetMap { to: to(2, 4), have_epoch: 3, subscribe: false }));
    assert!(m.full.is_some() && m.incrementals.is_empty());

    let m = map_reply(&core.handle(Event::GetMap { to: to(2, 5), have_epoch: 9, subscribe: true }));
    assert!(m.full.is_none() && m.incrementals.is_empty());
    assert_eq!(core.subscribers(), 1);

    // A subscriber replaying what it got ends with the same map.
    let mut mine = map();
    let m = map_reply(&core.handle(Event::GetMap { to: to(3, 1), have_epoch: 0, subscribe: true }));
    mine = m.full.unwrap_or(mine);
    let a = cmd(&mut core, to(1, 1), Command::OsdOut { id: OsdId(2) }, 0);
    let all = commit_all(&mut core, a);
    let pushes: Vec<_> = all
        .iter()
        .filter_map(|a| match a {
            Action::Push { conns, update } => Some((conns.clone(), update.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(pushes.len(), 1);
    assert_eq!(pushes[0].0, vec![2, 3]);
    for inc in &pushes[0].1.incrementals {
        mine.apply_incremental(inc).unwrap();
    }
    assert_eq!(mine.epoch, 10);
    assert!(!mine.osds[&OsdId(2)].in_cluster);

    core.handle(Event::Closed { conn: 2 });
    assert_eq!(core.subscribers(), 1);
}

fn boot(core: &mut MonCore, id: u32, now_ms: u64) {
    let addr: SocketAddr = format!("127.0.0.1:{}", 7000 + id).parse().unwrap();
    let a = cmd(core, to(5, u64::from(id)), Command::OsdBoot { id: OsdId(id), addr }, now_ms);
    let r = commit_all(core, a);
    assert!(command_replies(&r)[0].1.is_ok());
}

#[test]
fn silent_osd_is_marked_down_once_after_the_grace() {
    let mut core = MonCore::standalone(CoreConfig::new(0), map());
    create_osds(&mut core, 2);
    boot(&mut core, 0, 1000);
    boot(&mut core, 1, 1000);

    // osd.1 keeps reporting, osd.0 does not.
    let mut downs = Vec::new();
    for t in (1000..=9000).step_by(500) {
        core.handle(Event::OsdStats { stats: stats(1), now_ms: t, forwarded: false });
        let a = core.handle(Event::Tick { now_ms: t });
        downs.extend(proposals(&a));
        if t == 6500 {
            assert_eq!(downs, vec![Change::OsdDown { id: OsdId(0) }], "proposed at grace, not before");
        }
    }
    assert_eq!(downs, vec![Change::OsdDown { id: OsdId(0) }], "proposed once while in flight");
    let r = core.handle(Event::Applied { index: 100, change: Change::OsdDown { id: OsdId(0) }, session: None });
    assert!(proposals(&r).is_empty());
    assert!(!core.map().osds[&OsdId(0)].up);
    assert!(core.map().osds[&OsdId(1)].up);
    for t in (9000..=20000).step_by(500) {
        core.handle(Event::OsdStats { stats: stats(1), now_ms: t, forwarded: false });
        assert!(proposals(&core.handle(Event::Tick { now_ms: t })).is_empty(), "a down OSD is not re-proposed");
    }
    assert!(core.osd_stats(OsdId(1)).is_some());

    // It boots again: a fresh grace from the boot.
    boot(&mut core, 0, 20000);
    assert!(proposals(&core.handle(Event::Tick { now_ms: 24000 })).is_empty());
    assert_eq!(proposals(&core.handle(Event::Tick { now_ms: 25000 })), vec![Change::OsdDown { id: OsdId(0) }]);
}

#[test]
fn a_down_osd_is_marked_out_after_the_down_out_interval_unless_noout() {
    let mut core = MonCore::standalone(CoreConfig::new(0), map());
    create_osds(&mut core, 2);
    boot(&mut core, 0, 0);
    boot(&mut core, 1, 0);
    let set = |core: &mut MonCore, command: Command, now_ms: u64| {
        let a = cmd(core, to(9, 1), command, now_ms);
        let r = commit_all(core, a);
        assert!(command_replies(&r)[0].1.is_ok(), "{:?}", command_replies(&r));
    };
    let bad = cmd(&mut core, to(9, 2), Command::ConfigSet { key: "no_such_key".into(), value: Some(1) }, 0);
    let e = command_replies(&bad)[0].1.clone().unwrap_err();
    assert!(e.code == ErrorCode::Invalid && e.message.contains("no_such_key"), "{e:?}");
    let key = shoal_map::config::DOWN_OUT_INTERVAL_SECS.to_string();
    set(&mut core, Command::ConfigSet { key, value: Some(10) }, 0);
    set(&mut core, Command::SetFlag { flag: "noout".into(), on: true }, 0);

    // osd.1 keeps reporting; osd.0 goes silent, is marked down at the grace (5 s), and with
    // noout stays in however long it is down.
    let mut changes = Vec::new();
    for t in (500..=40_000).step_by(500) {
        core.handle(Event::OsdStats { stats: stats(1), now_ms: t, forwarded: false });
        let a = core.handle(Event::Tick { now_ms: t });
        changes.extend(proposals(&commit_all(&mut core, a)));
    }
    assert_eq!(changes, vec![Change::OsdDown { id: OsdId(0) }]);
    assert!(core.map().osds[&OsdId(0)].in_cluster);

    // Without the flag the interval counts from when this monitor saw it down: out once, 10 s on.
    set(&mut core, Command::SetFlag { flag: "noout".into(), on: false }, 40_000);
    let mut outs = Vec::new();
    for t in (40_500..=80_000).step_by(500) {
        core.handle(Event::OsdStats { stats: stats(1), now_ms: t, forwarded: false });
        let a = core.handle(Event::Tick { now_ms: t });
        outs.extend(proposals(&commit_all(&mut core, a)).into_iter().map(|c| (t, c)));
    }
    assert_eq!(outs.len(), 1, "{outs:?}");
    assert_eq!(outs[0].1, Change::OsdIn { id: OsdId(0), in_cluster: false });
    assert!(!core.map().osds[&OsdId(0)].in_cluster && core.map().osds[&OsdId(1)].in_cluster);
}

#[test]
fn stats_of_unknown_osds_are_not_kept() {
    let mut core = MonCore::standalone(CoreConfig::new(0), map());
    core.handle(Event::OsdStats { stats: stats(42), now_ms: 1, forwarded: false });
    assert!(core.osd_stats(OsdId(42)).is_none());
}

#[test]
fn non_leader_forwards_commands_and_stats_and_serves_maps() {
    let mut core = MonCore::new(CoreConfig::new(0), map(), SessionTable::default(), 0);
    core.handle(Event::Leadership { leader: Some(1), ready: false, quorum: vec![1, 0], now_ms: 0 });
    // Applied entries from the leader still update the map.
    core.handle(Event::Applied {
        index: 1,
        change: Change::AddOsd { id: OsdId(0), host: "h".into(), weight: Weight::ONE },
        session: None,
    });
    assert_eq!(core.map().epoch, 2);

    let a = cmd(&mut core, to(1, 1), Command::OsdIn { id: OsdId(0) }, 0);
    assert!(matches!(&a[..], [Action::Forward { leader: 1, to: t, .. }] if *t == to(1, 1)));

    let a = core.handle(Event::Command {
        to: Some(to(1, 2)),
        command: Command::OsdIn { id: OsdId(0) },
        session: None,
        forwarded: true,
        now_ms: 0,
    });
    let e = command_replies(&a)[0].1.clone().unwrap_err();
    assert_eq!(e.code, ErrorCode::NoQuorum);
    assert!(e.message.contains("mon.1"), "{}", e.message);

    let a = core.handle(Event::OsdStats { stats: stats(0), now_ms: 5, forwarded: false });
    assert!(matches!(&a[..], [Action::ForwardStats { leader: 1, .. }]));
    assert!(core.handle(Event::OsdStats { stats: stats(0), now_ms: 6, forwarded: true }).is_empty());

    // No heartbeat judgement on a follower.
    core.handle(Event::Applied {
        index: 2,
        change: Change::OsdUp { id: OsdId(0), addr: "127.0.0.1:1".parse().unwrap() },
        session: None,
    });
    assert!(core.handle(Event::Tick { now_ms: 100_000 }).is_empty());

    let m = map_reply(&core.handle(Event::GetMap { to: to(3, 1), have_epoch: 0, subscribe: true }));
    assert_eq!(m.full.unwrap().epoch, 3);
    // A client's status request goes to the leader, which alone hears every OSD (this follower
    // knows only the reports sent to it); its own view is the fallback if the leader is silent.
    let status = core.handle(Event::GetStatus { to: to(3, 2), from_mon: false });
    match &status[..] {
        [Action::ForwardStatus { to: t, leader: 1, local: s }] if *t == to(3, 2) => {
            assert_eq!((s.epoch, s.leader, s.quorum.clone(), s.osd_stats.len()), (3, Some(1), vec![1, 0], 1));
        }
        other => panic!("{other:?}"),
    }
    // Another monitor's request is answered here: one hop only.
    let status = core.handle(Event::GetStatus { to: to(3, 3), from_mon: true });
    match &status[..] {
        [Action::Reply { reply: Reply::Status(s), .. }] => assert_eq!(s.leader, Some(1)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn commands_wait_for_a_leader_then_time_out() {
    let mut cfg = CoreConfig::new(0);
    cfg.no_leader_wait_ms = 1000;
    let mut core = MonCore::new(cfg, map(), SessionTable::default(), 0);
    let create = Command::CreateOsd { id: None, host: "h".into(), weight: Weight::ONE };
    assert!(cmd(&mut core, to(1, 1), create.clone(), 100).is_empty());
    assert!(core.handle(Event::Tick { now_ms: 500 }).is_empty());
    // Elected in time: the waiting command is proposed.
    let a = core.handle(Event::Leadership { leader: Some(0), ready: true, quorum: vec![0], now_ms: 600 });
    assert_eq!(proposals(&a).len(), 1);

    let mut core =
        MonCore::new(CoreConfig { no_leader_wait_ms: 1000, ..CoreConfig::new(0) }, map(), SessionTable::default(), 0);
    assert!(cmd(&mut core, to(1, 1), create.clone(), 100).is_empty());
    let a = core.handle(Event::Tick { now_ms: 1100 });
    let e = command_replies(&a)[0].1.clone().unwrap_err();
    assert_eq!(e.code, ErrorCode::NoQuorum);
    assert!(e.message.contains("no leader"), "{}", e.message);

    // Leader known elsewhere: queued commands are forwarded.
    let mut core = MonCore::new(CoreConfig::new(0), map(), SessionTable::default(), 0);
    assert!(cmd(&mut core, to(1, 1), create, 100).is_empty());
    let a = core.handle(Event::Leadership { leader: Some(2), ready: false, quorum: vec![], now_ms: 200 });
    assert!(matches!(&a[..], [Action::Forward { leader: 2, .. }]));
}

#[test]
fn elected_but_not_ready_leader_holds_commands() {
    let mut core = MonCore::new(CoreConfig::new(0), map(), SessionTable::default(), 0);
    core.handle(Event::Leadership { leader: Some(0), ready: false, quorum: vec![0], now_ms: 0 });
    let create = Command::CreateOsd { id: None, host: "h".into(), weight: Weight::ONE };
    assert!(cmd(&mut core, to(1, 1), create, 10).is_empty(), "not forwarded to itself, not proposed");
    let a = core.handle(Event::Leadership { leader: Some(0), ready: true, quorum: vec![0], now_ms: 20 });
    assert_eq!(proposals(&a).len(), 1);
}

fn stats_used(osd: u32, used_permille: u64) -> OsdStats {
    let mut s = stats(osd);
    s.capacity_bytes = 1_000_000;
    s.used_bytes = used_permille * 1000;
    s
}

#[test]
fn full_flag_follows_reports_with_hysteresis_and_one_proposal_per_crossing() {
    let mut core = MonCore::standalone(CoreConfig::new(0), map());
    create_osds(&mut core, 2);
    boot(&mut core, 0, 0);
    boot(&mut core, 1, 0);
    let report = |core: &mut MonCore, osd: u32, permille: u64, t: u64| {
        core.handle(Event::OsdStats { stats: stats_used(osd, permille), now_ms: t, forwarded: false })
    };
    // Nearly full is not full.
    assert!(proposals(&report(&mut core, 1, 949, 10)).is_empty());
    // Crossing 95% proposes once, however many reports arrive while the change is in flight.
    let first = report(&mut core, 1, 960, 20);
    assert_eq!(proposals(&first), vec![Change::OsdFull { id: OsdId(1), full: true }]);
    assert!(proposals(&report(&mut core, 1, 990, 30)).is_empty(), "already in flight");
    commit_all(&mut core, first);
    assert!(core.map().osds[&OsdId(1)].full);
    assert!(!core.map().osds[&OsdId(0)].full);
    // Between the two thresholds a full OSD stays full (no flapping).
    assert!(proposals(&report(&mut core, 1, 940, 40)).is_empty());
    assert!(proposals(&report(&mut core, 1, 930, 50)).is_empty());
    let clear = report(&mut core, 1, 929, 60);
    assert_eq!(proposals(&clear), vec![Change::OsdFull { id: OsdId(1), full: false }]);
    commit_all(&mut core, clear);
    assert!(!core.map().osds[&OsdId(1)].full);
    // A store that reports no capacity is never flagged.
    let mut empty = stats(0);
    empty.capacity_bytes = 0;
    empty.used_bytes = 5;
    assert!(proposals(&core.handle(Event::OsdStats { stats: empty, now_ms: 70, forwarded: false })).is_empty());
}

/// Activation records of every PG whose primary is `by` among `pgs`, as its primary would send
/// them for a first activation.
fn activations(core: &MonCore, by: u32, pgs: &[PgId]) -> Command {
    let map = core.map();
    let records = pgs
        .iter()
        .map(|pg| {
            let members = map.pg_osds(*pg).unwrap();
            assert_eq!(members[0], OsdId(by), "{pg} has another primary");
            let proposal =
                ActivationProposal { pg: *pg, prior_epoch: 0, activated_at: map.epoch, members, holders: Vec::new() };
            shoal_map::ActivationRequest { proposal, interval: map.pg_interval(*pg).unwrap() }
        })
        .collect();
    Command::PgActivated { by: OsdId(by), records }
}

#[test]
fn pg_commands_waiting_behind_a_proposal_are_merged_into_one_epoch() {
    let mut core = MonCore::standalone(CoreConfig::new(0), map());
    create_osds(&mut core, 3);
    for id in 0..3 {
        boot(&mut core, id, 0);
    }
    let create = Command::CreatePool { name: "p".into(), size: 2, min_size: None, pg_num: 16, max_object_bytes: None };
    let a = cmd(&mut core, to(1, 1), create, 0);
    commit_all(&mut core, a);
    let pool = *core.map().pools.keys().next().unwrap();
    // PGs by primary, two of each OSD's.
    let mut by_primary: BTreeMap<u32, Vec<PgId>> = BTreeMap::new();
    for seed in 0..16 {
        let pg = PgId { pool, seed };
        by_primary.entry(core.map().pg_osds(pg).unwrap()[0].0).or_default().push(pg);
    }
    assert!(by_primary.len() >= 2 && by_primary.values().all(|v| v.len() >= 2), "{by_primary:?}");
    let (x, y) = {
        let mut k = by_primary.keys();
        (*k.next().unwrap(), *k.next().unwrap())
    };
    let (xs, ys) = (&by_primary[&x], &by_primary[&y]);

    // A proposal in flight (not yet committed), then four commands queue behind it.
    let c = activations(&core, x, &xs[..1]);
    let first = cmd(&mut core, to(2, 1), c, 0);
    assert_eq!(proposals(&first).len(), 1);
    for (i, c) in [
        activations(&core, y, &ys[..1]),
        activations(&core, x, &xs[1..2]),
        Command::SetFlag { flag: "noout".into(), on: true },
        activations(&core, y, &ys[1..2]),
    ]
    .into_iter()
    .enumerate()
    {
        let a = cmd(&mut core, to(3, i as u64), c, 0);
        assert!(proposals(&a).is_empty() && command_replies(&a).is_empty(), "queued behind the proposal");
    }
    let epoch0 = core.map().epoch;
    let all = commit_all(&mut core, first);
    let changes = proposals(&all);
    // The first proposal, then the two activations merged into one, then the flag, then the last
    // activation: it waited behind a command of another kind and was not moved ahead of it.
    assert_eq!(changes.len(), 4, "{changes:?}");
    match &changes[1] {
        Change::PgActivated { records } => {
            let pgs: Vec<PgId> = records.iter().map(|r| r.pg).collect();
            assert_eq!(pgs, vec![ys[0], xs[1]]);
        }
        other => panic!("expected merged activations, got {other:?}"),
    }
    assert!(matches!(changes[2], Change::Flag { on: true, .. }), "{:?}", changes[2]);
    let replies = command_replies(&all);
    let epoch_of = |t: ReplyTo| replies.iter().find(|r| r.0 == t).map(|r| r.1.clone().unwrap());
    assert_eq!(epoch_of(to(2, 1)), Some(epoch0 + 1));
    assert_eq!(epoch_of(to(3, 0)), Some(epoch0 + 2), "merged: both answered with the same epoch");
    assert_eq!(epoch_of(to(3, 1)), Some(epoch0 + 2));
    assert_eq!(epoch_of(to(3, 2)), Some(epoch0 + 3));
    assert_eq!(epoch_of(to(3, 3)), Some(epoch0 + 4));
    // Each PG's record carries the epoch of the change that recorded it.
    assert_eq!(core.map().pg_active[&ys[0]].epoch, epoch0 + 2);
    assert_eq!(core.map().pg_active[&xs[1]].epoch, epoch0 + 2);
}

/// A report from `osd` with its map at `epoch`, naming `unreachable`.
fn report(core: &mut MonCore, osd: u32, epoch: u64, unreachable: &[u32], now_ms: u64) {
    let mut s = stats(osd);
    s.map_epoch = epoch;
    s.unreachable_peers = unreachable.iter().map(|o| OsdId(*o)).collect();
    core.handle(Event::OsdStats { stats: s, now_ms, forwarded: false });
}

/// `n` OSDs on hosts h0..h{n-1}, all booted at `now_ms`; returns the map's epoch.
fn cluster_of(core: &mut MonCore, n: u32, now_ms: u64) -> u64 {
    create_osds(core, n);
    for i in 0..n {
        boot(core, i, now_ms);
    }
    core.map().epoch
}

#[test]
fn an_osd_is_marked_down_once_peers_on_two_hosts_report_it_unreachable() {
    let mut core = MonCore::standalone(CoreConfig::new(0), map());
    let epoch = cluster_of(&mut core, 4, 0);
    // osd.3 is cut off from its peers: it names them all, they name it. Its own reports name
    // three OSDs but come from one host: never enough.
    report(&mut core, 3, epoch, &[0, 1, 2], 100);
    report(&mut core, 0, epoch, &[3], 100);
    for osd in 0..4 {
        report(&mut core, osd, epoch, if osd == 3 { &[0, 1, 2] } else { &[] }, 200);
    }
    assert!(proposals(&core.handle(Event::Tick { now_ms: 300 })).is_empty(), "one reporter's host is not enough");
    report(&mut core, 0, epoch, &[3], 400);
    report(&mut core, 1, epoch, &[3], 400);
    assert_eq!(proposals(&core.handle(Event::Tick { now_ms: 500 })), vec![Change::OsdDown { id: OsdId(3) }]);
    assert!(proposals(&core.handle(Event::Tick { now_ms: 600 })).is_empty(), "proposed once while in flight");
}

#[test]
fn two_osds_cut_off_from_everyone_go_down_and_their_reports_of_the_rest_do_not_count() {
    let mut core = MonCore::standalone(CoreConfig::new(0), map());
    let epoch = cluster_of(&mut core, 5, 0);
    // osd.0 and osd.1 reach nobody (not even each other); the three others reach each other.
    report(&mut core, 0, epoch, &[1, 2, 3, 4], 100);
    report(&mut core, 1, epoch, &[0, 2, 3, 4], 100);
    for osd in 2..5 {
        report(&mut core, osd, epoch, &[0, 1], 100);
    }
    // One proposal at a time: the second is queued behind the first.
    let a = core.handle(Event::Tick { now_ms: 200 });
    let downs = proposals(&commit_all(&mut core, a));
    assert_eq!(downs, vec![Change::OsdDown { id: OsdId(0) }, Change::OsdDown { id: OsdId(1) }]);
    assert!((2..5).all(|o| core.map().osds[&OsdId(o)].up));
    assert!(proposals(&core.handle(Event::Tick { now_ms: 300 })).is_empty());
}

#[test]
fn stale_reports_and_reports_about_an_earlier_boot_do_not_count() {
    let mut cfg = CoreConfig::new(0);
    // Silence is not what this test is about.
    cfg.osd_grace_ms = u64::MAX / 2;
    let window = cfg.failure_report_window_ms;
    let mut core = MonCore::standalone(cfg, map());
    let epoch = cluster_of(&mut core, 3, 0);
    report(&mut core, 0, epoch, &[2], 100);
    report(&mut core, 1, epoch, &[2], 100);
    // Too late: the reports are older than the window (the reporters stopped naming osd.2
    // without the monitor hearing it, say).
    assert!(proposals(&core.handle(Event::Tick { now_ms: 100 + window + 1 })).is_empty());

    // Reports made with a map from before osd.2's latest boot name an earlier incarnation.
    let t = 200 + window;
    core.handle(Event::Applied { index: 50, change: Change::OsdDown { id: OsdId(2) }, session: None });
    boot(&mut core, 2, t);
    let booted = core.map().osds[&OsdId(2)].up_from;
    report(&mut core, 0, booted - 1, &[2], t);
    report(&mut core, 1, booted - 1, &[2], t);
    assert!(proposals(&core.handle(Event::Tick { now_ms: t + 10 })).is_empty());
    report(&mut core, 0, booted, &[2], t + 20);
    report(&mut core, 1, booted, &[2], t + 20);
    assert_eq!(proposals(&core.handle(Event::Tick { now_ms: t + 30 })), vec![Change::OsdDown { id: OsdId(2) }]);
}

/// A non-repeatable command resent with its session (the client lost the answer) is answered with
/// the first attempt's epoch and proposed once: whether the resend arrives after the first was
/// applied or while it is still in flight, and on a monitor built from a snapshot of the state
/// (a new leader). Without a session the repeat is refused as it always was (decision 0072).
#[test]
fn a_resent_command_with_its_session_is_applied_once_and_answered_with_the_first_epoch() {
    let mut core = MonCore::standalone(CoreConfig::new(0), map());
    create_osds(&mut core, 1);
    let pool = |name: &str| Command::CreatePool {
        name: name.into(),
        size: 1,
        min_size: None,
        pg_num: 8,
        max_object_bytes: None,
    };
    let s1 = CommandSession { client: 77, seq: 1 };

    // The resend arrives while the first attempt is in flight: it waits behind it.
    let first = cmd_in(&mut core, to(1, 1), pool("a"), s1);
    assert_eq!(proposals(&first).len(), 1);
    let again = cmd_in(&mut core, to(2, 1), pool("a"), s1);
    assert!(again.is_empty(), "{again:?}");
    let all = commit_all(&mut core, first);
    let replies = command_replies(&all);
    assert_eq!(proposals(&all).len(), 1, "{all:?}");
    let epoch = replies.iter().find(|(t, _)| *t == to(1, 1)).unwrap().1.clone().unwrap();
    assert_eq!(replies.iter().find(|(t, _)| *t == to(2, 1)).unwrap().1.clone().unwrap(), epoch);
    assert_eq!(core.map().pools.len(), 1);

    // After it was applied, on this monitor and on one built from its state.
    let late = cmd_in(&mut core, to(3, 1), pool("a"), s1);
    assert!(proposals(&late).is_empty());
    assert_eq!(command_replies(&late)[0].1.clone().unwrap(), epoch);
    let snapshot = core.sessions().clone();
    let mut heir = MonCore::new(CoreConfig::new(1), core.map().clone(), snapshot, core.applied_index());
    heir.handle(Event::Leadership { leader: Some(1), ready: true, quorum: vec![1], now_ms: 0 });
    let late = cmd_in(&mut heir, to(4, 1), pool("a"), s1);
    assert!(proposals(&late).is_empty());
    assert_eq!(command_replies(&late)[0].1.clone().unwrap(), epoch);

    // Another command of the same client, and the same command without a session.
    let next = cmd_in(&mut core, to(5, 1), pool("b"), CommandSession { client: 77, seq: 2 });
    let next = command_replies(&commit_all(&mut core, next))[0].1.clone().unwrap();
    assert!(next > epoch);
    let e = command_replies(&cmd(&mut core, to(6, 1), pool("a"), 0))[0].1.clone().unwrap_err();
    assert_eq!(e.code, ErrorCode::Exists);
    // The same sequence number from another client is another command.
    let e = command_replies(&cmd_in(&mut core, to(7, 1), pool("a"), CommandSession { client: 78, seq: 1 }))[0]
        .1
        .clone()
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Exists);
}
