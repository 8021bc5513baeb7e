//! A country-sized geolocation database and a zone of geo sets over it, for the `geo`
//! and `xdp` benches (issue 29): no real GeoLite2 file is available offline, so one of
//! the same shape is written with MaxMind's own Perl writer (scripts/setup installs it).
use std::fmt::Write as _;

use qdns_testkit::{
    fixtures::ZONE_HEAD,
    mmdb::{write, GeoNet},
    Rng,
};

const CONTINENTS: [&str; 6] = ["EU", "NA", "AS", "AF", "SA", "OC"];
/// Geo sets of [`zone`].
pub const SETS: usize = 50;

/// Country `i` of 240: a two-letter code and a continent.
#[must_use]
pub fn country(i: usize) -> (String, &'static str) {
    let code = format!("{}{}", (b'A' + (i / 26) as u8) as char, (b'A' + (i % 26) as u8) as char);
    (code, CONTINENTS[i % CONTINENTS.len()])
}

/// Countries of a continent: country `i` is in continent `i % 6`.
fn of_continent(continent: usize, rng: &mut Rng) -> usize {
    rng.below(40) * CONTINENTS.len() + continent
}

/// The country of the next network: three times in ten a new one, mostly of the
/// `home` continent (one in ten elsewhere), else `place` again.
fn next_place(place: usize, home: usize, rng: &mut Rng) -> usize {
    if !rng.chance(30) {
        return place;
    }
    let continent = if rng.chance(10) {
        rng.below(CONTINENTS.len())
    } else {
        home
    };
    of_continent(continent, rng)
}

/// (network, country index) over the IPv4 unicast space and `2000::/3`. As registries
/// allocate, each /8 (IPv4) or /16 (IPv6) belongs mostly to one continent (a tenth of
/// its networks elsewhere), and countries come in runs.
#[must_use]
pub fn networks(v4_count: usize, rng: &mut Rng) -> Vec<(String, usize)> {
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
            place = next_place(place, home, rng);
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
        place = next_place(place, home, rng);
        out.push((format!("{}/{len}", std::net::Ipv6Addr::from(at)), place));
        at += size;
    }
    out
}

/// A zone (`t.example.`) of [`SETS`] geo sets `geo0`…: each names 6 countries, 2
/// continents and `*`.
#[must_use]
pub fn zone(rng: &mut Rng) -> String {
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

/// Writes a database of [`networks`] (`v4_count` IPv4 ones) to `path`; the number of
/// networks.
pub fn write_country_db(path: &std::path::Path, v4_count: usize, rng: &mut Rng) -> usize {
    let nets = networks(v4_count, rng);
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
    write(path, &records);
    nets.len()
}
