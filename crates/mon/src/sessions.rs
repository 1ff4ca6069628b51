//! Which clients' commands the monitors have applied (decision 0072): the part of the replicated
//! state that makes a resent command take effect at most once.
//!
//! A client that loses the answer to a command (its monitor lost the leadership, or the
//! connection broke) cannot know whether the command was applied. For commands that set a state
//! a resend is harmless (`Command::repeatable`); for the others (create a pool, remove an OSD) a
//! resend would either fail ("pool exists") or act twice. So such commands carry a
//! [`CommandSession`], and every monitor records, when it applies the committed entry, which
//! session it came from and at which epoch. The table is replicated exactly as the map is (it is
//! updated only by applying log entries, in log order, and travels in snapshots), so every
//! monitor that becomes leader answers a resend the same way.
//!
//! The table is bounded: [`MAX_CLIENTS`] clients, [`MAX_SEQS_PER_CLIENT`] commands each. Eviction
//! depends only on the applied entries, so it is the same on every monitor.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use shoal_map::CommandSession;

/// Clients remembered at most; the one whose latest applied command is oldest is forgotten
/// first. A client resends within its operation timeout, so forgetting it only matters if this
/// many other clients' non-repeatable commands were applied meanwhile.
pub const MAX_CLIENTS: usize = 1024;
/// Applied commands remembered per client, newest first kept. Clients send non-repeatable
/// commands one or a few at a time.
pub const MAX_SEQS_PER_CLIENT: usize = 16;

/// What the table knows about a command's session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Applied; the map reached this epoch with it.
    Applied { epoch: u64 },
    /// Not among the commands remembered for this client, yet older than all of them while the
    /// client's record is full: it may have been applied and forgotten.
    Forgotten,
    /// Never applied (as far as the bounded table can tell: see [`MAX_CLIENTS`]).
    New,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct ClientRecord {
    /// Applied sequence numbers and the epoch each produced.
    applied: BTreeMap<u64, u64>,
    /// The epoch of this client's newest applied command (what eviction orders by).
    last_epoch: u64,
}

/// The applied sessions, by client. See the module documentation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTable {
    clients: BTreeMap<u64, ClientRecord>,
}

impl SessionTable {
    /// Whether `session` was applied.
    #[must_use]
    pub fn seen(&self, session: CommandSession) -> Seen {
        let Some(record) = self.clients.get(&session.client) else { return Seen::New };
        if let Some(epoch) = record.applied.get(&session.seq) {
            return Seen::Applied { epoch: *epoch };
        }
        match record.applied.keys().next() {
            Some(oldest) if record.applied.len() >= MAX_SEQS_PER_CLIENT && session.seq < *oldest => Seen::Forgotten,
            _ => Seen::New,
        }
    }

    /// Records that `session` was applied and the map is now at `epoch`. Called in log order on
    /// every monitor, so the table (evictions included) is the same everywhere.
    pub fn record(&mut self, session: CommandSession, epoch: u64) {
        if !self.clients.contains_key(&session.client) && self.clients.len() >= MAX_CLIENTS {
            // Epochs grow with every applied entry, so the oldest is unique: eviction is the
            // same on every monitor.
            if let Some(oldest) = self.clients.iter().min_by_key(|(_, r)| r.last_epoch).map(|(c, _)| *c) {
                self.clients.remove(&oldest);
            }
        }
        let record = self.clients.entry(session.client).or_default();
        record.applied.insert(session.seq, epoch);
        record.last_epoch = record.last_epoch.max(epoch);
        while record.applied.len() > MAX_SEQS_PER_CLIENT {
            record.applied.pop_first();
        }
        debug_assert!(self.clients.len() <= MAX_CLIENTS);
    }

    /// Clients remembered.
    #[must_use]
    pub fn clients(&self) -> usize {
        self.clients.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(client: u64, seq: u64) -> CommandSession {
        CommandSession { client, seq }
    }

    #[test]
    fn an_applied_command_is_seen_with_its_epoch_and_others_are_new() {
        let mut t = SessionTable::default();
        assert_eq!(t.seen(s(1, 1)), Seen::New);
        t.record(s(1, 1), 10);
        assert_eq!(t.seen(s(1, 1)), Seen::Applied { epoch: 10 });
        assert_eq!(t.seen(s(1, 2)), Seen::New);
        assert_eq!(t.seen(s(2, 1)), Seen::New);
    }

    #[test]
    fn a_client_keeps_its_newest_commands_and_calls_older_ones_forgotten() {
        let mut t = SessionTable::default();
        let n = MAX_SEQS_PER_CLIENT as u64 + 4;
        for seq in 1..=n {
            t.record(s(7, seq), 100 + seq);
        }
        for seq in 1..=4 {
            assert_eq!(t.seen(s(7, seq)), Seen::Forgotten, "seq {seq}");
        }
        for seq in 5..=n {
            assert_eq!(t.seen(s(7, seq)), Seen::Applied { epoch: 100 + seq });
        }
        assert_eq!(t.seen(s(7, n + 1)), Seen::New);
    }

    #[test]
    fn the_client_idle_longest_is_forgotten_first_and_the_table_stays_bounded() {
        let mut t = SessionTable::default();
        for c in 0..MAX_CLIENTS as u64 {
            t.record(s(c, 1), 1 + c);
        }
        // Client 0 acts again: client 1 is now the one idle longest.
        t.record(s(0, 2), 5000);
        t.record(s(99_999, 1), 5001);
        assert_eq!(t.clients(), MAX_CLIENTS);
        assert_eq!(t.seen(s(1, 1)), Seen::New);
        assert_eq!(t.seen(s(0, 1)), Seen::Applied { epoch: 1 });
        assert_eq!(t.seen(s(99_999, 1)), Seen::Applied { epoch: 5001 });
    }
}
