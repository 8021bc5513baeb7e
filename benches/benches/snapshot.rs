//! Snapshot compile and apply at scale, and bitmap delta apply.
//!
//! Generates one zone of 100,000 record sets (80,000 plain A, 10,000 weighted with two
//! checked members, 10,000 failover with two checked members: 40,000 health checks),
//! then measures, each three times (median printed) with the peak heap it needed:
//! - compile: `qdns_zone::load_dir` — TOML parse, validation, slots, initial health;
//! - encode: the postcard frame control sends, and its size;
//! - apply: what an edge does on receipt — decode the frame and `Engine::compile`.
//!
//! Then criterion times a one-word health delta applied to the engine.
//!
//! `cargo bench -p benches --bench snapshot`; `QDNS_SNAPSHOT_SCALE=10` multiplies every
//! count (1,000,000 record sets, 400,000 health checks).
use std::{
    fmt::Write as _,
    hint::black_box,
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use benches::{CURRENT, PEAK};
use criterion::Criterion;
use qdns_edge::{follow::apply_words, Engine};
use qdns_link::protocol::{self, ToEdge};

#[global_allocator]
static GLOBAL: benches::Peak = benches::Peak;

/// Record sets of each kind at scale 1.
const PLAIN_1: usize = 80_000;
const WEIGHTED_1: usize = 10_000;
const FAILOVER_1: usize = 10_000;

/// `QDNS_SNAPSHOT_SCALE` (default 1).
fn scale() -> usize {
    std::env::var("QDNS_SNAPSHOT_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(1)
}

fn zone_text() -> String {
    let (plain, weighted, failover) = (PLAIN_1 * scale(), WEIGHTED_1 * scale(), FAILOVER_1 * scale());
    let mut t = String::with_capacity(scale() * (24 << 20));
    t.push_str("[zone]\norigin = \"big.example.\"\nttl = 60\n[zone.soa]\nmname = \"ns.big.example.\"\nrname = \"h.big.example.\"\n");
    t.push_str("serial = 1\nrefresh = 7200\nretry = 900\nexpire = 1209600\nminimum = 60\n[zone.ns]\nnames = [\"ns.big.example.\"]\n");
    for i in 0..(weighted + failover) * 2 {
        let _ = writeln!(
            t,
            "[[health_check]]\nid = \"c{i}\"\ntype = \"http\"\nip = \"127.0.0.1\"\nport = {}\n",
            10000 + i % 50000
        );
    }
    for i in 0..plain {
        let _ = writeln!(
            t,
            "[[rrset]]\nname = \"h{i}\"\ntype = \"A\"\nvalues = [\"10.{}.{}.{}\"]\n",
            i >> 16,
            (i >> 8) & 255,
            i & 255
        );
    }
    for i in 0..weighted {
        let (a, b) = (2 * i, 2 * i + 1);
        let _ = writeln!(t, "[[rrset]]\nname = \"w{i}\"\ntype = \"A\"\npolicy = \"weighted\"\nmembers = [{{ id = \"a\", weight = 10, values = [\"192.0.2.1\"], health_check = \"c{a}\" }}, {{ id = \"b\", weight = 20, values = [\"192.0.2.2\"], health_check = \"c{b}\" }}]\n");
    }
    for i in 0..failover {
        let (p, s) = (2 * (weighted + i), 2 * (weighted + i) + 1);
        let _ = writeln!(t, "[[rrset]]\nname = \"f{i}\"\ntype = \"A\"\npolicy = \"failover\"\nmembers = [{{ id = \"p\", role = \"primary\", values = [\"192.0.2.3\"], health_check = \"c{p}\" }}, {{ id = \"s\", role = \"secondary\", values = [\"192.0.2.4\"], health_check = \"c{s}\" }}]\n");
    }
    t
}

/// Runs `f` three times; returns (median time, peak heap above the start, last result).
fn measure<T>(mut f: impl FnMut() -> T) -> (Duration, usize, T) {
    let mut times = Vec::new();
    let mut peak = 0;
    let mut last = None;
    for _ in 0..3 {
        drop(last.take());
        let base = CURRENT.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let started = Instant::now();
        let value = f();
        times.push(started.elapsed());
        peak = peak.max(PEAK.load(Ordering::Relaxed) - base);
        last = Some(value);
    }
    times.sort();
    (times[1], peak, last.unwrap_or_else(|| unreachable!()))
}

#[expect(clippy::cast_precision_loss, reason = "display only")]
fn mib(bytes: usize) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

fn report_scale() -> Engine {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = zone_text();
    std::fs::write(dir.path().join("big.toml"), &text).expect("write zone");
    println!(
        "snapshot: zone file {:.1} MiB, {} rrsets, {} health checks",
        mib(text.len()),
        (PLAIN_1 + WEIGHTED_1 + FAILOVER_1) * scale(),
        (WEIGHTED_1 + FAILOVER_1) * 2 * scale()
    );
    let (time, peak, snapshot) = measure(|| qdns_zone::load_dir(dir.path(), 1).expect("zone loads"));
    println!(
        "snapshot/compile_{}k: {:.3} s, peak heap {:.1} MiB",
        100 * scale(),
        time.as_secs_f64(),
        mib(peak)
    );
    let message = ToEdge::Snapshot {
        snapshot: Box::new(snapshot),
        seq: 0,
    };
    let (time, peak, frame) = measure(|| protocol::encode(&message).expect("encodes"));
    println!(
        "snapshot/encode_{}k: {:.3} s, frame {:.1} MiB, peak heap {:.1} MiB",
        100 * scale(),
        time.as_secs_f64(),
        mib(frame.len()),
        mib(peak)
    );
    drop(message);
    let (time, peak, engine) = measure(|| {
        let ToEdge::Snapshot { snapshot, .. } = protocol::decode::<ToEdge>(&frame[4..]).expect("decodes") else {
            unreachable!()
        };
        Engine::compile(&snapshot).expect("compiles")
    });
    println!(
        "snapshot/apply_{}k (decode + Engine::compile): {:.3} s, peak heap {:.1} MiB",
        100 * scale(),
        time.as_secs_f64(),
        mib(peak)
    );
    engine
}

fn delta(c: &mut Criterion, engine: &Engine) {
    let bitmap = engine.health();
    let mut flip = false;
    c.bench_function("snapshot/health_delta_apply_1_word", |b| {
        b.iter(|| {
            flip = !flip;
            let mut next = (*bitmap).clone();
            black_box(apply_words(
                &mut next,
                black_box(&[(0, if flip { u64::MAX } else { 0 })]),
            ));
            engine.set_health(next);
        });
    });
}

fn main() {
    let engine = report_scale();
    let mut criterion = Criterion::default().configure_from_args();
    delta(&mut criterion, &engine);
    criterion.final_summary();
}
