//! Upgrades across link schemas (issue 51): an edge upgraded from the release that wrote
//! link schema 4 serves the snapshot that release persisted while control is away, then
//! follows a control of this release and persists what it gets in this schema.
mod common;

use std::time::{Duration, Instant};

use common::{free_port, sample, scrape, Location};
use hickory_proto::rr::RecordType;

/// The first octets of a persisted file of this build: its magic and schema number.
fn header(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).map(|data| data[..10].to_vec()).unwrap_or_default()
}

#[test]
fn an_upgraded_edge_serves_the_snapshot_its_predecessor_persisted_then_follows_control() {
    let mut loc = Location::prepared();
    let state = loc.dir.path().join("edge-state");
    std::fs::create_dir_all(&state).unwrap();
    // What an edge of schema 4 persisted: version 7 of the example zones (the golden
    // file of link/tests/schema, written by that release's code).
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../link/tests/schema/v4-snapshot.bin");
    let snapshot = state.join("snapshot.bin");
    std::fs::copy(&golden, &snapshot).unwrap();
    assert_eq!(&header(&snapshot)[..8], b"QDNSSNP1", "a file from before numbering");
    // No control yet: the edge serves the file.
    let metrics = format!("127.0.0.1:{}", free_port());
    loc.start_edge_with(&[], &["--metrics", &metrics]);
    assert_eq!(
        loc.values("www.example.com.", RecordType::A),
        ["192.0.2.10", "192.0.2.11"],
        "the persisted snapshot is served"
    );
    assert_eq!(sample(&scrape(&metrics), "qdns_edge_snapshot_version"), Some(7));
    // Control comes: the edge follows it and persists its snapshot in this schema.
    loc.start_control();
    let mut expected = b"QDNSSNP2".to_vec();
    expected.extend_from_slice(&qdns_link::schema::SCHEMA.to_be_bytes());
    let deadline = Instant::now() + Duration::from_secs(20);
    while header(&snapshot) != expected {
        assert!(
            Instant::now() < deadline,
            "the edge did not persist control's snapshot in schema {}",
            qdns_link::schema::SCHEMA
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    loc.wait_edges_current();
    assert_eq!(
        loc.values("www.example.com.", RecordType::A),
        ["192.0.2.10", "192.0.2.11"]
    );
}
