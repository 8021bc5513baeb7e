//! The query path allocates nothing: a counting global allocator watches
//! `Engine::respond` over every kind of answer (SPEC hot-path requirement).
mod common;

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
};

use common::{example_zones, query, Ask};
use hickory_proto::rr::RecordType;
use qdns_edge::{Engine, Transport};

struct Counting;

static ARMED: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ARMED.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if ARMED.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn respond_allocates_nothing() {
    let mut snapshot = qdns_zone::load_dir(&example_zones(), 1).unwrap();
    // example.net signed: DO=1 answers with RRSIGs and NSEC proofs allocate nothing
    // either.
    {
        use qdns_zone::dnssec::{sign_zone, Algorithm, KeyState, SignOptions, Signatures, ZoneKey};
        let net = snapshot
            .zones
            .iter_mut()
            .find(|z| z.origin == b"\x07example\x03net\x00")
            .unwrap();
        net.dnssec = Some(Box::new(Signatures::requested(Algorithm::EcdsaP256Sha256)));
        let key = ZoneKey::generate(Algorithm::EcdsaP256Sha256, KeyState::Active, 1).unwrap();
        sign_zone(net, &[key], SignOptions::at(1_800_000_000)).unwrap();
    }
    let engine = Engine::compile(&snapshot).unwrap();
    let plain = Ask::default();
    let classic = Ask { edns: None, ..plain };
    let signed = Ask {
        dnssec_ok: true,
        ..plain
    };
    let mut queries = vec![
        query("www.example.com.", RecordType::A, plain),
        query("WWW.EXAMPLE.COM.", RecordType::AAAA, classic),
        query("nope.example.com.", RecordType::A, plain),
        query("www.example.com.", RecordType::MX, plain),
        query("chain.example.com.", RecordType::A, plain),
        query("x.deep.sub.example.com.", RecordType::A, plain),
        query("a.wild.example.com.", RecordType::A, plain),
        query("example.com.", RecordType::MX, plain),
        query("example.com.", RecordType::ANY, plain),
        query("big.example.com.", RecordType::TXT, classic),
        query("www.example.org.", RecordType::A, plain),
        query("www.example.com.", RecordType::A, Ask { version: 1, ..plain }),
        // Policy sets (examples/zones/shop.example.toml): weighted, failover,
        // multivalue, zonal, alias, weighted CNAME chased.
        query("www.shop.example.", RecordType::A, plain),
        query("api.shop.example.", RecordType::A, plain),
        query("mv.shop.example.", RecordType::AAAA, plain),
        query("lb.shop.example.", RecordType::A, plain),
        query("app.shop.example.", RecordType::A, plain),
        query("shop.shop.example.", RecordType::A, plain),
        query("www.example.net.", RecordType::A, signed),
        query("nope.example.net.", RecordType::A, signed),
        query("www.example.net.", RecordType::MX, signed),
        query("example.net.", RecordType::DNSKEY, signed),
    ];
    let mut garbage = queries[0].clone();
    garbage.extend(b"trailing");
    queries.push(garbage);
    queries.push(vec![0; 5]);
    let mut out = vec![0u8; 65_535];
    // Warm up anything lazily initialised outside the query path.
    for q in &queries {
        engine.respond(q, &mut out, Transport::Udp);
    }
    ALLOCATIONS.store(0, Ordering::Relaxed);
    ARMED.store(true, Ordering::Relaxed);
    let mut answered = 0;
    for _ in 0..1000 {
        for q in &queries {
            for transport in [Transport::Udp, Transport::Tcp] {
                if engine.respond(q, &mut out, transport).is_some() {
                    answered += 1;
                }
            }
        }
    }
    ARMED.store(false, Ordering::Relaxed);
    assert_eq!(
        answered,
        1000 * 2 * (queries.len() - 1),
        "all but the 5-octet datagram answered"
    );
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), 0, "allocations on the query path");
}
