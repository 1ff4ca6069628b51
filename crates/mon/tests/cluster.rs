//! Real monitors on loopback, spoken to through shoal-net: one monitor end to end, three with a
//! leader failure, restarts from the data directory.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal_map::{ClusterMap, Command, CommandSession, OsdId, Weight};
use shoal_mon::{MonConfig, mkfs, run_with_listener};
use shoal_net::{ClientConfig, Connection, Key, Keyring, NetError};
use shoal_proto::mon::{GetMap, GetStatus, MapUpdate, MonCommand, MonCommandReply, OsdStats, StatusReply};
use shoal_proto::{ErrorCode, Message, RemoteError};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

fn keyring() -> Arc<Keyring> {
    let mut k = Keyring::new();
    for e in ["mon.0", "mon.1", "mon.2", "client.admin", "osd.0"] {
        k.insert(e, Key::generate());
    }
    Arc::new(k)
}

struct Mon {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Mon {
    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        tokio::time::timeout(Duration::from_secs(5), self.task).await.expect("monitor stops").unwrap().unwrap();
    }
}

fn start(dir: &Path, rank: u32, listener: TcpListener, mons: &BTreeMap<u32, SocketAddr>, keys: &Arc<Keyring>) -> Mon {
    let cfg = MonConfig::new(rank, dir, mons[&rank], mons.clone(), keys.clone());
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(run_with_listener(cfg, listener, async move {
        let _ = rx.await;
    }));
    Mon { stop: Some(tx), task }
}

async fn connect(addr: SocketAddr, keys: &Keyring, entity: &str) -> Connection {
    let cfg = ClientConfig::new(entity, keys.get(entity).unwrap().clone());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match Connection::connect(addr, &cfg).await {
            Ok(c) => return c,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => panic!("connect {addr}: {e}"),
        }
    }
}

async fn command(c: &Connection, command: Command) -> Result<u64, RemoteError> {
    command_in(c, command, None).await
}

async fn command_in(c: &Connection, command: Command, session: Option<CommandSession>) -> Result<u64, RemoteError> {
    let f = c.call(MonCommand::TYPE, shoal_proto::encode(&MonCommand { command, session }, vec![])).await.unwrap();
    shoal_proto::decode_frame::<MonCommandReply>(f).unwrap().0.result
}

/// Retries `cmd` until it succeeds (leader elections in between), for at most `timeout`.
async fn command_retry(c: &Connection, cmd: Command, timeout: Duration) -> u64 {
    let deadline = Instant::now() + timeout;
    loop {
        match command(c, cmd.clone()).await {
            Ok(e) => return e,
            Err(e) if e.code == ErrorCode::NoQuorum && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{cmd:?}: {e:?}"),
        }
    }
}

async fn get_map(c: &Connection, have_epoch: u64, subscribe: bool) -> MapUpdate {
    let f = c.call(GetMap::TYPE, shoal_proto::encode(&GetMap { have_epoch, subscribe }, vec![])).await.unwrap();
    shoal_proto::decode_frame::<MapUpdate>(f).unwrap().0
}

async fn full_map(c: &Connection) -> ClusterMap {
    get_map(c, 0, false).await.full.expect("a full map")
}

async fn status(c: &Connection) -> StatusReply {
    let f = c.call(GetStatus::TYPE, shoal_proto::encode(&GetStatus, vec![])).await.unwrap();
    shoal_proto::decode_frame::<StatusReply>(f).unwrap().0
}

async fn bind() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    (l, a)
}

fn create_osd(host: &str) -> Command {
    Command::CreateOsd { id: None, host: host.into(), weight: Weight::ONE }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_monitor_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = keyring();
    let (listener, addr) = bind().await;
    let mons = BTreeMap::from([(0, addr)]);
    mkfs(tmp.path(), 0, "fsid-one", &mons).unwrap();
    assert!(mkfs(tmp.path(), 0, "fsid-one", &mons).unwrap_err().to_string().contains("already holds a monitor"));

    let t0 = Instant::now();
    let mon = start(tmp.path(), 0, listener, &mons, &keys);
    let c = connect(addr, &keys, "client.admin").await;
    let epoch = command_retry(&c, create_osd("h0"), Duration::from_secs(3)).await;
    let first_ms = t0.elapsed().as_secs_f64() * 1000.0;
    eprintln!("first command accepted {first_ms:.1} ms after run started (epoch {epoch})");
    assert_eq!(epoch, 2);
    assert!(first_ms < 1000.0, "{first_ms} ms");

    for h in ["h1", "h2"] {
        command(&c, create_osd(h)).await.unwrap();
    }
    for i in 0..3 {
        let addr: SocketAddr = format!("127.0.0.1:{}", 7000 + i).parse().unwrap();
        command(&c, Command::OsdBoot { id: OsdId(i), addr }).await.unwrap();
    }
    let create =
        Command::CreatePool { name: "rbd".into(), size: 3, min_size: None, pg_num: 16, max_object_bytes: None };
    let epoch = command(&c, create.clone()).await.unwrap();
    assert_eq!(epoch, 8);
    let e = command(&c, create).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Exists);
    assert!(e.message.contains("rbd"));
    let e = command(&c, Command::RemovePool { name: "nope".into() }).await.unwrap_err();
    assert_eq!((e.code, e.message.contains("nope")), (ErrorCode::NotFound, true));

    let map = full_map(&c).await;
    assert_eq!((map.epoch, map.fsid.as_str(), map.osds.len(), map.pools.len()), (8, "fsid-one", 3, 1));

    // Subscribe on a second connection, at the current epoch: the next change is pushed.
    let sub = connect(addr, &keys, "client.admin").await;
    let mut pushes = sub.take_pushes().unwrap();
    let up = get_map(&sub, 6, true).await;
    assert_eq!(up.incrementals.iter().map(|i| i.epoch).collect::<Vec<_>>(), vec![7, 8]);
    command(&c, Command::OsdOut { id: OsdId(2) }).await.unwrap();
    let push = tokio::time::timeout(Duration::from_secs(2), pushes.recv()).await.unwrap().unwrap();
    assert_eq!(push.request_id, 0);
    let (push, _) = shoal_proto::decode_frame::<MapUpdate>(push).unwrap();
    assert_eq!(push.incrementals.len(), 1);
    assert_eq!(push.incrementals[0].epoch, 9);

    // OSD reports are acknowledged and show in the status.
    let osd = connect(addr, &keys, "osd.0").await;
    let stats = OsdStats {
        osd: OsdId(0),
        map_epoch: 9,
        pg_states: vec![("active+clean".into(), 16)],
        objects: 1,
        used_bytes: 4096,
        capacity_bytes: 1 << 30,
        read_ops_per_s: 0.0,
        write_ops_per_s: 1.0,
        read_bytes_per_s: 0.0,
        write_bytes_per_s: 4096.0,
        degraded_objects: 0,
        misplaced_objects: 0,
        unfound_objects: 0,
        recovery_objects_per_s: 0.0,
        stray_pgs: 0,
        unreachable_peers: Vec::new(),
    };
    let ack = osd.call(OsdStats::TYPE, shoal_proto::encode(&stats, vec![])).await.unwrap();
    assert!(ack.payload.is_empty());
    let mut wrong = stats.clone();
    wrong.osd = OsdId(1);
    let err = osd.call(OsdStats::TYPE, shoal_proto::encode(&wrong, vec![])).await.unwrap_err();
    assert!(matches!(err, NetError::Remote { .. }), "{err:?}");
    let s = status(&c).await;
    assert_eq!((s.epoch, s.leader, s.quorum.clone()), (9, Some(0), vec![0]));
    assert_eq!(s.osd_stats, vec![stats]);

    // Malformed requests get an error; the connection keeps working.
    let err = c.call(MonCommand::TYPE, vec![1, 2, 3]).await.unwrap_err();
    assert!(matches!(&err, NetError::Remote { reason } if reason.contains("too short")), "{err:?}");
    let err = c.call(shoal_mon::raft::MSG_APPEND, shoal_proto::encode(&1u8, vec![])).await.unwrap_err();
    assert!(matches!(&err, NetError::Remote { reason } if reason.contains("client.admin")), "{err:?}");
    let err = c.call(40, vec![]).await.unwrap_err();
    assert!(matches!(&err, NetError::Remote { reason } if reason.contains("40")), "{err:?}");
    assert_eq!(full_map(&c).await.epoch, 9);

    drop((c, sub, osd));
    mon.stop().await;

    // Restart from the data directory: same map, and it leads again quickly.
    let (listener, addr) = bind().await;
    let mons = BTreeMap::from([(0, addr)]);
    let t0 = Instant::now();
    let mon = start(tmp.path(), 0, listener, &mons, &keys);
    let c = connect(addr, &keys, "client.admin").await;
    let epoch = command_retry(&c, Command::OsdIn { id: OsdId(2) }, Duration::from_secs(3)).await;
    eprintln!("restarted monitor accepted a command after {:.1} ms", t0.elapsed().as_secs_f64() * 1000.0);
    assert_eq!(epoch, 10);
    let map = full_map(&c).await;
    assert_eq!(map.pools.values().next().unwrap().name, "rbd");
    assert_eq!(map.osds.len(), 3);
    mon.stop().await;
}

async fn leader_of(conns: &[(u32, Connection)], timeout: Duration) -> u32 {
    let deadline = Instant::now() + timeout;
    loop {
        for (_, c) in conns {
            if let Some(l) = status(c).await.leader
                && conns.iter().any(|(r, _)| *r == l)
            {
                return l;
            }
        }
        assert!(Instant::now() < deadline, "no leader elected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn converge(conns: &[(u32, Connection)], epoch: u64, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let mut epochs = Vec::new();
        for (_, c) in conns {
            epochs.push(full_map(c).await.epoch);
        }
        if epochs.iter().all(|e| *e == epoch) {
            return;
        }
        assert!(Instant::now() < deadline, "monitors at epochs {epochs:?}, want {epoch}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Three monitors: made under `root`, started, and a `client.admin` connection to each. Returns
/// the running monitors by rank, the connections, the addresses and the data directories.
async fn three_mons(
    root: &Path,
    fsid: &str,
    keys: &Arc<Keyring>,
) -> (BTreeMap<u32, Mon>, Vec<(u32, Connection)>, BTreeMap<u32, SocketAddr>, Vec<std::path::PathBuf>) {
    let mut listeners = BTreeMap::new();
    let mut mons = BTreeMap::new();
    for r in 0..3 {
        let (l, a) = bind().await;
        listeners.insert(r, l);
        mons.insert(r, a);
    }
    let dirs: Vec<_> = (0..3).map(|r| root.join(format!("mon{r}"))).collect();
    for r in 0..3u32 {
        mkfs(&dirs[r as usize], r, fsid, &mons).unwrap();
    }
    let mut running = BTreeMap::new();
    for (r, l) in listeners {
        running.insert(r, start(&dirs[r as usize], r, l, &mons, keys));
    }
    let mut conns = Vec::new();
    for r in 0..3u32 {
        conns.push((r, connect(mons[&r], keys, "client.admin").await));
    }
    (running, conns, mons, dirs)
}

/// Starts again the three monitors of [`three_mons`] (all stopped) at their addresses, with a
/// `client.admin` connection to each.
async fn restart_three(
    dirs: &[std::path::PathBuf],
    mons: &BTreeMap<u32, SocketAddr>,
    keys: &Arc<Keyring>,
) -> (BTreeMap<u32, Mon>, Vec<(u32, Connection)>) {
    let mut running = BTreeMap::new();
    for r in 0..3u32 {
        let listener = TcpListener::bind(mons[&r]).await.unwrap();
        running.insert(r, start(&dirs[r as usize], r, listener, mons, keys));
    }
    let mut conns = Vec::new();
    for r in 0..3u32 {
        conns.push((r, connect(mons[&r], keys, "client.admin").await));
    }
    (running, conns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_monitors_fail_over_and_recover() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = keyring();
    let t0 = Instant::now();
    let (mut running, mut conns, mons, dirs) = three_mons(tmp.path(), "fsid-three", &keys).await;
    // Commands sent to every monitor: followers forward them to the leader.
    let mut epoch = 0;
    for (i, (_, c)) in conns.iter().enumerate() {
        epoch = command_retry(c, create_osd(&format!("h{i}")), Duration::from_secs(5)).await;
    }
    eprintln!("three monitors: third command done {:.0} ms after start", t0.elapsed().as_secs_f64() * 1000.0);
    assert_eq!(epoch, 4);
    converge(&conns, 4, Duration::from_secs(5)).await;
    let leader = leader_of(&conns, Duration::from_secs(5)).await;
    let s = status(&conns[leader as usize].1).await;
    assert_eq!(s.quorum, vec![0, 1, 2]);

    // Kill the leader; the other two elect a new one and keep accepting commands.
    let t1 = Instant::now();
    running.remove(&leader).unwrap().stop().await;
    conns.retain(|(r, _)| *r != leader);
    let create =
        Command::CreatePool { name: "data".into(), size: 2, min_size: None, pg_num: 8, max_object_bytes: None };
    let epoch = command_retry(&conns[0].1, create, Duration::from_secs(5)).await;
    eprintln!("after killing mon.{leader}: command accepted after {:.0} ms", t1.elapsed().as_secs_f64() * 1000.0);
    assert_eq!(epoch, 5);
    let new_leader = leader_of(&conns, Duration::from_secs(5)).await;
    assert_ne!(new_leader, leader);
    let epoch = command_retry(&conns[1].1, Command::OsdOut { id: OsdId(0) }, Duration::from_secs(5)).await;
    assert_eq!(epoch, 6);
    converge(&conns, 6, Duration::from_secs(5)).await;

    // The old leader restarts from its data directory and catches up.
    let listener = TcpListener::bind(mons[&leader]).await.unwrap();
    running.insert(leader, start(&dirs[leader as usize], leader, listener, &mons, &keys));
    conns.push((leader, connect(mons[&leader], &keys, "client.admin").await));
    converge(&conns, 6, Duration::from_secs(5)).await;
    let maps: Vec<ClusterMap> = {
        let mut v = Vec::new();
        for (_, c) in &conns {
            v.push(full_map(c).await);
        }
        v
    };
    let encoded: Vec<Vec<u8>> = maps.iter().map(|m| postcard::to_allocvec(m).unwrap()).collect();
    assert!(encoded.windows(2).all(|w| w[0] == w[1]), "identical maps");
    assert_eq!(maps[0].pools.values().next().unwrap().name, "data");

    for (_, m) in running {
        m.stop().await;
    }
}

/// The monitors answer "no quorum" when the leader dies under a command: a follower that has not
/// noticed yet forwards it to the dead leader and cannot reach it. The client library resends a
/// repeatable command (`Command::repeatable`) until the survivors have elected a new leader, so
/// marking an OSD out during a monitor failure neither fails nor needs a retry from its caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeatable_command_sent_as_the_leader_dies_is_resent_by_the_client_until_it_applies() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = keyring();
    let (mut running, conns, mons, _dirs) = three_mons(tmp.path(), "fsid-resend", &keys).await;
    let epoch = command_retry(&conns[0].1, create_osd("h0"), Duration::from_secs(5)).await;
    converge(&conns, epoch, Duration::from_secs(5)).await;
    let leader = leader_of(&conns, Duration::from_secs(5)).await;
    // The client speaks to a follower first.
    let follower = (0..3u32).find(|r| *r != leader).expect("a follower");
    let mut order: Vec<SocketAddr> = vec![mons[&follower]];
    order.extend(mons.iter().filter(|(r, _)| **r != follower).map(|(_, a)| *a));
    let cfg = shoal_client::ClusterConfig {
        fsid: "fsid-resend".into(),
        mons: order,
        entity: "client.admin".into(),
        key: Key(keys.get("client.admin").expect("admin key").0),
        op_timeout_ms: 15_000,
        max_in_flight: 16,
        local_sockets: false,
    };
    let monc = shoal_client::monc::MonClient::connect(cfg).await.expect("connect");
    running.remove(&leader).unwrap().stop().await;
    let epoch = monc.command(Command::OsdOut { id: OsdId(0) }).await.expect("marked out across the election");
    let map = monc.wait_for_epoch(epoch, 5_000).await.expect("map");
    assert!(!map.osds[&OsdId(0)].in_cluster);
    // Applied once: the repeat changed nothing, so the epoch is the one after the OSD's creation.
    assert_eq!(epoch, 3, "{map:?}");
    for (_, m) in running {
        m.stop().await;
    }
}

/// Sends `cmd` with `session` until the monitors answer anything but "no quorum".
async fn command_in_retry(
    c: &Connection,
    cmd: &Command,
    session: CommandSession,
    timeout: Duration,
) -> Result<u64, RemoteError> {
    let deadline = Instant::now() + timeout;
    loop {
        match command_in(c, cmd.clone(), Some(session)).await {
            Err(e) if e.code == ErrorCode::NoQuorum && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            r => return r,
        }
    }
}

/// A non-repeatable command resent with its session is answered with the epoch of its first
/// application, not applied again and not refused as a duplicate: by a new leader after the one
/// that applied it died, after snapshots replaced the log, and after every monitor restarted
/// (the sessions are replicated state, decision 0072). Without its session the same command is
/// refused ("exists"), as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_command_is_answered_with_its_first_epoch_across_failover_snapshots_and_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = keyring();
    let (mut running, mut conns, mons, dirs) = three_mons(tmp.path(), "fsid-session", &keys).await;
    command_retry(&conns[0].1, create_osd("h0"), Duration::from_secs(5)).await;
    let leader = leader_of(&conns, Duration::from_secs(5)).await;
    let pool = Command::CreatePool { name: "p".into(), size: 1, min_size: None, pg_num: 8, max_object_bytes: None };
    let session = CommandSession { client: 0x5eed, seq: 1 };
    let at = |conns: &[(u32, Connection)], r: u32| conns.iter().position(|(x, _)| *x == r).unwrap();
    let epoch = command_in_retry(&conns[at(&conns, leader)].1, &pool, session, Duration::from_secs(5))
        .await
        .expect("pool created");
    assert_eq!(epoch, 3);

    running.remove(&leader).unwrap().stop().await;
    conns.retain(|(r, _)| *r != leader);
    for (_, c) in &conns {
        let again = command_in_retry(c, &pool, session, Duration::from_secs(10)).await;
        assert_eq!(again, Ok(epoch), "resent to a survivor");
    }
    let e = command(&conns[0].1, pool.clone()).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Exists, "{e:?}");

    // Enough changes for the survivors to snapshot and purge the entry that recorded it.
    let new_leader = leader_of(&conns, Duration::from_secs(5)).await;
    let c = &conns[at(&conns, new_leader)].1;
    let mut last = 0;
    for i in 0..300 {
        let cmd = if i % 2 == 0 { Command::OsdOut { id: OsdId(0) } } else { Command::OsdIn { id: OsdId(0) } };
        last = command_retry(c, cmd, Duration::from_secs(5)).await;
    }
    assert!(dirs[new_leader as usize].join("snapshot").exists(), "the leader took a snapshot");
    for (_, m) in running {
        m.stop().await;
    }

    let (running, conns) = restart_three(&dirs, &mons, &keys).await;
    converge(&conns, last, Duration::from_secs(10)).await;
    for (r, c) in &conns {
        let again = command_in_retry(c, &pool, session, Duration::from_secs(10)).await;
        assert_eq!(again, Ok(epoch), "resent to mon.{r} after every monitor restarted");
    }
    // The client's next command is a new one.
    let other = Command::CreatePool { name: "q".into(), size: 1, min_size: None, pg_num: 8, max_object_bytes: None };
    let next =
        command_in_retry(&conns[0].1, &other, CommandSession { client: 0x5eed, seq: 2 }, Duration::from_secs(10))
            .await
            .expect("a new command");
    assert_eq!(next, last + 1);
    for (_, m) in running {
        m.stop().await;
    }
}

/// Enough changes to make every monitor snapshot and purge its log (policy: every 256 entries):
/// a follower that was down meanwhile is brought back by a snapshot, and a restarted monitor
/// recovers from snapshot plus log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_bound_the_log_and_catch_up_a_lagging_monitor() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = keyring();
    let (mut running, mut conns, mons, dirs) = three_mons(tmp.path(), "fsid-snap", &keys).await;
    command_retry(&conns[0].1, create_osd("h"), Duration::from_secs(5)).await;
    let leader = leader_of(&conns, Duration::from_secs(5)).await;
    let lagger = (leader + 1) % 3;
    running.remove(&lagger).unwrap().stop().await;
    conns.retain(|(r, _)| *r != lagger);

    let c = &conns.iter().find(|(r, _)| *r == leader).unwrap().1;
    let t = Instant::now();
    let mut epoch = 0;
    for i in 0..300 {
        let cmd = if i % 2 == 0 { Command::OsdOut { id: OsdId(0) } } else { Command::OsdIn { id: OsdId(0) } };
        epoch = command(c, cmd).await.unwrap();
    }
    eprintln!("300 commands with 2 of 3 monitors: {:.0} ms", t.elapsed().as_secs_f64() * 1000.0);
    assert_eq!(epoch, 302);
    let d = &dirs[leader as usize];
    assert!(d.join("snapshot").exists(), "leader took a snapshot");
    let log_bytes = std::fs::metadata(d.join("raft.log")).unwrap().len();
    assert!(log_bytes < 100 * 1024, "log purged: {log_bytes} bytes");

    let listener = TcpListener::bind(mons[&lagger]).await.unwrap();
    running.insert(lagger, start(&dirs[lagger as usize], lagger, listener, &mons, &keys));
    conns.push((lagger, connect(mons[&lagger], &keys, "client.admin").await));
    converge(&conns, 302, Duration::from_secs(5)).await;
    assert!(dirs[lagger as usize].join("snapshot").exists(), "caught up by a snapshot: the log it missed is purged");
    for (_, m) in running {
        m.stop().await;
    }

    // Everyone restarts: recovery from snapshot + log gives the same map.
    let (running, conns) = restart_three(&dirs, &mons, &keys).await;
    converge(&conns, 302, Duration::from_secs(5)).await;
    let epoch = command_retry(&conns[2].1, Command::OsdOut { id: OsdId(0) }, Duration::from_secs(5)).await;
    assert_eq!(epoch, 303);
    for (_, m) in running {
        m.stop().await;
    }
}
