//! Peers' failure reports (decision 0062): which OSDs other OSDs say they cannot reach, and
//! which of those the leader marks down.
//!
//! An OSD names, in each report, the peers that have not answered its pings for the peer grace.
//! One reporter is never enough: an OSD whose own links are cut names every peer, and marking
//! them all down would stop the cluster because of one bad cable. A target is marked down once
//! reporters on at least `min_hosts` distinct hosts name it (Ceph's `mon_osd_min_down_reporters`
//! at the host level). Targets are judged most-reported first, and an OSD marked down in the
//! same pass no longer counts as a reporter: two OSDs cut off from everyone name every other
//! OSD, but every other OSD names them, so they go down first and their reports of the rest
//! stop counting.

use std::collections::{BTreeMap, BTreeSet};

use shoal_map::{ClusterMap, OsdId};

/// One reporter's latest report naming peers.
#[derive(Debug, Clone)]
struct Report {
    /// When the leader received it (its own clock).
    at_ms: u64,
    /// The reporter's map epoch when it reported: a report from before a target's latest boot
    /// is about an earlier incarnation.
    epoch: u64,
    /// The peers it names, each in the map when the report arrived.
    targets: Vec<OsdId>,
}

/// The reports the leader holds (soft state: rebuilt from the next reports after a leadership
/// change). One entry per reporter in the map, each naming at most every other OSD in it.
#[derive(Debug, Default)]
pub struct FailureReports {
    by_reporter: BTreeMap<OsdId, Report>,
}

impl FailureReports {
    /// Records `reporter`'s latest report, made with its map at `epoch`: it names exactly
    /// `unreachable` now (what it named before is withdrawn).
    pub fn record(&mut self, map: &ClusterMap, reporter: OsdId, epoch: u64, unreachable: &[OsdId], now_ms: u64) {
        let targets: Vec<OsdId> =
            unreachable.iter().copied().filter(|t| *t != reporter && map.osds.contains_key(t)).collect();
        if targets.is_empty() {
            self.by_reporter.remove(&reporter);
        } else {
            self.by_reporter.insert(reporter, Report { at_ms: now_ms, epoch, targets });
        }
    }

    /// Forgets every report (a new leader starts from the next reports).
    pub fn clear(&mut self) {
        self.by_reporter.clear();
    }

    /// Forgets the reports about `target` (it booted again, or went down) and its own.
    pub fn forget(&mut self, target: OsdId) {
        self.by_reporter.remove(&target);
        for report in self.by_reporter.values_mut() {
            report.targets.retain(|t| *t != target);
        }
        self.by_reporter.retain(|_, r| !r.targets.is_empty());
    }

    /// The up OSDs to mark down now, in the order to propose them: each named, in reports
    /// received within `window_ms` and made since its latest boot, by up reporters on at least
    /// `min_hosts` distinct hosts, leaving out reporters marked down before it in this pass or
    /// already on their way down (`going_down`, whose targets are not returned either).
    #[must_use]
    pub fn due(
        &self,
        map: &ClusterMap,
        going_down: &BTreeSet<OsdId>,
        now_ms: u64,
        window_ms: u64,
        min_hosts: usize,
    ) -> Vec<OsdId> {
        let up = |o: &OsdId| map.osds.get(o).is_some_and(|i| i.up) && !going_down.contains(o);
        let mut by_target: BTreeMap<OsdId, Vec<OsdId>> = BTreeMap::new();
        for (reporter, report) in &self.by_reporter {
            if !up(reporter) || now_ms.saturating_sub(report.at_ms) > window_ms {
                continue;
            }
            for target in &report.targets {
                let up_from = map.osds.get(target).map_or(u64::MAX, |i| i.up_from);
                if up(target) && report.epoch >= up_from {
                    by_target.entry(*target).or_default().push(*reporter);
                }
            }
        }
        let mut candidates: Vec<(OsdId, Vec<OsdId>)> = by_target.into_iter().collect();
        // Most reported first; ties in id order, so every monitor decides alike.
        candidates.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        let mut marked: Vec<OsdId> = Vec::new();
        for (target, reporters) in candidates {
            let hosts: BTreeSet<&str> = reporters
                .iter()
                .filter(|r| !marked.contains(r))
                .filter_map(|r| map.osds.get(r).map(|i| i.host.as_str()))
                .collect();
            if hosts.len() >= min_hosts.max(1) {
                marked.push(target);
            }
        }
        marked
    }
}
