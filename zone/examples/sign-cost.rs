//! Signing cost at compile: `cargo run --release -p qdns-zone --example sign-cost -- N`
//! signs a zone of N plain A sets plus one multivalue set of 8 members (255 answers)
//! with ECDSAP256SHA256 (or `-- N ED25519`; `-- N ECDSA deterministic` for RFC 6979
//! nonces, as controls of a deployment sign) and prints the time, the signatures and the
//! snapshot growth; then the time to sign it again from those signatures, as a revision
//! that changes nothing in it is signed.
#![allow(clippy::cast_precision_loss, reason = "figures for a report")]
use std::{fmt::Write as _, time::Instant};

use qdns_zone::dnssec::{sign_zone, sign_zone_reusing, Algorithm, KeyState, Nonces, SignOptions, ZoneKey};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).map_or(Ok(100_000), |a| a.parse())?;
    let algorithm = match std::env::args().nth(2).as_deref() {
        Some("ED25519") => Algorithm::Ed25519,
        _ => Algorithm::EcdsaP256Sha256,
    };
    let nonces = match std::env::args().nth(3).as_deref() {
        Some("deterministic") => Nonces::Deterministic,
        _ => Nonces::Random,
    };
    let dir = std::env::temp_dir().join(format!("qdns-sign-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut text = format!(
        "[zone]\norigin = \"sign.example.\"\nttl = 300\ndnssec = true\ndnssec_algorithm = \"{}\"\ninclude = \"sign.example.zone\"\n\
         [zone.soa]\nmname = \"ns1\"\nrname = \"h\"\nserial = 1\nrefresh = 3600\nretry = 600\nexpire = 86400\nminimum = 300\n\
         [zone.ns]\nnames = [\"ns1\"]\n[[rrset]]\nname = \"mv\"\ntype = \"A\"\npolicy = \"multivalue\"\nmembers = [\n",
        algorithm.mnemonic()
    );
    for i in 0..8 {
        let _ = writeln!(text, "  {{ id = \"m{i}\", values = [\"198.51.100.{i}\"] }},");
    }
    text.push_str("]\n");
    std::fs::write(dir.join("sign.example.toml"), text)?;
    let mut master = String::from("ns1 A 192.0.2.53\n");
    for i in 0..n {
        let _ = writeln!(master, "h{i} A 10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255);
    }
    std::fs::write(dir.join("sign.example.zone"), master)?;
    let mut snapshot = qdns_zone::load_dir(&dir, 1)?;
    let _ = std::fs::remove_dir_all(&dir);
    let unsigned = snapshot.zones[0].clone();
    let before = postcard::to_stdvec(&snapshot)?.len();
    let key = ZoneKey::generate(algorithm, KeyState::Active, 1)?;
    let started = Instant::now();
    let options = SignOptions {
        nonces,
        ..SignOptions::at(1_800_000_000)
    };
    sign_zone(&mut snapshot.zones[0], std::slice::from_ref(&key), options)?;
    let took = started.elapsed();
    let after = postcard::to_stdvec(&snapshot)?.len();
    let sigs = snapshot.zones[0].dnssec.as_ref().map_or(0, |s| s.sigs.len());
    println!(
        "{n} sets, {} ({nonces:?} nonces): {sigs} signatures in {:.2} s ({:.1} µs each); snapshot {:.1} → {:.1} MiB ({:.2}×)",
        algorithm.mnemonic(),
        took.as_secs_f64(),
        took.as_secs_f64() * 1e6 / sigs as f64,
        before as f64 / 1_048_576.0,
        after as f64 / 1_048_576.0,
        after as f64 / before as f64
    );
    // A revision that leaves the zone as it was (control signs each revision's zones
    // again, taking what the one before signed for the same answers in the same window).
    let mut again = unsigned;
    let started = Instant::now();
    sign_zone_reusing(&mut again, &[key], options, snapshot.zones[0].dnssec.as_deref())?;
    println!(
        "signed again from those signatures (nothing changed): {:.2} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
