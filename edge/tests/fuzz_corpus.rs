//! Replays the fuzz corpus (fuzz/corpus/respond, grown by `cargo +nightly fuzz run
//! respond`) through `Engine::respond` with the fuzz target's checks, so every input the
//! fuzzer ever kept stays a regression test.
mod common;

use std::fs;

use qdns_edge::{Engine, Transport};

#[test]
fn fuzz_corpus_replays_cleanly() {
    let snapshot = qdns_zone::load_dir(&common::example_zones(), 1).unwrap();
    let engine = Engine::compile(&snapshot).unwrap();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/respond");
    let mut out = vec![0u8; 65_535];
    let mut replayed = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let data = fs::read(&path).unwrap();
        for transport in [Transport::Udp, Transport::Tcp] {
            if let Some(outcome) = engine.respond(&data, &mut out, transport) {
                assert!(outcome.len >= 12, "{}", path.display());
                assert_eq!(out[..2], data[..2], "{}", path.display());
                assert!(out[2] & 0x80 != 0, "{}", path.display());
                if transport == Transport::Udp {
                    assert!(outcome.len <= 1232, "{}", path.display());
                }
            }
        }
        replayed += 1;
    }
    assert!(
        replayed >= 20,
        "the corpus has {replayed} inputs; seed it (see fuzz/README.md)"
    );
}
