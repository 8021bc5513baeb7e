//! Catalog members are confined (issue 53 §5): a member a primary's catalog lists
//! below a zone the operator defines (`login.example.com` under `example.com`) would
//! answer in its place; it is neither loaded nor fetched. A member beside the operator's
//! zones is. Zone files as control writes them for members, loaded the way control loads.
use std::{fs, path::Path};

use qdns_testkit::fixtures::zone_head;
use qdns_zone::{load_dir_pending, Sources, CATALOG_MEMBERS_DIR};

fn member_file(dir: &Path, origin: &str) {
    fs::write(
        dir.join(format!("{origin}toml")),
        format!(
            "# member of catalog zone cat.example. (RFC 9432), written by qdns-control\n\
             [zone]\norigin = \"{origin}\"\nprimary = \"127.0.0.1:5353\"\n"
        ),
    )
    .unwrap();
}

#[test]
fn members_below_an_operators_zone_are_neither_loaded_nor_fetched() {
    let root = tempfile::tempdir().unwrap();
    let zones = root.path().join("zones");
    let secondary = root.path().join("secondary");
    let members = secondary.join(CATALOG_MEMBERS_DIR);
    fs::create_dir_all(&zones).unwrap();
    fs::create_dir_all(&members).unwrap();
    fs::write(zones.join("example.com.toml"), zone_head("example.com.")).unwrap();
    for member in ["login.example.com.", "deep.login.example.com.", "beside.example."] {
        member_file(&members, member);
    }
    let sources = Sources {
        geoip_db: None,
        location: None,
        secondary_dir: Some(&secondary),
        dynamic_dir: None,
    };
    let (snapshot, pending) = load_dir_pending(&zones, 1, sources).unwrap();
    let waiting: Vec<&str> = pending.iter().map(|p| p.origin.as_str()).collect();
    assert_eq!(
        waiting,
        ["beside.example."],
        "only the member beside the operator's zone is fetched"
    );
    assert_eq!(snapshot.zones.len(), 1, "the operator's zone alone is served");
}
