//! Peer liveness (decision 0062): an OSD pings the OSDs it shares PGs with and names, in its
//! reports to the monitors, those that have not answered for the peer grace. The monitors mark
//! an OSD down once OSDs on enough distinct hosts name it, so that an OSD its peers cannot
//! reach, but the monitors still hear, does not hold its PGs' writes until the link heals.
//!
//! Pings travel on the same ordered link as replicated writes and are answered by the peer's
//! worker, so an answer shows that the peer is reachable and handling its work (a worker stuck
//! behind a hung disk stops answering, as it stops answering writes).
//!
//! An OSD marked down while it runs boots again only once it reaches its peers
//! ([`OsdCore::peers_reachable`]): otherwise an OSD cut off from its peers would boot, be
//! reported and marked down again for as long as the cut lasts, and each boot would stall its
//! PGs for one more grace period.

use std::collections::{BTreeMap, BTreeSet};

use shoal_map::{OsdId, PgId};
use shoal_proto::osd::PeerPing;
use shoal_proto::{Message, RemoteError, encode};

use super::{Action, OsdCore, PeerCall};

/// Peers an OSD pings while it holds no PG with anyone or is down in its map: the next up OSDs
/// after it in id order. Enough to tell "cut off from everyone" from "everyone else is gone"
/// without pinging a whole large cluster.
pub const MAX_NEIGHBOUR_PINGS: usize = 8;

/// How often an OSD pings each peer and how long a silent peer is tolerated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatConfig {
    /// A peer is pinged at most this often (and once more if a ping stays unanswered for the
    /// grace, in case the connection it went on is dead).
    pub interval_ms: u64,
    /// A peer that has not answered for this long is reported unreachable. Longer than the
    /// monitors' grace for silent OSDs, so that a crashed peer is marked down by its silence
    /// first and only partial partitions are left to reports.
    pub grace_ms: u64,
}

impl HeartbeatConfig {
    /// The daemon's defaults: a ping a second, reported after 10 s of silence (the monitors mark
    /// an OSD down after 5 s without its own reports).
    #[must_use]
    pub fn daemon() -> HeartbeatConfig {
        HeartbeatConfig { interval_ms: 1_000, grace_ms: 10_000 }
    }
}

/// What this OSD knows of one peer's liveness.
#[derive(Debug, Clone, Copy)]
struct Beat {
    /// When the peer became one to ping: silence is counted from here until it first answers.
    since_ms: u64,
    /// When it last answered a ping.
    answered_ms: Option<u64>,
    /// When the latest ping went out, and whether it is still unanswered.
    sent_ms: Option<u64>,
    in_flight: bool,
}

/// The heartbeat state of one OSD (see the module docs). Off until configured: the deterministic
/// simulation runs without it except where a run asks for it, so that the seeds that reproduce
/// earlier findings keep their schedules.
#[derive(Debug, Default)]
pub(super) struct Heartbeats {
    cfg: Option<HeartbeatConfig>,
    peers: BTreeMap<OsdId, Beat>,
    /// The map epoch the peer set was computed from.
    epoch: Option<u64>,
}

impl Beat {
    /// How long the peer has been silent: since its last answer, or since it became one to ping.
    fn silent_for(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.answered_ms.map_or(self.since_ms, |t| t.max(self.since_ms)))
    }
}

impl OsdCore {
    /// Turns peer heartbeats on with `cfg` (off by default). Every OSD of a cluster should use
    /// the same settings.
    pub fn set_heartbeats(&mut self, cfg: HeartbeatConfig) {
        assert!(cfg.interval_ms > 0 && cfg.grace_ms >= cfg.interval_ms, "heartbeat grace shorter than its interval");
        self.heartbeats.cfg = Some(cfg);
    }

    /// Whether this OSD reaches its peers: heartbeats are off, it has none, or at least half of
    /// those it pings answered within the grace. An OSD marked down while it runs boots again
    /// only then (see the module docs).
    pub fn peers_reachable(&self) -> bool {
        let Some(cfg) = self.heartbeats.cfg else { return true };
        let hb = &self.heartbeats;
        if hb.peers.is_empty() {
            return true;
        }
        let answering = hb
            .peers
            .values()
            .filter(|b| b.answered_ms.is_some_and(|t| self.now_ms.saturating_sub(t) < cfg.grace_ms))
            .count();
        answering > 0 && answering * 2 >= hb.peers.len()
    }

    /// The peers that have not answered for the grace, for this OSD's report.
    pub(super) fn unreachable_peers(&self) -> Vec<OsdId> {
        let Some(cfg) = self.heartbeats.cfg else { return Vec::new() };
        let hb = &self.heartbeats;
        hb.peers.iter().filter(|(_, b)| b.silent_for(self.now_ms) >= cfg.grace_ms).map(|(id, _)| *id).collect()
    }

    /// The OSDs to ping under the current map: the up members of every PG this OSD is an acting
    /// member of; if there are none, or this OSD is down in its map, its neighbours
    /// ([`MAX_NEIGHBOUR_PINGS`]).
    fn heartbeat_peers(&self) -> BTreeSet<OsdId> {
        let map = &self.map;
        let up = |o: &OsdId| map.osds.get(o).is_some_and(|i| i.up);
        let mut peers = BTreeSet::new();
        if up(&self.id) {
            let pgs: Vec<PgId> = self.pgs.keys().copied().collect();
            for pg in pgs {
                let acting = map.pg_osds(pg).unwrap_or_default();
                if acting.contains(&self.id) {
                    peers.extend(acting.into_iter().filter(|o| *o != self.id && up(o)));
                }
            }
        }
        if peers.is_empty() {
            let after = map.osds.keys().copied().filter(|o| *o > self.id && up(o));
            let before = map.osds.keys().copied().filter(|o| *o < self.id && up(o));
            peers.extend(after.chain(before).take(MAX_NEIGHBOUR_PINGS));
        }
        peers
    }

    /// At each heartbeat ([`super::Event::Heartbeat`]): brings the peer set up to date with the
    /// map and pings the peers due.
    pub(super) fn heartbeat_tick(&mut self, out: &mut Vec<Action>) {
        let Some(cfg) = self.heartbeats.cfg else { return };
        let now = self.now_ms;
        if self.heartbeats.epoch != Some(self.map.epoch) {
            let peers = self.heartbeat_peers();
            let hb = &mut self.heartbeats;
            hb.peers.retain(|id, _| peers.contains(id));
            for id in peers {
                hb.peers.entry(id).or_insert(Beat {
                    since_ms: now,
                    answered_ms: None,
                    sent_ms: None,
                    in_flight: false,
                });
            }
            hb.epoch = Some(self.map.epoch);
        }
        let epoch = self.map.epoch;
        for (id, beat) in &mut self.heartbeats.peers {
            let since_sent = beat.sent_ms.map_or(u64::MAX, |t| now.saturating_sub(t));
            // One ping in flight per peer, unless it has gone unanswered for the grace (its
            // connection may be dead without an error; a new ping finds out).
            let due = if beat.in_flight { since_sent >= cfg.grace_ms } else { since_sent >= cfg.interval_ms };
            if !due {
                continue;
            }
            beat.sent_ms = Some(now);
            beat.in_flight = true;
            out.push(Action::Peer {
                osd: *id,
                msg_type: PeerPing::TYPE,
                payload: encode(&PeerPing { epoch }, Vec::new()),
                call: PeerCall::Ping,
            });
        }
    }

    /// A peer answered a ping (or the driver reports it could not be delivered).
    pub(super) fn pinged(&mut self, from: OsdId, result: Result<(), RemoteError>) {
        let now = self.now_ms;
        let Some(beat) = self.heartbeats.peers.get_mut(&from) else { return };
        beat.in_flight = false;
        match result {
            Ok(()) => beat.answered_ms = Some(now),
            Err(e) => tracing::debug!(peer = %from, error = %e, "ping not answered"),
        }
    }

    /// Answers a peer's ping: at once, whatever either map says.
    pub(super) fn on_ping(&self, from: u64, request_id: u64, out: &mut Vec<Action>) {
        let ack = shoal_proto::osd::PeerAck { epoch: self.map.epoch, result: Ok(()) };
        out.push(Action::Reply {
            to: from,
            frame: super::reply_frame(request_id, &ack, Vec::new()),
            after_sync: false,
        });
    }
}
