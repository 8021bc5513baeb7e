use qdns_zone::{
    dnssec::{Algorithm, Signature, Signatures},
    RecordSet, Snapshot, Zone,
};

use super::{
    apply, between, changed_names, resume, zone_digest, zone_digests, DeltaError, Run, SnapshotDelta, ZoneChange,
};

/// `label.origin` in wire form.
fn wire(label: &str, origin: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for part in label.split('.').chain(origin.split('.')).filter(|p| !p.is_empty()) {
        out.push(part.len() as u8);
        out.extend_from_slice(part.as_bytes());
    }
    out.push(0);
    out
}

fn set(name: &str, origin: &str, address: u32) -> RecordSet {
    RecordSet {
        name: wire(name, origin),
        rtype: 1,
        ttl: 300,
        rdata: vec![address.to_be_bytes().to_vec()],
        policy: None,
    }
}

fn zone(origin: &str, names: usize, signed: bool) -> Zone {
    let mut rrsets: Vec<RecordSet> = (0..names).map(|i| set(&format!("n{i:06}"), origin, i as u32)).collect();
    rrsets.sort_by(|a, b| (&a.name, a.rtype).cmp(&(&b.name, b.rtype)));
    let dnssec = signed.then(|| {
        Box::new(Signatures {
            algorithm: Algorithm::EcdsaP256Sha256,
            inception: 1,
            expiration: 2,
            sigs: rrsets
                .iter()
                .map(|s| Signature {
                    name: s.name.clone(),
                    rtype: s.rtype,
                    key: u64::from(s.rdata[0][3]),
                    ttl: s.ttl,
                    rdata: vec![vec![7; 64]],
                })
                .collect(),
        })
    });
    Zone {
        origin: wire("", origin),
        source: format!("{origin}.toml"),
        serial: 1,
        negative_ttl: 60,
        rrsets,
        slot_base: 0,
        slots: Vec::new(),
        dnssec,
        geo: None,
        transfer: None,
    }
}

fn snapshot(version: u64, zones: Vec<Zone>) -> Snapshot {
    Snapshot::new(version, zones, vec![u64::MAX])
}

/// The delta from `old` to `new`, through its encoding, applied to `old`: must be `new`.
fn round_trip(old: &Snapshot, new: &Snapshot) -> SnapshotDelta {
    let delta = between(old, new, &zone_digests(new), 4);
    let frame = postcard::to_stdvec(&delta).unwrap();
    let read: SnapshotDelta = postcard::from_bytes(&frame).unwrap();
    assert_eq!(apply(old.clone(), read).unwrap(), *new);
    delta
}

#[test]
fn an_unchanged_snapshot_keeps_every_zone() {
    let old = snapshot(1, vec![zone("a.example", 50, false), zone("b.example", 5, true)]);
    let mut new = old.clone();
    new.version = 2;
    let delta = round_trip(&old, &new);
    assert!(delta.zones.iter().all(|z| matches!(z, ZoneChange::Keep { .. })));
}

#[test]
fn one_edited_set_of_a_large_zone_ships_as_a_small_patch() {
    let old = snapshot(
        1,
        vec![zone("big.example", 20_000, true), zone("small.example", 3, false)],
    );
    let mut new = old.clone();
    new.version = 2;
    let edited = &mut new.zones[0];
    edited.serial = 2;
    edited.rrsets[12_345].rdata = vec![vec![192, 0, 2, 1]];
    edited.dnssec.as_mut().unwrap().sigs[12_345].rdata = vec![vec![9; 64]];
    let delta = round_trip(&old, &new);
    let size = postcard::to_stdvec(&delta).unwrap().len();
    let whole = postcard::to_stdvec(&new).unwrap().len();
    assert!(size < 1024, "{size} octets for one set of {whole}");
    assert!(matches!(delta.zones[0], ZoneChange::Patch(_)));
    assert!(matches!(delta.zones[1], ZoneChange::Keep { .. }));
}

#[test]
fn added_removed_and_reordered_zones_and_sets_apply_exactly() {
    let old = snapshot(
        1,
        vec![
            zone("a.example", 300, true),
            zone("b.example", 10, false),
            zone("c.example", 4, false),
        ],
    );
    let mut new = old.clone();
    new.version = 9;
    new.bitmap = vec![5, 6];
    // a: sets removed, added at the front, middle and end, one moved.
    let a = &mut new.zones[0];
    a.rrsets.remove(100);
    a.rrsets.remove(7);
    a.rrsets.insert(0, set("aaa", "a.example", 1));
    a.rrsets.insert(150, set("n000150x", "a.example", 2));
    a.rrsets.push(set("zzz", "a.example", 3));
    a.rrsets.swap(20, 200);
    a.dnssec.as_mut().unwrap().sigs.truncate(250);
    // b removed, d added, c moved first.
    let c = new.zones.remove(2);
    new.zones.remove(1);
    new.zones.insert(0, c);
    new.zones.push(zone("d.example", 7, false));
    let delta = round_trip(&old, &new);
    assert!(matches!(delta.zones[0], ZoneChange::Keep { .. }));
    assert!(matches!(delta.zones[1], ZoneChange::Patch(_)));
    assert!(matches!(delta.zones[2], ZoneChange::Whole(_)));
}

#[test]
fn random_edits_always_apply_to_the_same_snapshot() {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let base = snapshot(1, vec![zone("r.example", 200, true)]);
    for round in 0..300 {
        let mut new = base.clone();
        new.version = 2;
        let z = &mut new.zones[0];
        for _ in 0..=next(6) {
            let at = next(z.rrsets.len());
            match next(4) {
                0 => {
                    z.rrsets.remove(at);
                }
                1 => z.rrsets.insert(at, set(&format!("x{round}-{at}"), "r.example", 1)),
                2 => z.rrsets[at].ttl += 1,
                _ => {
                    let other = next(z.rrsets.len());
                    z.rrsets.swap(at, other);
                }
            }
        }
        if next(2) == 0 {
            let sigs = &mut z.dnssec.as_mut().unwrap().sigs;
            let at = next(sigs.len());
            sigs[at].ttl = 1;
            let other = next(sigs.len());
            sigs.swap(at, other);
        }
        round_trip(&base, &new);
    }
}

#[test]
fn a_zone_changed_mostly_is_sent_whole() {
    let old = snapshot(1, vec![zone("a.example", 10, false)]);
    let mut new = old.clone();
    new.version = 2;
    for s in &mut new.zones[0].rrsets[..8] {
        s.ttl = 1;
    }
    let delta = round_trip(&old, &new);
    assert!(matches!(delta.zones[0], ZoneChange::Whole(_)));
}

#[test]
fn a_delta_for_another_base_or_that_makes_another_zone_is_refused() {
    let old = snapshot(1, vec![zone("a.example", 40, false)]);
    let mut new = old.clone();
    new.version = 2;
    new.zones[0].rrsets[3].ttl = 9;
    let delta = between(&old, &new, &zone_digests(&new), 0);
    let mut other = old.clone();
    other.version = 5;
    assert_eq!(
        apply(other, delta.clone()),
        Err(DeltaError::WrongBase { wanted: 1, have: 5 })
    );
    // The edge's zone differs from the one control diffed against: the digest says so.
    let mut drifted = old.clone();
    drifted.zones[0].rrsets[30].ttl = 1;
    assert_eq!(
        apply(drifted, delta.clone()),
        Err(DeltaError::Digest("a.example.".into()))
    );
    // A zone the base lacks.
    let empty = snapshot(1, Vec::new());
    assert!(matches!(apply(empty, delta.clone()), Err(DeltaError::MissingZone(_))));
    // Runs reaching past the base, or taking an element twice.
    for bad in [
        vec![Run::Copy { from: 38, len: 5 }],
        vec![Run::Copy {
            from: u32::MAX,
            len: u32::MAX,
        }],
        vec![Run::Copy { from: 0, len: 2 }, Run::Copy { from: 1, len: 1 }],
    ] {
        let mut tampered = delta.clone();
        let ZoneChange::Patch(patch) = &mut tampered.zones[0] else {
            panic!("a patch")
        };
        patch.rrsets = bad;
        assert!(matches!(apply(old.clone(), tampered), Err(DeltaError::BadRun { .. })));
    }
}

#[test]
fn resuming_keeps_the_zones_whose_digest_the_edge_has() {
    let current = snapshot(8, vec![zone("a.example", 30, true), zone("b.example", 3, false)]);
    let mut served = current.clone();
    served.version = 3;
    served.zones[1].serial = 0;
    let have: Vec<(Vec<u8>, u64)> = served
        .zones
        .iter()
        .map(|z| (z.origin.clone(), zone_digest(z)))
        .collect();
    let delta = resume(3, &have, &current, &zone_digests(&current), 2).expect("most zones kept");
    assert!(matches!(delta.zones[0], ZoneChange::Keep { .. }));
    assert!(matches!(delta.zones[1], ZoneChange::Whole(_)));
    assert_eq!(apply(served, delta).unwrap(), current);
    // An edge that has none of the large zone: the whole snapshot serves it better.
    assert!(resume(3, &have[1..], &current, &zone_digests(&current), 2).is_none());
}

#[test]
fn the_digest_covers_what_edges_receive_and_not_controls_own_settings() {
    let a = zone("a.example", 5, false);
    let mut b = a.clone();
    b.transfer = Some(Box::default());
    assert_eq!(zone_digest(&a), zone_digest(&b));
    b.rrsets[0].rdata[0][0] ^= 1;
    assert_ne!(zone_digest(&a), zone_digest(&b));
}

/// Each owner's sets in `zone`, for comparing two versions name by name.
fn sets_by_owner(zone: &Zone) -> std::collections::HashMap<Vec<u8>, Vec<RecordSet>> {
    let mut out: std::collections::HashMap<Vec<u8>, Vec<RecordSet>> = std::collections::HashMap::new();
    for set in &zone.rrsets {
        out.entry(set.name.clone()).or_default().push(set.clone());
    }
    for sets in out.values_mut() {
        sets.sort_by_key(|s| s.rtype);
    }
    out
}

#[test]
fn changed_names_are_exactly_the_owners_whose_sets_differ() {
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let base = snapshot(1, vec![zone("c.example", 300, false), zone("k.example", 20, false)]);
    for round in 0..200 {
        let mut new = base.clone();
        new.version = 2;
        let z = &mut new.zones[0];
        z.serial = 2;
        for _ in 0..=next(5) {
            let at = next(z.rrsets.len());
            match next(3) {
                0 => {
                    z.rrsets.remove(at);
                }
                1 => z.rrsets.insert(at, set(&format!("x{round}-{at}"), "c.example", 1)),
                _ => z.rrsets[at].ttl += 1,
            }
        }
        let delta = round_trip(&base, &new);
        let changed = changed_names(&base, &delta).expect("a patch of an unsigned zone");
        assert!(changed.iter().all(|(origin, _)| *origin == base.zones[0].origin));
        let mut names: Vec<Vec<u8>> = changed.into_iter().map(|(_, name)| name).collect();
        names.sort();
        let (before, after) = (sets_by_owner(&base.zones[0]), sets_by_owner(&new.zones[0]));
        let mut differ: Vec<Vec<u8>> = before
            .keys()
            .chain(after.keys())
            .filter(|name| before.get(*name) != after.get(*name))
            .cloned()
            .collect();
        differ.sort();
        differ.dedup();
        assert_eq!(names, differ, "round {round}");
    }
}

#[test]
fn changed_names_refuse_what_is_more_than_set_changes() {
    let base = snapshot(1, vec![zone("s.example", 50, true), zone("u.example", 50, false)]);
    let mut new = base.clone();
    new.version = 2;
    new.zones[0].rrsets[3].ttl = 1;
    let delta = round_trip(&base, &new);
    assert_eq!(changed_names(&base, &delta), None, "a signed zone's patch");
    let mut new = base.clone();
    new.version = 2;
    new.zones.pop();
    let delta = round_trip(&base, &new);
    assert_eq!(changed_names(&base, &delta), None, "a zone dropped");
    let mut new = base.clone();
    new.version = 2;
    for s in &mut new.zones[1].rrsets[..40] {
        s.ttl = 1;
    }
    let delta = round_trip(&base, &new);
    assert_eq!(changed_names(&base, &delta), None, "a zone sent whole");
    let mut other = base.clone();
    other.version = 7;
    assert_eq!(changed_names(&other, &delta), None, "another base");
}
