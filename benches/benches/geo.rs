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
    fmt::Write as _,
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use benches::{CURRENT, PEAK};
use qdns_testkit::{
    fixtures::ZONE_HEAD,
    mmdb::{write, GeoNet},
    Rng,
};

#[global_allocator]
static GLOBAL: benches::Peak = benches::Peak;

const CONTINENTS: [&str; 6] = ["EU", "NA", "AS", "AF", "SA", "OC"];
const SETS: usize = 50;

/// Country `i` of 240: a two-letter code and a continent.
fn country(i: usize) -> (String, &'static str) {
    let code = format!("{}{}", (b'A' + (i / 26) as u8) as char, (b'A' + (i % 26) as u8) as char);
    (code, CONTINENTS[i % CONTINENTS.len()])
}

/// Countries of a continent: country `i` is in continent `i % 6`.
fn of_continent(continent: usize, rng: &mut Rng) -> usize {
    rng.below(40) * CONTINENTS.len() + continent
}

/// (network, country index) over the IPv4 unicast space and `2000::/3`. As registries
/// allocate, each /8 (IPv4) or /16 (IPv6) belongs mostly to one continent (a tenth of
/// its networks elsewhere), and countries come in runs.
fn networks(v4_count: usize, rng: &mut Rng) -> Vec<(String, usize)> {
    let mut out = Vec::with_capacity(v4_count * 4 / 3);
    // Networks per /8 so that `v4_count` cover 1.0.0.0–223.255.255.255.
    let per_slash8 = (v4_count / 223).max(1);
    let mut place = 0;
    for slash8 in 1u32..224 {
        let home = rng.below(CONTINENTS.len());
        // Sizes summing to a /8: split it into `per_slash8` aligned pieces, about.
        let mut at = u64::from(slash8) << 24;
        let end = at + (1 << 24);
        let average = (1u64 << 24) / per_slash8 as u64;
        while at < end {
            let mut size = (average.next_power_of_two() >> rng.below(2)).max(256);
            while at % size != 0 || at + size > end {
                size /= 2;
            }
            if rng.chance(30) {
                let continent = if rng.chance(10) {
                    rng.below(CONTINENTS.len())
                } else {
                    home
                };
                place = of_continent(continent, rng);
            }
            let len = 32 - size.trailing_zeros();
            out.push((format!("{}/{len}", std::net::Ipv4Addr::from(at as u32)), place));
            at += size;
        }
    }
    let mut at: u128 = 0x2000u128 << 112;
    let mut home = 0;
    for i in 0..v4_count / 3 {
        if i % 2000 == 0 {
            home = rng.below(CONTINENTS.len());
        }
        let len = [20u32, 24, 29, 32, 36, 40, 44, 48][rng.below(8)];
        let size = 1u128 << (128 - len);
        at = at.div_ceil(size) * size;
        if rng.chance(30) {
            let continent = if rng.chance(10) {
                rng.below(CONTINENTS.len())
            } else {
                home
            };
            place = of_continent(continent, rng);
        }
        out.push((format!("{}/{len}", std::net::Ipv6Addr::from(at)), place));
        at += size;
    }
    out
}

fn zone(rng: &mut Rng) -> String {
    let mut zone = String::from(ZONE_HEAD);
    for s in 0..SETS {
        let _ = write!(
            zone,
            "\n[[rrset]]\nname = \"geo{s}\"\ntype = \"A\"\npolicy = \"geo\"\nmembers = [\n"
        );
        let mut used = std::collections::BTreeSet::new();
        for m in 0..6 {
            let (code, _) = country(rng.below(240));
            if used.insert(code.clone()) && !CONTINENTS.contains(&code.as_str()) && code != "AN" {
                let _ = writeln!(
                    zone,
                    "  {{ id = \"c{m}\", location = \"country:{code}\", values = [\"10.0.{s}.{m}\"] }},"
                );
            }
        }
        for (m, continent) in [CONTINENTS[s % 6], CONTINENTS[(s + 1) % 6]].iter().enumerate() {
            let _ = writeln!(
                zone,
                "  {{ id = \"k{m}\", location = \"{continent}\", values = [\"10.1.{s}.{m}\"] }},"
            );
        }
        let _ = writeln!(
            zone,
            "  {{ id = \"rest\", location = \"*\", values = [\"10.2.{s}.0\"] }},\n]"
        );
    }
    zone
}

const MIB: f64 = 1024.0 * 1024.0;

#[expect(clippy::cast_precision_loss, reason = "byte counts far below 2^52")]
fn main() {
    let v4_count = std::env::var("QDNS_GEO_NETWORKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400_000);
    let mut rng = Rng(0x6e0_2029);
    let dir = tempfile::tempdir().unwrap();
    let nets = networks(v4_count, &mut rng);
    let countries: Vec<(String, &str)> = (0..240).map(country).collect();
    let records: Vec<GeoNet<'_>> = nets
        .iter()
        .map(|(net, place)| GeoNet {
            net,
            continent: countries[*place].1,
            country: &countries[*place].0,
            subdivisions: &[],
        })
        .collect();
    let db = dir.path().join("country.mmdb");
    let started = Instant::now();
    write(&db, &records);
    println!(
        "geo/database: {} networks written in {:.1} s, {:.1} MiB",
        nets.len(),
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
    let frame = qdns_zone::sync::encode_snapshot(&snapshot, 0).unwrap();
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
