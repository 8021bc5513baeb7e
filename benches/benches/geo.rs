//! Geolocation tables at the scale of a full country database (issue 29).
//!
//! No real GeoLite2 file is available offline, so the bench writes one of the same
//! shape with MaxMind's own Perl writer (scripts/setup installs it): the IPv4 unicast
//! space 1.0.0.0–223.255.255.255 cut into consecutive aligned networks of /12 to /24 (about
//! as many as GeoLite2-Country holds) and `2000::/3` into /20 to /48 ones, each with a
//! country out of 240 (runs of one country, as registries allocate) and its continent.
//! Then a zone of 50 geo sets, each with 6 countries, 2 continents and `*`, is loaded
//! three times (median printed): database read, the zone's class table built (shared by
//! the 50 sets), its size in blocks and in the snapshot control ships.
//!
//! `cargo bench -p benches --bench geo`; `QDNS_GEO_NETWORKS` sets the IPv4 network count
//! (default 400,000; IPv6 gets a third of it).
use std::{
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use benches::{
    geo::{write_country_db, zone, SETS},
    CURRENT, PEAK,
};
use qdns_testkit::Rng;

#[global_allocator]
static GLOBAL: benches::Peak = benches::Peak;

const MIB: f64 = 1024.0 * 1024.0;

#[expect(clippy::cast_precision_loss, reason = "byte counts far below 2^52")]
fn main() {
    let v4_count = std::env::var("QDNS_GEO_NETWORKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400_000);
    let mut rng = Rng(0x6e0_2029);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("country.mmdb");
    let started = Instant::now();
    let networks = write_country_db(&db, v4_count, &mut rng);
    println!(
        "geo/database: {networks} networks written in {:.1} s, {:.1} MiB",
        started.elapsed().as_secs_f64(),
        std::fs::metadata(&db).unwrap().len() as f64 / MIB
    );
    let zones = dir.path().join("zones");
    std::fs::create_dir(&zones).unwrap();
    std::fs::write(zones.join("geo.toml"), zone(&mut rng)).unwrap();

    let mut runs: Vec<(Duration, usize, usize)> = Vec::new();
    let mut snapshot = None;
    for _ in 0..3 {
        drop(snapshot.take());
        let base = CURRENT.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let started = Instant::now();
        let loaded = qdns_zone::load_dir_from(
            &zones,
            1,
            qdns_zone::Sources {
                geoip_db: Some(&db),
                location: None,
                secondary_dir: None,
                dynamic_dir: None,
            },
        )
        .unwrap();
        runs.push((
            started.elapsed(),
            PEAK.load(Ordering::Relaxed) - base,
            CURRENT.load(Ordering::Relaxed).saturating_sub(base),
        ));
        snapshot = Some(loaded);
    }
    runs.sort_by_key(|r| r.0);
    let (took, peak, kept) = runs[1];
    let snapshot = snapshot.unwrap();
    let zone = &snapshot.zones[0];
    let table = zone.geo.as_deref().unwrap();
    let blocks = table.v4.len() + table.v6.len();
    let chains: usize = zone
        .rrsets
        .iter()
        .filter_map(|s| s.policy.as_ref()?.client.as_deref())
        .map(|r| r.chains.len())
        .sum();
    let frame = qdns_link::protocol::encode_snapshot(&snapshot, 0).unwrap();
    println!(
        "geo/load: database read and {SETS} geo sets compiled in {:.0} ms (median of 3), peak heap {:.1} MiB, snapshot {:.1} MiB",
        took.as_secs_f64() * 1000.0,
        peak as f64 / MIB,
        kept as f64 / MIB
    );
    println!(
        "geo/tables: the zone's class table {blocks} blocks ({} IPv4, {} IPv6), {} classes; {SETS} sets hold {chains} chains; snapshot frame {:.2} MiB",
        table.v4.len(),
        table.v6.len(),
        table.classes.len(),
        frame.len() as f64 / MIB
    );
}
