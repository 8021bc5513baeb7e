//! Parse + answer of one query through `Engine::respond` (the whole user-space query
//! path minus the socket): a plain A answer, an NXDOMAIN, and a 20-record TXT set.
//! Before the timings it prints the heap allocations per query, counted by a wrapping
//! global allocator.
//!
//! `cargo bench -p benches --bench answer`
use std::{
    alloc::{GlobalAlloc, Layout, System},
    hint::black_box,
    sync::atomic::{AtomicUsize, Ordering},
};

use benches::{example_engine, query};
use criterion::{criterion_group, Criterion, Throughput};
use qdns_edge::Transport;

struct Counting;
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn cases() -> [(&'static str, Vec<u8>, Transport); 4] {
    [
        ("plain_a", query("www.example.com.", 1, Some(1232)), Transport::Udp),
        ("weighted_a", query("www.shop.example.", 1, Some(1232)), Transport::Udp),
        ("nxdomain", query("nope.example.com.", 1, Some(1232)), Transport::Udp),
        (
            "txt_20_records_tcp",
            query("big.example.com.", 16, None),
            Transport::Tcp,
        ),
    ]
}

fn answer(c: &mut Criterion) {
    let engine = example_engine();
    let mut out = vec![0u8; 65_535];
    let mut group = c.benchmark_group("answer");
    group.throughput(Throughput::Elements(1));
    for (name, q, transport) in cases() {
        group.bench_function(name, |b| {
            b.iter(|| engine.respond(black_box(&q), black_box(&mut out), transport));
        });
    }
    let signed = benches::signed_example_engine();
    for (name, q) in signed_cases() {
        group.bench_function(name, |b| {
            b.iter(|| signed.respond(black_box(&q), black_box(&mut out), Transport::Udp));
        });
    }
    group.finish();
}

#[expect(clippy::cast_precision_loss, reason = "counts far below 2^52")]
fn report_allocations() {
    let engine = example_engine();
    let mut out = vec![0u8; 65_535];
    for (name, q, transport) in cases() {
        const RUNS: usize = 100_000;
        // One query first: per-thread set-up (arc-swap's reader slot, the draw seed)
        // happens once per thread, not per query.
        black_box(engine.respond(&q, &mut out, transport));
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        for _ in 0..RUNS {
            black_box(engine.respond(black_box(&q), &mut out, transport));
        }
        let per_query = (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / RUNS as f64;
        println!("answer/{name}: {per_query} allocations per query ({RUNS} queries)");
    }
    let signed = benches::signed_example_engine();
    for (name, q) in signed_cases() {
        const RUNS: usize = 100_000;
        black_box(signed.respond(&q, &mut out, Transport::Udp));
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        for _ in 0..RUNS {
            black_box(signed.respond(black_box(&q), &mut out, Transport::Udp));
        }
        let per_query = (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / RUNS as f64;
        println!("answer/{name}: {per_query} allocations per query ({RUNS} queries)");
    }
}

/// A signed zone (example.net): DO=0 beside DO=1 (RRSIGs; NSEC proofs for NXDOMAIN).
fn signed_cases() -> [(&'static str, Vec<u8>); 3] {
    [
        ("signed_a_do0", benches::query("www.example.net.", 1, Some(1232))),
        ("signed_a_do1", benches::dnssec_query("www.example.net.", 1)),
        ("signed_nxdomain_do1", benches::dnssec_query("nope.example.net.", 1)),
    ]
}

criterion_group!(benches, answer);

fn main() {
    report_allocations();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
