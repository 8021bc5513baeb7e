//! Signing cost at compile: `cargo run --release -p qdns-zone --example sign-cost -- N`
//! signs a zone of N plain A sets plus one multivalue set of 8 members (255 answers)
//! with ECDSAP256SHA256 (or `-- N ED25519`) and prints the time, the signatures and the snapshot growth.
#![allow(clippy::cast_precision_loss, reason = "figures for a report")]
use std::{fmt::Write as _, time::Instant};

use qdns_zone::dnssec::{sign_zone, Algorithm, KeyState, SignOptions, ZoneKey};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).map_or(Ok(100_000), |a| a.parse())?;
    let algorithm = match std::env::args().nth(2).as_deref() {
        Some("ED25519") => Algorithm::Ed25519,
        _ => Algorithm::EcdsaP256Sha256,
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
    let before = postcard::to_stdvec(&snapshot)?.len();
    let key = ZoneKey::generate(algorithm, KeyState::Active, 1)?;
    let started = Instant::now();
    sign_zone(&mut snapshot.zones[0], &[key], SignOptions::at(1_800_000_000))?;
    let took = started.elapsed();
    let after = postcard::to_stdvec(&snapshot)?.len();
    let sigs = snapshot.zones[0].dnssec.as_ref().map_or(0, |s| s.sigs.len());
    println!(
        "{n} sets, {}: {sigs} signatures in {:.2} s ({:.1} µs each); snapshot {:.1} → {:.1} MiB ({:.2}×)",
        algorithm.mnemonic(),
        took.as_secs_f64(),
        took.as_secs_f64() * 1e6 / sigs as f64,
        before as f64 / 1_048_576.0,
        after as f64 / 1_048_576.0,
        after as f64 / before as f64
    );
    Ok(())
}
