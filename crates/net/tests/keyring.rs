//! Keys and keyring files.

use shoal_net::{Key, Keyring, NetError};

#[test]
fn keyring_round_trips_through_a_private_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keyring");
    let mut ring = Keyring::new();
    let admin = Key::generate();
    let osd = Key::generate();
    ring.insert("client.admin", admin.clone());
    ring.insert("osd.3", osd.clone());
    ring.save(&path).unwrap();

    let loaded = Keyring::load(&path).unwrap();
    assert_eq!(loaded.len(), 2);
    assert_eq!(loaded.get("client.admin"), Some(&admin));
    assert_eq!(loaded.get("osd.3"), Some(&osd));
    assert!(loaded.get("mon.0").is_none());

    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    // Nothing is left behind by the atomic replace.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    // Saving again replaces the file.
    ring.insert("mon.0", Key::generate());
    ring.save(&path).unwrap();
    assert_eq!(Keyring::load(&path).unwrap().len(), 3);
}

#[test]
fn a_malformed_line_is_named_with_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keyring");
    let good = Key::generate().to_hex();
    std::fs::write(&path, format!("# comment\n\nclient.admin {good}\nosd.1 nothex\n")).unwrap();
    match Keyring::load(&path) {
        Err(e @ NetError::BadKeyring { line: Some(4), .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&path.display().to_string()) && msg.contains("line 4") && msg.contains("osd.1"),
                "{msg}"
            );
        }
        other => panic!("expected an error on line 4, got {other:?}"),
    }

    std::fs::write(&path, format!("client.admin {good} extra\n")).unwrap();
    assert!(matches!(Keyring::load(&path), Err(NetError::BadKeyring { line: Some(1), .. })));
    std::fs::write(&path, format!("a {good}\na {good}\n")).unwrap();
    assert!(matches!(Keyring::load(&path), Err(NetError::BadKeyring { line: Some(2), .. })));

    let missing = dir.path().join("missing");
    let e = Keyring::load(&missing).unwrap_err();
    assert!(matches!(e, NetError::BadKeyring { line: None, .. }) && e.to_string().contains("missing"), "{e}");
}

#[test]
fn keys_parse_from_hex_and_hide_in_debug() {
    let k = Key::generate();
    assert_eq!(Key::from_hex(&k.to_hex()).unwrap(), k);
    assert_eq!(Key::from_hex(&k.to_hex().to_uppercase()).unwrap(), k);
    assert!(matches!(Key::from_hex("abc"), Err(NetError::BadKey { .. })));
    assert!(matches!(Key::from_hex(&"g".repeat(64)), Err(NetError::BadKey { .. })));
    assert!(matches!(Key::from_hex(&"é".repeat(32)), Err(NetError::BadKey { .. })));
    assert_eq!(format!("{k:?}"), "Key(..)");
    assert_ne!(Key::generate(), k);
}

#[test]
fn unstorable_entity_names_are_refused_on_save() {
    let dir = tempfile::tempdir().unwrap();
    let mut ring = Keyring::new();
    ring.insert("two words", Key::generate());
    assert!(matches!(ring.save(&dir.path().join("k")), Err(NetError::BadKeyring { .. })));
}
