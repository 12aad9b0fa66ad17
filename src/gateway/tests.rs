//! The gateway's merged catalogs: when one is kept and what its cursors
//! are good for.

use std::collections::HashMap;

use super::*;

fn gateway() -> Arc<Gateway> {
    Gateway::new(crate::config::embedded_for_tests())
}

#[tokio::test]
async fn every_catalog_build_has_its_own_generation() {
    let gateway = gateway();
    let shared = gateway.catalog(ClientProfile::FULL);
    assert!(
        Arc::ptr_eq(&shared, &gateway.catalog(ClientProfile::FULL)),
        "kept until something changes"
    );
    // A session's own catalog (its per-session upstream announced lists),
    // rebuilt after each announcement from the same shared catalog: each
    // build is told apart (cursors go by the lists themselves).
    let own = gateway.catalog_with(ClientProfile::FULL, None, &HashMap::new());
    let rebuilt = gateway.catalog_with(ClientProfile::FULL, None, &HashMap::new());
    let generations = [shared.generation, own.generation, rebuilt.generation];
    assert!(
        generations[0] != generations[1]
            && generations[1] != generations[2]
            && generations[0] != generations[2],
        "{generations:?}"
    );
    gateway.catalog_changed();
    let after = gateway.catalog(ClientProfile::FULL);
    assert!(!Arc::ptr_eq(&shared, &after), "forgotten after a change");
    assert!(after.generation > rebuilt.generation);
}

/// A session's list waits for the refreshes of the lists it sees: the full
/// profile's (shared mounts) and its own profile's, of that kind; not
/// another profile's per-session discovery, nor another kind.
#[test]
fn a_list_waits_only_for_refreshes_it_sees() {
    let mount = MountName::new("m").expect("a mount name");
    let own = ClientProfile {
        sampling: true,
        ..ClientProfile::default()
    };
    let other = ClientProfile::default();
    assert_ne!(own, other);
    assert_ne!(own, ClientProfile::FULL);
    let key = |profile, kind| (mount.clone(), profile, kind);
    assert!(sees(
        &key(ClientProfile::FULL, ListKind::Tools),
        ListKind::Tools,
        own
    ));
    assert!(sees(&key(own, ListKind::Tools), ListKind::Tools, own));
    assert!(!sees(&key(other, ListKind::Tools), ListKind::Tools, own));
    assert!(!sees(
        &key(ClientProfile::FULL, ListKind::Prompts),
        ListKind::Tools,
        own
    ));
}
