//! Client-aware sets (`policy = "ip"`, SPEC §10) at scale, and their query cost.
//!
//! Writes a zone whose `ip` set reads a collection file of 100,000 prefixes (IPv4 /24s
//! spread over 8 locations, one member each, plus `*`), then measures three times
//! (median printed) with the peak heap and what stays allocated:
//! - load: `qdns_zone::load_dir` — the file read, the prefixes parsed, the rule table
//!   compiled (blocks and chains);
//! - engine: `Engine::compile` of that snapshot (what an edge holds).
//!
//! Then criterion times `Engine::respond_to` for a plain A query beside queries to the
//! 100,000-prefix set with ECS (a /24 inside a rule, and one in no rule) and without
//! (decided by the packet's source).
//!
//! `cargo bench -p benches --bench client_aware`; `QDNS_CIDR_PREFIXES` sets the count.
use std::{
    fmt::Write as _,
    hint::black_box,
    net::IpAddr,
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use benches::{CURRENT, PEAK};
use criterion::{Criterion, Throughput};
use qdns_edge::{Engine, Transport};
use qdns_testkit::fixtures::ZONE_HEAD;

#[global_allocator]
static GLOBAL: benches::Peak = benches::Peak;

const LOCATIONS: usize = 8;

fn prefixes() -> usize {
    std::env::var("QDNS_CIDR_PREFIXES")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(100_000)
}

/// The zone directory: `t.toml` with the `ip` set, `big.cidrs` with the prefixes (every
/// other /24 from 11.0.0.0, so blocks do not merge and the gaps between them are `*`).
fn write_zone(dir: &std::path::Path, n: usize) {
    let mut cidrs = String::with_capacity(n * 24);
    for i in 0..n as u32 {
        let net = 0x0b00_0000u32 + (i << 9);
        let _ = writeln!(
            cidrs,
            "{}/24 loc{}",
            std::net::Ipv4Addr::from(net),
            i as usize % LOCATIONS
        );
    }
    std::fs::write(dir.join("big.cidrs"), cidrs).unwrap();
    let mut zone = format!(
        r#"{ZONE_HEAD}
[[cidr_collection]]
id = "big"
file = "big.cidrs"

[[rrset]]
name = "www"
type = "A"
values = ["192.0.2.1"]

[[rrset]]
name = "near"
type = "A"
policy = "ip"
members = [
"#,
    );
    for l in 0..LOCATIONS {
        let _ = writeln!(
            zone,
            "  {{ id = \"m{l}\", cidr = \"big/loc{l}\", values = [\"10.0.0.{l}\"] }},"
        );
    }
    zone.push_str("  { id = \"rest\", cidr = \"*\", values = [\"10.0.0.99\"] },\n]\n");
    std::fs::write(dir.join("t.toml"), zone).unwrap();
}

/// Median of three runs of `f`: (time, peak heap over the run, heap left allocated).
fn measure<T>(mut f: impl FnMut() -> T) -> (Duration, usize, usize, T) {
    let mut runs = Vec::new();
    let mut last = None;
    for _ in 0..3 {
        drop(last.take());
        let base = CURRENT.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let started = Instant::now();
        let value = f();
        let took = started.elapsed();
        runs.push((
            took,
            PEAK.load(Ordering::Relaxed) - base,
            CURRENT.load(Ordering::Relaxed).saturating_sub(base),
        ));
        last = Some(value);
    }
    runs.sort_by_key(|r| r.0);
    let (took, peak, kept) = runs[1];
    (took, peak, kept, last.unwrap())
}

const MIB: f64 = 1024.0 * 1024.0;

/// A query for `name` A with an ECS option for `a.b.c.0/24`.
fn ecs_query(name: &str, net: [u8; 3]) -> Vec<u8> {
    let mut q = benches::query(name, 1, Some(1232));
    let option = [0, 8, 0, 7, 0, 1, 24, 0, net[0], net[1], net[2]];
    let rdlen_at = q.len() - 2;
    q[rdlen_at..].copy_from_slice(&(option.len() as u16).to_be_bytes());
    q.extend_from_slice(&option);
    q
}

#[expect(clippy::cast_precision_loss, reason = "byte counts far below 2^52")]
fn main() {
    let n = prefixes();
    let dir = tempfile::tempdir().unwrap();
    write_zone(dir.path(), n);
    let (took, peak, kept, snapshot) = measure(|| qdns_zone::load_dir(dir.path(), 1).unwrap());
    let rules = snapshot.zones[0]
        .rrsets
        .iter()
        .find_map(|s| s.policy.as_ref()?.client.as_deref())
        .unwrap();
    println!(
        "client_aware/load: {n} prefixes in {:.1} ms, peak heap {:.1} MiB, snapshot {:.1} MiB; {} blocks, {} chains",
        took.as_secs_f64() * 1000.0,
        peak as f64 / MIB,
        kept as f64 / MIB,
        rules.block_count(),
        rules.chains.len()
    );
    let (took, peak, kept, engine) = measure(|| Engine::compile(&snapshot).unwrap());
    println!(
        "client_aware/engine: compiled in {:.1} ms, peak heap {:.1} MiB, engine {:.1} MiB",
        took.as_secs_f64() * 1000.0,
        peak as f64 / MIB,
        kept as f64 / MIB
    );
    drop(snapshot);

    let source: IpAddr = "203.0.113.9".parse().unwrap();
    let inside = ecs_query("near.t.example.", [11, 0, 2]);
    let outside = ecs_query("near.t.example.", [11, 0, 3]);
    let plain = benches::query("www.t.example.", 1, Some(1232));
    let no_ecs = benches::query("near.t.example.", 1, Some(1232));
    let mut out = vec![0u8; 65_535];
    // Sanity: the answers are what the rules say.
    let answered = |q: &[u8], out: &mut Vec<u8>| {
        let o = engine.respond_to(q, out, Transport::Udp, source).unwrap();
        out[..o.len].to_vec()
    };
    assert!(answered(&inside, &mut out).windows(4).any(|w| w == [10, 0, 0, 1]));
    assert!(answered(&outside, &mut out).windows(4).any(|w| w == [10, 0, 0, 99]));
    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("client_aware");
    group.throughput(Throughput::Elements(1));
    for (name, q) in [
        ("plain_a", &plain),
        ("ip_set_ecs_matched", &inside),
        ("ip_set_ecs_star", &outside),
        ("ip_set_by_source", &no_ecs),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| engine.respond_to(black_box(q), black_box(&mut out), Transport::Udp, source));
        });
    }
    group.finish();
    c.final_summary();
}
