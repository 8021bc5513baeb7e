//! Shared helpers of the qdns benchmarks: the example-zone engine and raw queries.
#![warn(missing_docs)]

pub mod geo;

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

/// [`example_engine`] with `example.net.` signed as control signs it (ECDSAP256SHA256).
///
/// # Panics
/// When the example zones do not load or sign.
#[must_use]
pub fn signed_example_engine() -> Engine {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/zones");
    let mut snapshot = qdns_zone::load_dir(&dir, 1).unwrap_or_else(|e| panic!("example zones: {e}"));
    sign_example_net(&mut snapshot);
    Engine::compile(&snapshot)
        .unwrap_or_else(|e| panic!("example zones: {e}"))
        .with_options(&served())
}

/// Signs `example.net.` of `snapshot` with a new key, valid from now.
///
/// # Panics
/// When the snapshot has no `example.net.` or it does not sign.
pub fn sign_example_net(snapshot: &mut qdns_zone::Snapshot) {
    sign_zone_of(snapshot, b"\x07example\x03net\x00");
}

/// Signs the zone `origin` (wire form) of `snapshot` as control signs it: a new
/// ECDSAP256SHA256 key, valid from now.
///
/// # Panics
/// When the snapshot has no such zone or it does not sign.
pub fn sign_zone_of(snapshot: &mut qdns_zone::Snapshot, origin: &[u8]) {
    use qdns_zone::dnssec::{sign_zone, Algorithm, KeyState, SignOptions, Signatures, ZoneKey};
    let zone = snapshot
        .zones
        .iter_mut()
        .find(|z| z.origin == origin)
        .unwrap_or_else(|| panic!("no zone {origin:?}"));
    zone.dnssec = Some(Box::new(Signatures::requested(Algorithm::EcdsaP256Sha256)));
    let key = ZoneKey::generate(Algorithm::EcdsaP256Sha256, KeyState::Active, 1).unwrap_or_else(|e| panic!("{e}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    sign_zone(zone, &[key], SignOptions::at(now)).unwrap_or_else(|e| panic!("{e}"));
}

/// [`query`] with EDNS (1,232 octets) and DO=1, as validating resolvers ask.
#[must_use]
pub fn dnssec_query(name: &str, qtype: u16) -> Vec<u8> {
    let mut msg = query(name, qtype, Some(1232));
    let flags = msg.len() - 4;
    msg[flags] = 0x80;
    msg
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

/// A global allocator that forwards to the system's and tracks the bytes live now and
/// their peak, for benchmarks that report memory: declare it in the bench binary with
/// `#[global_allocator] static GLOBAL: benches::Peak = benches::Peak;`.
pub struct Peak;

/// Bytes allocated now (through [`Peak`]).
pub static CURRENT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// Most bytes allocated at once since it was last reset.
pub static PEAK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; tracks live and peak bytes on the side.
unsafe impl std::alloc::GlobalAlloc for Peak {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        use std::sync::atomic::Ordering::Relaxed;
        let now = CURRENT.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(now, Relaxed);
        // SAFETY: same contract as ours.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        CURRENT.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}
