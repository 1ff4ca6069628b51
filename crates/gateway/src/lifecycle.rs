//! What lifecycle rules mean, pure: which objects a rule applies to, when a version is due to
//! expire, and which of a key's versions (met newest first, as the index lists them) a bucket's
//! rules expire. The background pass in `expiry.rs` acts on it; `s3lifecycle.rs` checks rules
//! as clients send them and reports an object's expiration.

use crate::layout::{IndexEntry, LifecycleFilter, LifecycleRule, Slot};

const NS_PER_S: u64 = 1_000_000_000;
/// A day as S3 counts lifecycle days.
pub const DAY_NS: u64 = 86_400 * NS_PER_S;

/// When something created at `created_ns` is `days` days old: S3 counts whole days and rounds
/// up to the next midnight UTC. With a shortened day (tests), boundaries are the multiples of
/// `day_ns` since the epoch.
pub fn due_ns(created_ns: u64, days: u32, day_ns: u64) -> u64 {
    assert!(day_ns > 0, "a lifecycle day has a length");
    let at = created_ns.saturating_add(u64::from(days).saturating_mul(day_ns));
    at.div_ceil(day_ns).saturating_mul(day_ns)
}

impl LifecycleFilter {
    /// Whether an object under `key` of `size_bytes` with `tags` meets every condition.
    pub fn matches(&self, key: &str, size_bytes: u64, tags: &[(String, String)]) -> bool {
        self.matches_untagged(key, size_bytes) && self.tags.iter().all(|t| tags.contains(t))
    }

    /// The conditions but the tags (which only the object's metadata holds).
    pub fn matches_untagged(&self, key: &str, size_bytes: u64) -> bool {
        key.starts_with(self.prefix.as_str())
            && self.size_greater_than.is_none_or(|min| size_bytes > min)
            && self.size_less_than.is_none_or(|max| size_bytes < max)
    }
}

/// When a current version created at `created_ns` expires under `rule` (`None`: the rule does
/// not expire current versions).
pub fn current_due(rule: &LifecycleRule, created_ns: u64, day_ns: u64) -> Option<u64> {
    match (rule.expire_days, rule.expire_date_s) {
        (Some(days), _) => Some(due_ns(created_ns, days, day_ns)),
        (None, Some(date_s)) => Some(u64::try_from(date_s).unwrap_or(0).saturating_mul(NS_PER_S)),
        (None, None) => None,
    }
}

/// The enabled rules that expire a current version under `key` (created at `created_ns`, of
/// `size_bytes`), with when, soonest first; tags are not judged here (the caller checks
/// [`LifecycleFilter::matches`] with the object's tags).
pub fn current_candidates(
    rules: &[LifecycleRule],
    key: &str,
    size_bytes: u64,
    created_ns: u64,
    day_ns: u64,
) -> Vec<(u64, usize)> {
    let mut out: Vec<(u64, usize)> = rules
        .iter()
        .enumerate()
        .filter(|(_, r)| r.enabled && r.filter.matches_untagged(key, size_bytes))
        .filter_map(|(i, r)| current_due(r, created_ns, day_ns).map(|due| (due, i)))
        .collect();
    out.sort_unstable();
    out
}

/// What the lifecycle does to one version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionAction {
    /// Remove noncurrent version `slot` (rule `rule`'s noncurrent expiration; a rule with tags
    /// applies only if the version has them).
    Noncurrent { key: String, slot: Slot, rule: usize },
    /// Remove delete marker `slot`, the only version its key has left.
    LoneMarker { key: String, slot: Slot },
}

/// Judges the version records of a bucket's keys, fed in index order (by key, newest first),
/// against its rules at `now_ns`. Holds one key's state, however many versions it has.
pub struct VersionJudge<'a> {
    rules: &'a [LifecycleRule],
    now_ns: u64,
    day_ns: u64,
    key: Option<String>,
    /// Versions of `key` met so far.
    seen: u32,
    /// When the version met last was created: the instant the next one became noncurrent.
    newer_created_ns: u64,
    /// The key's newest version, if it is a delete marker.
    newest_marker: Option<(Slot, u64)>,
}

impl<'a> VersionJudge<'a> {
    pub fn new(rules: &'a [LifecycleRule], now_ns: u64, day_ns: u64) -> VersionJudge<'a> {
        VersionJudge { rules, now_ns, day_ns, key: None, seen: 0, newer_created_ns: 0, newest_marker: None }
    }

    /// The next version record; returns what expires (of the key before it, and of it).
    pub fn next(&mut self, key: &str, slot: Slot, record: &IndexEntry) -> Vec<VersionAction> {
        let mut out = Vec::new();
        if self.key.as_deref() != Some(key) {
            out.extend(self.end_key());
            self.key = Some(key.to_string());
        }
        if self.seen == 0 {
            self.newest_marker = record.delete_marker.then_some((slot, record.mtime_ns));
        } else {
            // The `seen`-th noncurrent version counting from the newest (1: the newest of them).
            let since_ns = self.newer_created_ns;
            let rule = self.rules.iter().position(|r| {
                r.enabled
                    && r.filter.matches_untagged(key, record.size_bytes)
                    && r.noncurrent_days.is_some_and(|days| due_ns(since_ns, days, self.day_ns) <= self.now_ns)
                    && r.keep_noncurrent.is_none_or(|keep| self.seen > keep)
            });
            if let Some(rule) = rule {
                out.push(VersionAction::Noncurrent { key: key.to_string(), slot, rule });
            }
        }
        self.seen = self.seen.saturating_add(1);
        self.newer_created_ns = record.mtime_ns;
        out
    }

    /// The end of the records: what expires of the last key.
    pub fn finish(&mut self) -> Option<VersionAction> {
        self.end_key()
    }

    fn end_key(&mut self) -> Option<VersionAction> {
        let key = self.key.take()?;
        let seen = std::mem::take(&mut self.seen);
        let (slot, created_ns) = self.newest_marker.take()?;
        if seen != 1 {
            return None;
        }
        // A marker with nothing behind it expires under a rule asking for that, or under a
        // rule expiring current versions by age (S3 treats such a marker as the current one).
        let expires = self.rules.iter().any(|r| {
            r.enabled
                && r.filter.tags.is_empty()
                && key.starts_with(r.filter.prefix.as_str())
                && (r.expired_delete_marker
                    || r.expire_days.is_some_and(|d| due_ns(created_ns, d, self.day_ns) <= self.now_ns))
        });
        expires.then_some(VersionAction::LoneMarker { key, slot })
    }
}

/// When a multipart upload under `key` created at `initiated_ns` is aborted, if a rule aborts it.
pub fn upload_due(rules: &[LifecycleRule], key: &str, initiated_ns: u64, day_ns: u64) -> Option<u64> {
    rules
        .iter()
        .filter(|r| r.enabled && r.filter.tags.is_empty() && key.starts_with(r.filter.prefix.as_str()))
        .filter_map(|r| r.abort_upload_days.map(|d| due_ns(initiated_ns, d, day_ns)))
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(prefix: &str) -> LifecycleRule {
        LifecycleRule {
            id: "r".into(),
            enabled: true,
            filter: LifecycleFilter { prefix: prefix.into(), ..LifecycleFilter::default() },
            ..LifecycleRule::default()
        }
    }

    fn version(mtime_ns: u64, marker: bool) -> IndexEntry {
        IndexEntry {
            size_bytes: 10,
            etag: String::new(),
            mtime_ns,
            tag: 1,
            tails: 0,
            owner_id: String::new(),
            owner_display: String::new(),
            multipart: false,
            version: None,
            null: false,
            delete_marker: marker,
        }
    }

    fn slot(n: u64) -> Slot {
        Slot { inv_ns: u64::MAX - n, salt: 0 }
    }

    #[test]
    fn days_round_up_to_the_next_day_boundary() {
        let day = 10 * NS_PER_S;
        assert_eq!(due_ns(0, 1, day), day);
        assert_eq!(due_ns(1, 1, day), 2 * day);
        assert_eq!(due_ns(3 * day, 2, day), 5 * day);
        // A real day: an object written at 13:00 with one day expires at midnight after next.
        assert_eq!(due_ns(13 * 3600 * NS_PER_S, 1, DAY_NS), 2 * DAY_NS);
        // Past the clock's range, never.
        assert_eq!(due_ns(u64::MAX - 5, 3, DAY_NS), u64::MAX);
    }

    #[test]
    fn filters_judge_prefix_size_and_tags() {
        let mut f = LifecycleFilter { prefix: "a/".into(), ..LifecycleFilter::default() };
        assert!(f.matches("a/x", 5, &[]));
        assert!(!f.matches("b/x", 5, &[]));
        f.size_greater_than = Some(5);
        f.size_less_than = Some(10);
        assert!(!f.matches("a/x", 5, &[]));
        assert!(f.matches("a/x", 6, &[]));
        assert!(!f.matches("a/x", 10, &[]));
        f.tags = vec![("k".into(), "v".into())];
        assert!(!f.matches("a/x", 6, &[]));
        assert!(f.matches_untagged("a/x", 6));
        assert!(f.matches("a/x", 6, &[("j".into(), "w".into()), ("k".into(), "v".into())]));
    }

    #[test]
    fn current_versions_expire_by_days_or_date_and_disabled_rules_never() {
        let day = 10 * NS_PER_S;
        let mut by_days = rule("a/");
        by_days.expire_days = Some(2);
        let mut by_date = rule("");
        by_date.expire_date_s = Some(100);
        let mut off = rule("");
        off.expire_days = Some(1);
        off.enabled = false;
        let rules = [by_days, by_date, off];
        assert_eq!(current_candidates(&rules, "a/x", 1, 0, day), vec![(20 * NS_PER_S, 0), (100 * NS_PER_S, 1)]);
        assert_eq!(current_candidates(&rules, "b/x", 1, 0, day), vec![(100 * NS_PER_S, 1)]);
    }

    #[test]
    fn noncurrent_versions_expire_from_when_the_next_one_was_made() {
        let day = 10;
        let mut r = rule("");
        r.noncurrent_days = Some(1);
        let rules = [r];
        let mut j = VersionJudge::new(&rules, 25, day);
        // Newest first: made at 22 (current), 15 (noncurrent since 22: due 40), 3 (since 15: due 30).
        assert!(j.next("k", slot(22), &version(22, false)).is_empty());
        assert!(j.next("k", slot(15), &version(15, false)).is_empty());
        assert!(j.next("k", slot(3), &version(3, false)).is_empty());
        assert_eq!(j.finish(), None);
        let mut j = VersionJudge::new(&rules, 30, day);
        j.next("k", slot(22), &version(22, false));
        j.next("k", slot(15), &version(15, false));
        assert_eq!(
            j.next("k", slot(3), &version(3, false)),
            vec![VersionAction::Noncurrent { key: "k".into(), slot: slot(3), rule: 0 }]
        );
    }

    #[test]
    fn newer_noncurrent_versions_are_kept() {
        let mut r = rule("");
        r.noncurrent_days = Some(1);
        r.keep_noncurrent = Some(2);
        let rules = [r];
        let mut j = VersionJudge::new(&rules, 1000, 10);
        let mut expired = Vec::new();
        for n in [50u64, 40, 30, 20, 10] {
            expired.extend(j.next("k", slot(n), &version(n, false)));
        }
        let slots: Vec<Slot> = expired
            .into_iter()
            .map(|a| match a {
                VersionAction::Noncurrent { slot, .. } => slot,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(slots, vec![slot(20), slot(10)]);
    }

    #[test]
    fn a_lone_delete_marker_expires_and_one_with_versions_behind_it_does_not() {
        let mut r = rule("");
        r.expired_delete_marker = true;
        let rules = [r];
        let mut j = VersionJudge::new(&rules, 100, 10);
        assert!(j.next("a", slot(5), &version(5, true)).is_empty());
        assert!(j.next("a", slot(4), &version(4, false)).is_empty());
        // Key "a" had a version behind its marker; "b" has the marker alone.
        assert_eq!(j.next("b", slot(5), &version(5, true)), vec![]);
        assert_eq!(
            j.next("c", slot(5), &version(5, false)),
            vec![VersionAction::LoneMarker { key: "b".into(), slot: slot(5) }]
        );
        assert_eq!(j.finish(), None);
        // Under a rule expiring by age, a lone marker waits its days.
        let mut r = rule("");
        r.expire_days = Some(5);
        let rules = [r];
        let mut j = VersionJudge::new(&rules, 40, 10);
        j.next("b", slot(5), &version(5, true));
        assert_eq!(j.finish(), None);
        let mut j = VersionJudge::new(&rules, 60, 10);
        j.next("b", slot(5), &version(5, true));
        assert_eq!(j.finish(), Some(VersionAction::LoneMarker { key: "b".into(), slot: slot(5) }));
    }

    #[test]
    fn uploads_abort_under_the_soonest_rule() {
        let mut a = rule("x/");
        a.abort_upload_days = Some(3);
        let mut b = rule("");
        b.abort_upload_days = Some(2);
        let rules = [a, b];
        assert_eq!(upload_due(&rules, "x/1", 0, 10), Some(20));
        assert_eq!(upload_due(&rules[..1], "y/1", 0, 10), None);
    }
}
