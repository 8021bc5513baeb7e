//! The values the golden files hold: every message kind of the link, and a snapshot
//! that reaches every type a snapshot is made of (record sets, every policy kind, client
//! sets, zonal and latency slots, probes with a load figure, signatures). Deterministic:
//! the same octets on every run.
use std::path::Path;

use qdns_link::{
    delta,
    protocol::{HealthDelta, ToControl, ToEdge, XdpReport},
};
use qdns_zone::{
    dnssec::{Algorithm, Signature, Signatures},
    Snapshot,
};

fn zones() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schema/zones")
}

/// The fixture zones loaded as version `version`, each zone's `source` its file's name
/// (the same octets wherever the checkout is).
fn load(version: u64) -> Snapshot {
    let mut snapshot = qdns_zone::load_dir(&zones(), version).expect("the fixture zones load");
    for zone in &mut snapshot.zones {
        let name = Path::new(&zone.source)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        zone.source = name.unwrap_or_default();
    }
    snapshot
}

fn bitmap(snapshot: &Snapshot) -> Vec<u64> {
    let words = snapshot.slot_count().div_ceil(64).max(1) as usize;
    (0..words as u64).map(|i| 0x5555_5555_5555_5555 ^ i).collect()
}

/// Version 6 of the fixture zones: the base a delta applies to.
pub fn base() -> Snapshot {
    let mut snapshot = load(6);
    snapshot.bitmap = bitmap(&snapshot);
    snapshot
}

/// Version 7 of intent revision 1234: one zone signed, one set changed.
pub fn snapshot() -> Snapshot {
    let mut snapshot = load(7);
    snapshot.bitmap = bitmap(&snapshot);
    snapshot.intent_revision = 1234;
    let zone = &mut snapshot.zones[0];
    zone.dnssec = Some(Box::new(Signatures {
        algorithm: Algorithm::Ed25519,
        inception: 1_796_000_000,
        expiration: 1_797_000_000,
        sigs: vec![Signature {
            name: zone.origin.clone(),
            rtype: 6,
            key: 0x0123_4567_89ab_cdef,
            ttl: 60,
            rdata: vec![vec![0, 6, 15, 2, 0, 0, 0, 60], vec![7; 64]],
        }],
    }));
    let set = zone.rrsets.iter_mut().find(|s| s.rtype == 1).expect("an A set");
    set.ttl += 1;
    snapshot
}

/// `message` as read in `schema`: without what that schema did not carry.
pub fn as_read_in(schema: u16, mut message: ToEdge) -> ToEdge {
    match &mut message {
        ToEdge::Snapshot { snapshot, .. } if schema < 6 => snapshot.intent_revision = 0,
        ToEdge::Delta(delta) if schema < 6 => delta.intent_revision = 0,
        _ => {}
    }
    message
}

/// Every control → edge message kind, in variant order.
pub fn to_edge() -> Vec<ToEdge> {
    let (base, snapshot) = (base(), snapshot());
    let digests = delta::zone_digests(&snapshot);
    let health = HealthDelta {
        snapshot: 7,
        seq: 3,
        words: vec![(0, 1), (2, u64::MAX)],
    };
    vec![
        ToEdge::Snapshot {
            snapshot: Box::new(snapshot.clone()),
            seq: 2,
        },
        ToEdge::Health(health.clone()),
        ToEdge::Keepalive,
        ToEdge::Cookies {
            current: [1; 16],
            previous: Some([2; 16]),
            next: None,
        },
        ToEdge::Delta(Box::new(delta::between(&base, &snapshot, &digests, 2))),
        ToEdge::HealthSince {
            since: 1,
            delta: health,
        },
    ]
}

/// Every edge → control message kind, in variant order.
pub fn to_control() -> Vec<ToControl> {
    vec![
        ToControl::Hello {
            edge: "edge-1".into(),
            serving: Some(6),
        },
        ToControl::Applied { snapshot: 7, seq: 3 },
        ToControl::Xdp(XdpReport {
            interfaces: vec!["eth0".into()],
            generation: 4,
            counters: vec![("seen".into(), 10), ("answered_a".into(), 9)],
        }),
        ToControl::Keepalive,
    ]
}
