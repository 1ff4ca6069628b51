//! A small bounded cache of records read from the cluster, each trusted for a fixed time: what
//! lets a gateway answer most requests without re-reading the same user, key and bucket records.
//! Records changed through this gateway are replaced or dropped at once; changes made through
//! another gateway are seen within the time to live.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct TtlCache<V> {
    ttl: Duration,
    max_entries: usize,
    entries: Mutex<HashMap<String, (Instant, V)>>,
}

impl<V: Clone> TtlCache<V> {
    pub fn new(ttl: Duration, max_entries: usize) -> TtlCache<V> {
        assert!(max_entries > 0, "a cache holds at least one entry");
        TtlCache { ttl, max_entries, entries: Mutex::new(HashMap::new()) }
    }

    /// The cached value of `key`, if it is younger than the time to live.
    pub fn get(&self, key: &str) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.get(key).filter(|(at, _)| at.elapsed() < self.ttl).map(|(_, v)| v.clone())
    }

    /// Caches `value` as read just now. When full, the cache is emptied first: a miss costs one
    /// cluster read, and clearing keeps the bound without bookkeeping per entry.
    pub fn put(&self, key: &str, value: V) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= self.max_entries && !entries.contains_key(key) {
            entries.clear();
        }
        entries.insert(key.to_string(), (Instant::now(), value));
    }

    pub fn remove(&self, key: &str) {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_the_bound_holds() {
        let c = TtlCache::new(Duration::from_millis(50), 2);
        c.put("a", 1);
        c.put("b", 2);
        assert_eq!(c.get("a"), Some(1));
        c.put("c", 3);
        assert_eq!(c.get("a"), None, "full: emptied before the third entry");
        assert_eq!(c.get("c"), Some(3));
        c.remove("c");
        assert_eq!(c.get("c"), None);
        c.put("d", 4);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(c.get("d"), None, "expired");
    }
}
