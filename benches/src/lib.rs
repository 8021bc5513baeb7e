//! Shared helpers of the qdns benchmarks: the example-zone engine and raw queries.
#![warn(missing_docs)]

use std::path::Path;

use qdns_edge::Engine;

/// The engine over `examples/zones`, as the edge would compile it.
///
/// # Panics
/// When the example zones do not load (a broken checkout).
#[must_use]
pub fn example_engine() -> Engine {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/zones");
    let snapshot = qdns_zone::load_dir(&dir, 1).unwrap_or_else(|e| panic!("example zones: {e}"));
    Engine::compile(&snapshot)
        .unwrap_or_else(|e| panic!("example zones: {e}"))
        .with_options(&served())
}

/// The options the server compiles with: answer counters on.
#[must_use]
pub fn served() -> qdns_edge::engine::ServeOptions {
    qdns_edge::engine::ServeOptions {
        answer_sets: Some(std::sync::Arc::default()),
        ..qdns_edge::engine::ServeOptions::default()
    }
}

/// Wire bytes of a query for `name` (presentation form) and `qtype`, with an EDNS OPT
/// record advertising `edns` octets when given.
#[must_use]
pub fn query(name: &str, qtype: u16, edns: Option<u16>) -> Vec<u8> {
    let mut msg = vec![0xbe, 0xef, 0x00, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(edns.is_some())];
    for label in name.trim_end_matches('.').split('.').filter(|l| !l.is_empty()) {
        msg.push(label.len() as u8);
        msg.extend_from_slice(label.as_bytes());
    }
    msg.push(0);
    msg.extend(qtype.to_be_bytes());
    msg.extend(1u16.to_be_bytes());
    if let Some(size) = edns {
        msg.extend([0, 0, 41]);
        msg.extend(size.to_be_bytes());
        msg.extend([0, 0, 0, 0, 0, 0]);
    }
    msg
}
