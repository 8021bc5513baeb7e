//! The link's schemas held against golden files (`tests/schema/vN-*.bin`): what this
//! build writes is octet for octet the current schema's files, and every schema it
//! reads decodes its files to the fixture's values. A change of form fails the first
//! test: freeze the changed types in `link/src/schema/vN.rs`, bump the schema (see
//! `link/src/schema/mod.rs`), then write the new schema's files with
//! `QDNS_BLESS_SCHEMA=1 cargo test -p qdns-link --test schema` and commit them. The
//! files of earlier schemas are never rewritten: they are what those releases wrote.
#[path = "schema/fixture.rs"]
mod fixture;

use std::path::{Path, PathBuf};

use qdns_link::{
    delta,
    protocol::{self, HelloExtension, ToEdge},
    schema,
};
use qdns_zone::Snapshot;

fn golden(schema: u16, what: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/schema/v{schema}-{what}.bin"))
}

fn read(schema: u16, what: &str) -> Vec<u8> {
    let path = golden(schema, what);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The bodies of the frames in `octets`, each after its length.
fn bodies(mut octets: &[u8]) -> Vec<&[u8]> {
    let mut bodies = Vec::new();
    while !octets.is_empty() {
        let len = protocol::frame_len(octets[..4].try_into().unwrap()).unwrap();
        bodies.push(&octets[4..4 + len]);
        octets = &octets[4 + len..];
    }
    bodies
}

/// What `made` must be: the current schema's golden file (written first under
/// `QDNS_BLESS_SCHEMA=1`).
fn holds(what: &str, made: &[u8]) {
    let path = golden(schema::SCHEMA, what);
    if std::env::var_os("QDNS_BLESS_SCHEMA").is_some() {
        std::fs::write(&path, made).unwrap();
    }
    let written = read(schema::SCHEMA, what);
    assert!(
        written == made,
        "{what}: this build writes other octets than schema {} did ({} octets, the golden file {}): a \
         change of form is a new schema (link/src/schema/mod.rs says how)",
        schema::SCHEMA,
        made.len(),
        written.len(),
    );
}

/// The hello of the fixture's edge, as an edge of schema `schema` sends it.
fn hello_extension(snapshot: &Snapshot, schema: u16) -> HelloExtension {
    HelloExtension {
        version: if schema <= schema::UNNUMBERED { 3 } else { 4 },
        keepalive_secs: 5,
        cookies: true,
        deltas: true,
        zones: snapshot
            .zones
            .iter()
            .map(|z| (z.origin.clone(), delta::zone_digest(z)))
            .collect(),
        schema: if schema <= schema::UNNUMBERED { 0 } else { schema },
    }
}

#[test]
fn this_build_writes_the_current_schemas_golden_octets() {
    let snapshot = fixture::snapshot();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snapshot.bin");
    protocol::persist(&path, &snapshot).unwrap();
    holds("snapshot", &std::fs::read(&path).unwrap());
    let frames = |kinds: Vec<Vec<u8>>| kinds.concat();
    holds(
        "to-edge",
        &frames(
            fixture::to_edge()
                .iter()
                .map(|m| protocol::encode(m).unwrap())
                .collect(),
        ),
    );
    holds(
        "to-control",
        &frames(
            fixture::to_control()
                .iter()
                .map(|m| protocol::encode(m).unwrap())
                .collect(),
        ),
    );
    let hello = protocol::encode_hello("edge-1", Some(6), &hello_extension(&snapshot, schema::SCHEMA)).unwrap();
    holds("hello", &hello);
    // And the snapshot frame made without a copy is the same octets.
    let ToEdge::Snapshot { snapshot, seq } = &fixture::to_edge()[0] else {
        unreachable!("the fixture's first message is a snapshot")
    };
    assert_eq!(
        protocol::encode_snapshot(snapshot, *seq).unwrap(),
        bodies(&read(schema::SCHEMA, "to-edge"))
            .first()
            .map(|b| [&(b.len() as u32).to_be_bytes()[..], b].concat())
            .unwrap()
    );
}

#[test]
fn every_schema_this_build_reads_decodes_its_golden_files() {
    const { assert!(schema::OLDEST <= schema::UNNUMBERED && schema::UNNUMBERED < schema::SCHEMA) };
    for number in schema::OLDEST..=schema::SCHEMA {
        let snapshot = protocol::load_snapshot(&golden(number, "snapshot")).unwrap().unwrap();
        let expected = fixture::as_read_in(number, fixture::to_edge().swap_remove(0));
        let ToEdge::Snapshot { snapshot: expected, .. } = expected else {
            unreachable!("the fixture's first message is a snapshot")
        };
        assert_eq!(snapshot, *expected, "schema {number}: the snapshot file");
        let to_edge = read(number, "to-edge");
        let decoded: Vec<(u16, ToEdge)> = bodies(&to_edge)
            .into_iter()
            .map(|body| protocol::decode_to_edge(body).unwrap())
            .collect();
        let expected: Vec<(u16, ToEdge)> = fixture::to_edge()
            .into_iter()
            .map(|m| (number, fixture::as_read_in(number, m)))
            .collect();
        assert_eq!(decoded, expected, "schema {number}: control's frames");
        let to_control = read(number, "to-control");
        for (body, expected) in bodies(&to_control).into_iter().zip(fixture::to_control()) {
            assert_eq!(protocol::decode_to_control(body).unwrap(), expected, "schema {number}");
        }
        let hello = read(number, "hello");
        let (message, extension) = protocol::decode_hello(&hello[4..]).unwrap();
        assert_eq!(message, fixture::to_control()[0], "schema {number}: the hello");
        assert_eq!(extension, Some(hello_extension(&snapshot, number)), "schema {number}");
    }
}

#[test]
fn control_writes_to_an_older_edge_what_a_control_of_its_schema_wrote() {
    let current = read(schema::SCHEMA, "to-edge");
    for number in schema::OLDEST..schema::SCHEMA {
        let older = read(number, "to-edge");
        let (current, older) = (bodies(&current), bodies(&older));
        assert_eq!(current.len(), older.len());
        for (now, then) in current.into_iter().zip(older) {
            let frame = [&(now.len() as u32).to_be_bytes()[..], now].concat();
            let rewritten = protocol::in_schema(&frame, number).unwrap();
            assert_eq!(&rewritten[4..], then, "schema {number}");
            assert_eq!(protocol::in_schema(&frame, schema::SCHEMA).unwrap(), frame);
        }
    }
}

#[test]
fn a_schema_this_build_does_not_read_is_refused_by_number() {
    for number in [schema::OLDEST - 1, schema::SCHEMA + 1] {
        let mut body = vec![protocol::NUMBERED];
        body.extend_from_slice(&number.to_be_bytes());
        body.extend_from_slice(&bodies(&read(schema::SCHEMA, "to-edge"))[2][3..]);
        let err = protocol::decode_to_edge(&body).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("link schema {number}: this build reads")),
            "{err}"
        );
    }
}
