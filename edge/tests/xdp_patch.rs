//! XDP table patches (`qdns_edge::xdp::patch`) against the user-space engine, through
//! `BPF_PROG_TEST_RUN` on the real program in the real kernel (needs root, as CI has).
//!
//! A zone goes through a series of edits — an address behind CNAME chains, MX and SRV
//! targets, names and empty non-terminals added and removed, a wildcard and a name
//! below it, serial bumps, a chain left dangling — each shipped as a snapshot delta,
//! compiled as an edge compiles it, and patched into the installed tables. After each,
//! every question about every name (before and after the edit, and names below them)
//! must get from the patched program the engine's answer byte for byte, and be answered
//! in XDP exactly when a program given the whole new generation answers it.
mod common;

use std::{collections::BTreeSet, fmt::Write as _};

use common::{
    frames::{check_response_frame, ipv4_udp_frame},
    netns::require_root,
    query, Ask,
};
use hickory_proto::rr::RecordType;
use qdns_edge::{
    engine::{Asked, Changes, MAX_MESSAGE},
    xdp::{patch, XdpProgram},
    Engine, Transport,
};
use qdns_zone::Snapshot;

const XDP_TX: u32 = 3;

/// The zone's master file at edit `round`, and its SOA serial.
fn zone_text(round: usize) -> (String, u32) {
    let mut text = String::new();
    let www = if round >= 1 { "192.0.2.11" } else { "192.0.2.10" };
    let mail = if round >= 3 { "192.0.2.26" } else { "192.0.2.25" };
    let wild = if round >= 4 { "192.0.2.98" } else { "192.0.2.99" };
    text.push_str("ns1 IN A 192.0.2.53\n");
    if round < 5 {
        let _ = writeln!(text, "www IN A {www}\nwww IN AAAA 2001:db8::10");
    }
    let _ = writeln!(text, "mail IN A {mail}\n@ IN MX 10 mail\n@ IN MX 20 www");
    let alias = if round >= 6 { "mail" } else { "www" };
    let _ = writeln!(
        text,
        "alias IN CNAME {alias}\nalias2 IN CNAME alias\nalias3 IN CNAME alias2"
    );
    text.push_str("_sip._tcp IN SRV 0 0 5060 www\n");
    let _ = writeln!(text, "*.wild IN A {wild}");
    if round >= 4 {
        text.push_str("foo.wild IN A 192.0.2.77\n");
    }
    text.push_str("chain IN CNAME nothing.wild2\n*.wild2 IN TXT \"synthesised\"\n");
    // Chains into what the wildcard synthesises: its new address (round 4), and a name
    // below foo.wild, which round 4 makes an NXDOMAIN.
    text.push_str("wref IN CNAME someone.wild\nfooref IN CNAME bar.foo.wild\n");
    if round < 2 {
        text.push_str("a.b.c IN TXT \"under two empty non-terminals\"\n");
    } else {
        text.push_str("x.y.z IN TXT \"new, under two new empty non-terminals\"\n");
    }
    let long_text = if round >= 7 {
        "a text long enough to go to the small-tail table, changed in round seven"
    } else {
        "a text long enough to go to the small-tail table of the XDP program"
    };
    let _ = writeln!(text, "long IN TXT \"{long_text}\"");
    if round >= 7 {
        text.push_str("v6 IN AAAA 2001:db8::7\n");
    }
    // A wildcard whose MX answer the tables relocate (made by asking for names beside
    // it), and round 7 adds one of the names asked.
    text.push_str("*.w5 IN MX 10 mail\n");
    if round >= 7 {
        text.push_str("q-x.w5 IN A 192.0.2.5\n");
    }
    // Round 8: a wildcard appears as an empty non-terminal below an existing name, so
    // names below that name are synthesised (NODATA) where they were NXDOMAIN.
    text.push_str("w3 IN A 192.0.2.3\ncw IN CNAME x.w3\n");
    if round >= 8 {
        text.push_str("a.*.w3 IN TXT \"below a wildcard that is an empty non-terminal\"\n");
    }
    // A hosted child zone (child.toml) that round 9 delegates to from here: its
    // delegation and glue make `ent2` an empty non-terminal of this zone.
    if round >= 9 {
        text.push_str("deep.ent2 IN NS ns1.deep.ent2\nns1.deep.ent2 IN A 192.0.2.200\n");
    }
    // A wildcard whose CNAME reads n001 (round 3 edits it), and a chain into what it
    // synthesises.
    text.push_str("*.w4 IN CNAME n001\naw IN CNAME foo.w4\n");
    for i in 0..200 {
        let last = if i == 1 && round >= 3 { 201 } else { i % 250 };
        let _ = writeln!(text, "n{i:03} IN A 198.51.100.{last}");
    }
    let serial = match round {
        0 => 1,
        1..=4 => 2,
        5..=8 => 3,
        _ => 4,
    };
    (text, serial)
}

fn write_zone(dir: &std::path::Path, round: usize) {
    let (text, serial) = zone_text(round);
    std::fs::write(dir.join("patch.example.zone"), text).unwrap();
    // Round 10: an SOA too long for the small table (node entries then pass).
    let mname = if round >= 10 {
        format!("{}.{}.patch.example.", "m".repeat(60), "n".repeat(60))
    } else {
        "ns1.patch.example.".to_owned()
    };
    std::fs::write(
        dir.join("child.toml"),
        "[zone]\norigin = \"deep.ent2.patch.example.\"\nttl = 300\n\n[zone.soa]\n\
         mname = \"ns1.deep.ent2.patch.example.\"\nrname = \"hostmaster.patch.example.\"\nserial = 1\n\
         refresh = 7200\nretry = 900\nexpire = 1209600\nminimum = 60\n\n[zone.ns]\n\
         names = [\"ns1.deep.ent2.patch.example.\"]\n\n[[rrset]]\nname = \"ns1\"\ntype = \"A\"\n\
         values = [\"192.0.2.200\"]\n\n[[rrset]]\nname = \"www\"\ntype = \"A\"\n\
         values = [\"192.0.2.202\"]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("patch.example.toml"),
        format!(
            "[zone]\norigin = \"patch.example.\"\nttl = 300\ninclude = \"patch.example.zone\"\n\n\
             [zone.soa]\nmname = \"{mname}\"\nrname = \"hostmaster.patch.example.\"\n\
             serial = {serial}\nrefresh = 7200\nretry = 900\nexpire = 1209600\nminimum = 60\n\n\
             [zone.ns]\nnames = [\"ns1.patch.example.\"]\n"
        ),
    )
    .unwrap();
}

/// Every name of the zone at any round, and names below them.
fn names() -> Vec<String> {
    let mut names = BTreeSet::new();
    for round in 0..=LAST_ROUND {
        let (text, _) = zone_text(round);
        for line in text.lines() {
            let owner = line.split_whitespace().next().unwrap();
            let name = if owner == "@" {
                "patch.example.".to_owned()
            } else {
                format!("{owner}.patch.example.")
            };
            names.insert(name.clone());
            names.insert(format!("below.{name}"));
        }
    }
    for extra in [
        "b.c",
        "c",
        "y.z",
        "z",
        "nothing.wild",
        "nothing.wild2",
        "zz.foo.wild",
        "absent",
    ] {
        names.insert(format!("{extra}.patch.example."));
    }
    names.into_iter().collect()
}

/// The last round of edits.
const LAST_ROUND: usize = 10;

/// Why a round's delta is left to a whole build.
fn refused(round: usize) -> Option<&'static str> {
    match round {
        9 => Some("a change of a parent zone at or below a hosted zone"),
        10 => Some("the SOA no longer fits the tables, or now does"),
        _ => None,
    }
}

const TYPES: &[RecordType] = &[
    RecordType::A,
    RecordType::AAAA,
    RecordType::MX,
    RecordType::TXT,
    RecordType::SRV,
    RecordType::CNAME,
    RecordType::SOA,
    RecordType::NS,
    RecordType::ANY,
    RecordType::CAA,
    RecordType::DS,
];

fn engine_of(snapshot: &Snapshot) -> Engine {
    Engine::compile(snapshot).expect("the zone compiles")
}

fn program_for(engine: &Engine) -> XdpProgram {
    let mut program = XdpProgram::load(&qdns_edge::xdp::any_address(53), engine.max_udp_payload()).expect("load");
    program.install(engine).expect("install");
    program
}

/// The program's answer to `dns` (`None`: it passed the query).
fn xdp_answer(program: &mut XdpProgram, dns: &[u8]) -> Option<Vec<u8>> {
    let frame = ipv4_udp_frame(dns, 53);
    let outcome = program.test_run(&frame, 1).expect("test run");
    (outcome.action == XDP_TX).then(|| check_response_frame(&frame, &outcome.packet))
}

fn engine_answer(engine: &Engine, dns: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; MAX_MESSAGE];
    let asked = Asked {
        transport: Transport::Udp,
        draw: 0,
        source: Some(std::net::IpAddr::from([127, 0, 0, 1])),
    };
    let outcome = engine.respond_with(dns, &mut out, asked).expect("an answer");
    out[..outcome.len].to_vec()
}

#[test]
fn patched_tables_answer_as_the_engine_and_as_a_whole_build() {
    require_root("BPF_PROG_TEST_RUN on the XDP program");
    let dir = tempfile::tempdir().unwrap();
    qdns_testkit::fixtures::copy_examples(dir.path());
    write_zone(dir.path(), 0);
    let mut snapshot = qdns_zone::load_dir(dir.path(), 1).expect("zones load");
    let mut engine = engine_of(&snapshot);
    let mut program = program_for(&engine);
    let names = names();
    for round in 1..=LAST_ROUND {
        write_zone(dir.path(), round);
        let next = qdns_zone::load_dir(dir.path(), snapshot.version + 1).expect("zones load");
        let delta = qdns_link::delta::between(&snapshot, &next, &qdns_link::delta::zone_digests(&next), 0);
        let names_changed = qdns_link::delta::changed_names(&snapshot, &delta).expect("a patch of set changes");
        let applied = qdns_link::delta::apply(snapshot.clone(), delta).expect("the delta applies");
        assert_eq!(applied, next);
        let latest = engine_of(&next).with_changes(Changes::new(snapshot.version, names_changed));
        let seed = program.patch_seed().expect("installed tables");
        let planned = patch::plan(&engine, &latest, seed);
        let stats = match (planned, refused(round)) {
            (Ok(planned), None) => program
                .apply_patch(planned, &latest.health())
                .expect("the patch writes"),
            (Err(why), Some(expected)) => {
                assert_eq!(why, expected, "round {round}");
                program.install(&latest).expect("install")
            }
            (Ok(_), Some(expected)) => panic!("round {round}: patched, but should be refused: {expected}"),
            (Err(why), None) => panic!("round {round}: {why}"),
        };
        let mut whole = program_for(&latest);
        let (mut answered, mut asked) = (0, 0);
        for name in &names {
            for &qtype in TYPES {
                for edns in [None, Some(1232)] {
                    let dns = query(name, qtype, Ask { edns, ..Ask::default() });
                    asked += 1;
                    let patched = xdp_answer(&mut program, &dns);
                    let built = xdp_answer(&mut whole, &dns);
                    assert_eq!(
                        patched.is_some(),
                        built.is_some(),
                        "round {round}: {name} {qtype}: answered in XDP by the patched tables {} and by a whole build {}",
                        patched.is_some(),
                        built.is_some()
                    );
                    if let Some(message) = patched {
                        answered += 1;
                        assert_eq!(
                            message,
                            engine_answer(&latest, &dns),
                            "round {round}: {name} {qtype} (EDNS {edns:?}): the patched program's answer is not the engine's"
                        );
                    }
                }
            }
        }
        // Most questions are answered in XDP (the rest: CNAME chains to wildcards, …),
        // but for an SOA too long for the tables (round 10: the node entries pass).
        if round < 10 {
            assert!(
                answered * 10 > asked * 7,
                "round {round}: {answered} of {asked} answered in XDP"
            );
        }
        assert_eq!(stats.crowded, 0, "round {round}");
        snapshot = next;
        engine = latest;
    }
}

#[test]
fn what_a_patch_does_not_cover_is_left_to_a_whole_build() {
    require_root("BPF_PROG_TEST_RUN on the XDP program");
    let dir = tempfile::tempdir().unwrap();
    qdns_testkit::fixtures::copy_examples(dir.path());
    write_zone(dir.path(), 0);
    let snapshot = qdns_zone::load_dir(dir.path(), 1).expect("zones load");
    let engine = engine_of(&snapshot);
    let program = program_for(&engine);
    // Not from a delta.
    let mut next = snapshot.clone();
    next.version = 2;
    let plain = engine_of(&next);
    assert!(patch::plan(&engine, &plain, program.patch_seed().unwrap()).is_err());
    // A delta over another version.
    let www: &[u8] = b"\x03www\x05patch\x07example\x00";
    let stale = engine_of(&next).with_changes(Changes::new(7, vec![(www[4..].to_vec(), www.to_vec())]));
    assert!(patch::plan(&engine, &stale, program.patch_seed().unwrap()).is_err());
    // A name with a routing policy (shop.example's weighted www).
    let shop: &[u8] = b"\x03www\x04shop\x07example\x00";
    let policy = engine_of(&next).with_changes(Changes::new(1, vec![(shop[4..].to_vec(), shop.to_vec())]));
    let why = patch::plan(&engine, &policy, program.patch_seed().unwrap()).err();
    assert!(why.is_some(), "a policy set is not patched");
    // A name at a zone cut (example.com's sub delegation).
    let glue: &[u8] = b"\x02ns\x03sub\x07example\x03com\x00";
    let cut = engine_of(&next).with_changes(Changes::new(1, vec![(glue[7..].to_vec(), glue.to_vec())]));
    assert_eq!(
        patch::plan(&engine, &cut, program.patch_seed().unwrap()).err(),
        Some("a name at or below a zone cut")
    );
    // A serial bump in a zone with a delegation (example.com's sub): its DS NODATA
    // carries the SOA in its own tail.
    let toml = dir.path().join("example.com.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, text.replace("serial = 2026120101", "serial = 2026120102")).unwrap();
    let bumped = qdns_zone::load_dir(dir.path(), 2).expect("zones load");
    let delta = qdns_link::delta::between(&snapshot, &bumped, &qdns_link::delta::zone_digests(&bumped), 0);
    let names = qdns_link::delta::changed_names(&snapshot, &delta).expect("set changes");
    let serial = engine_of(&bumped).with_changes(Changes::new(1, names));
    assert_eq!(
        patch::plan(&engine, &serial, program.patch_seed().unwrap()).err(),
        Some("the SOA of a zone with delegations changed")
    );
}
