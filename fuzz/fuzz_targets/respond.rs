//! Fuzzes the whole query path: parse + answer, over UDP and TCP size rules, against
//! the example zones. Any panic, or a response that is not a response to the input, is
//! a bug. The corpus (fuzz/corpus/respond) is replayed by `cargo test -p qdns-edge`.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use qdns_edge::{Engine, Transport};

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/zones");
        let snapshot = qdns_zone::load_dir(std::path::Path::new(dir), 1).expect("example zones load");
        Engine::compile(&snapshot).expect("example zones compile")
    })
}

fuzz_target!(|data: &[u8]| {
    let mut out = vec![0u8; 65_535];
    for transport in [Transport::Udp, Transport::Tcp] {
        if let Some(outcome) = engine().respond(data, &mut out, transport) {
            assert!(outcome.len >= 12 && outcome.len <= out.len());
            assert_eq!(out[..2], data[..2], "response ID is the query ID");
            assert!(out[2] & 0x80 != 0, "QR set");
            if transport == Transport::Udp {
                assert!(outcome.len <= 1232.max(512), "UDP response within the payload ceiling");
            }
        }
    }
});
