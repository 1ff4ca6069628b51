//! Per-entity secrets and the file that stores them.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::NetError;

/// A 32-byte secret shared by one entity ("client.admin", "osd.3", "mon.0") and the servers
/// that authenticate it. `Debug` never prints the secret.
#[derive(Clone)]
pub struct Key(pub [u8; 32]);

impl Key {
    /// A fresh key from the operating system's random source.
    ///
    /// # Panics
    /// Panics if the operating system cannot provide random bytes; nothing secure can be done
    /// without them.
    #[must_use]
    pub fn generate() -> Key {
        let mut k = [0u8; 32];
        getrandom::fill(&mut k).expect("the operating system's random source failed");
        Key(k)
    }

    /// The key as 64 lowercase hexadecimal digits.
    #[must_use]
    pub fn to_hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(DIGITS[usize::from(b >> 4)] as char);
            s.push(DIGITS[usize::from(b & 15)] as char);
        }
        s
    }

    /// Parses 64 hexadecimal digits (either case).
    pub fn from_hex(s: &str) -> Result<Key, NetError> {
        let s = s.as_bytes();
        if s.len() != 64 {
            return Err(NetError::BadKey { reason: format!("expected 64 hex digits, got {}", s.len()) });
        }
        let mut k = [0u8; 32];
        for (i, pair) in s.chunks_exact(2).enumerate() {
            let hi = hex_digit(pair[0]);
            let lo = hex_digit(pair[1]);
            match (hi, lo) {
                (Some(hi), Some(lo)) => k[i] = (hi << 4) | lo,
                _ => return Err(NetError::BadKey { reason: "not a hexadecimal digit".into() }),
            }
        }
        Ok(Key(k))
    }
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Equality takes the same time wherever the keys differ, so comparing a secret never tells an
/// observer how much of it matched.
impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.0.iter().zip(other.0.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}
impl Eq for Key {}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

impl From<[u8; 32]> for Key {
    fn from(bytes: [u8; 32]) -> Key {
        Key(bytes)
    }
}

/// Entity name to key. Servers use it to check clients; tools create and store it.
///
/// The file format is text: one `ENTITY HEXKEY` per line (separated by spaces or tabs), blank
/// lines and lines starting with `#` ignored. An entity name is non-empty, has no whitespace
/// and does not start with `#`.
///
/// Besides the keys it was built or loaded with, a keyring holds *learned* keys, replaced as a
/// whole with [`Keyring::set_learned`] (daemons learn client keys from the cluster map). Clones
/// share the learned keys, so a server holding the keyring sees updates made through any clone.
/// Only the built or loaded keys are saved.
#[derive(Clone, Default, Debug)]
pub struct Keyring {
    keys: BTreeMap<String, Key>,
    learned: std::sync::Arc<std::sync::RwLock<BTreeMap<String, Key>>>,
}

impl Keyring {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces the key of `entity`.
    pub fn insert(&mut self, entity: &str, key: Key) {
        self.keys.insert(entity.to_owned(), key);
    }

    /// The key of `entity` among the built or loaded keys (not the learned ones).
    #[must_use]
    pub fn get(&self, entity: &str) -> Option<&Key> {
        self.keys.get(entity)
    }

    /// The key a server checks `entity` against: its built or loaded key, else a learned one.
    #[must_use]
    pub fn lookup(&self, entity: &str) -> Option<Key> {
        if let Some(k) = self.keys.get(entity) {
            return Some(k.clone());
        }
        self.learned.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(entity).cloned()
    }

    /// Replaces the learned keys (for every clone of this keyring). A connection already
    /// authenticated stays open when its entity's key is removed; new ones are refused.
    pub fn set_learned<K: Into<Key>>(&self, keys: impl IntoIterator<Item = (String, K)>) {
        let keys: BTreeMap<String, Key> = keys.into_iter().map(|(e, k)| (e, k.into())).collect();
        *self.learned.write().unwrap_or_else(std::sync::PoisonError::into_inner) = keys;
    }

    /// Number of entities.
    #[must_use]
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Entity names in order.
    pub fn entities(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// Reads a keyring file. Errors name the file and, for a bad line, its 1-based number; an
    /// entity listed twice is an error, since one of the two keys would silently be ignored.
    pub fn load(path: &Path) -> Result<Keyring, NetError> {
        let bad = |line: Option<usize>, reason: String| NetError::BadKeyring { path: path.to_owned(), line, reason };
        let text = std::fs::read_to_string(path).map_err(|e| bad(None, e.to_string()))?;
        let mut ring = Keyring::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(entity), Some(hex), None) = (words.next(), words.next(), words.next()) else {
                return Err(bad(Some(n), "expected `ENTITY HEXKEY`".into()));
            };
            let key = Key::from_hex(hex).map_err(|e| bad(Some(n), format!("key of {entity}: {e}")))?;
            if ring.keys.insert(entity.to_owned(), key).is_some() {
                return Err(bad(Some(n), format!("{entity} is listed twice")));
            }
        }
        Ok(ring)
    }

    /// Writes the keyring to `path`, readable by its owner only (mode 0600). The file is written
    /// under a temporary name in the same directory, synced, and renamed over `path`, so a reader
    /// sees either the old or the new keyring and never a partial one.
    pub fn save(&self, path: &Path) -> Result<(), NetError> {
        let bad = |reason: String| NetError::BadKeyring { path: path.to_owned(), line: None, reason };
        let mut text = String::from("# Shoal keyring: ENTITY HEXKEY\n");
        for (entity, key) in &self.keys {
            if entity.is_empty() || entity.starts_with('#') || entity.contains(char::is_whitespace) {
                return Err(bad(format!("entity name {entity:?} cannot be stored")));
            }
            text.push_str(entity);
            text.push(' ');
            text.push_str(&key.to_hex());
            text.push('\n');
        }
        let tmp = tmp_path(path);
        let write = || -> std::io::Result<()> {
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            let mut f = opts.open(&tmp)?;
            // A leftover temporary file from a crash keeps its old mode when reopened.
            #[cfg(unix)]
            f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)?;
            // The rename is only durable once the directory itself is synced.
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            bad(e.to_string())
        })
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(format!(".tmp.{}", std::process::id()));
    path.with_file_name(name)
}
