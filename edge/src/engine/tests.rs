//! Engine cases that are awkward to reach over a socket: CNAME loops and chain limits,
//! names beyond compression-pointer range, required glue that does not fit.
use std::fmt::Write as _;

use hickory_proto::{
    op::{Message, Query, ResponseCode},
    rr::{Name, RecordType},
};

use super::{Engine, Outcome, Transport};

use qdns_testkit::fixtures::ZONE_HEAD as HEAD;

fn engine(rrsets: &str) -> Engine {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.toml"), format!("{HEAD}{rrsets}")).unwrap();
    Engine::compile(&qdns_zone::load_dir(dir.path(), 1).unwrap()).unwrap()
}

fn rrset(name: &str, rtype: &str, values: &[&str]) -> String {
    let values: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!(
        "[[rrset]]\nname = \"{name}\"\ntype = \"{rtype}\"\nvalues = [{}]\n",
        values.join(", ")
    )
}

fn ask(engine: &Engine, name: &str, qtype: RecordType, transport: Transport) -> (Message, Outcome) {
    let mut query = Message::query();
    query.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    let bytes = query.to_vec().unwrap();
    let mut out = vec![0u8; 65_535];
    let outcome = engine.respond(&bytes, &mut out, transport).unwrap();
    (Message::from_vec(&out[..outcome.len]).unwrap(), outcome)
}

#[test]
fn cname_loop_ends_where_it_closes() {
    // RFC 1034 §3.6.2 / RFC 2181 §5: the two records of the loop, once each (knotd
    // answers the same).
    let e = engine(&(rrset("a", "CNAME", &["b"]) + &rrset("b", "CNAME", &["a"])));
    let (msg, _) = ask(&e, "a.t.example.", RecordType::A, Transport::Udp);
    assert_eq!(msg.metadata.response_code, ResponseCode::NoError);
    assert_eq!(msg.answers.len(), 2, "{msg:?}");
    assert!(msg.answers.iter().all(|r| r.record_type() == RecordType::CNAME));
    let e = engine(&rrset("self", "CNAME", &["self"]));
    let (msg, _) = ask(&e, "self.t.example.", RecordType::A, Transport::Udp);
    assert_eq!(msg.answers.len(), 1, "{msg:?}");
}

#[test]
fn long_cname_chain_ends_at_the_chain_limit() {
    let chain: String = (0..12)
        .map(|i| rrset(&format!("c{i}"), "CNAME", &[&format!("c{}", i + 1)]))
        .collect();
    let e = engine(&chain);
    let (msg, _) = ask(&e, "c0.t.example.", RecordType::A, Transport::Udp);
    assert_eq!(msg.answers.len(), super::respond::MAX_CNAME_CHAIN + 1);
}

#[test]
fn rrsig_and_nsec_at_a_cname_owner_are_not_chased() {
    // RFC 2181 §10.1, RFC 4035 §2.5: these types stand beside a CNAME; NODATA here.
    let e = engine(&(rrset("a", "CNAME", &["b"]) + &rrset("b", "A", &["192.0.2.1"])));
    for qtype in [RecordType::RRSIG, RecordType::NSEC] {
        let (msg, _) = ask(&e, "a.t.example.", qtype, Transport::Udp);
        assert_eq!(msg.metadata.response_code, ResponseCode::NoError);
        assert!(msg.answers.is_empty(), "{qtype}: {msg:?}");
        assert_eq!(msg.authorities[0].record_type(), RecordType::SOA);
    }
    let (msg, _) = ask(&e, "a.t.example.", RecordType::A, Transport::Udp);
    assert_eq!(msg.answers.len(), 2);
}

#[test]
fn chain_into_a_missing_name_is_nxdomain_with_the_cname() {
    let e = engine(&rrset("a", "CNAME", &["gone"]));
    let (msg, _) = ask(&e, "a.t.example.", RecordType::A, Transport::Udp);
    // RFC 6604: the RCODE describes the last name of the chain.
    assert_eq!(msg.metadata.response_code, ResponseCode::NXDomain);
    assert_eq!(msg.answers.len(), 1);
    assert_eq!(msg.authorities[0].record_type(), RecordType::SOA);
    assert_eq!(msg.authorities[0].ttl, 5);
}

#[test]
fn answers_past_pointer_range_decode_and_oversize_truncates() {
    // 200 TXT records of ~257 octets (~51 KB): the answer runs past offset 0x3fff, the
    // owners keep pointing at names early in the message, and it decodes cleanly.
    // (The literal fallback for far names is covered by the builder's tests.)
    let mut values = Vec::new();
    for i in 0..200 {
        let mut v = String::from("\"");
        let _ = write!(v, "{i:04}");
        v.push_str(&"x".repeat(240));
        v.push('"');
        values.push(v);
    }
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    let e = engine(&(rrset("big", "TXT", &refs) + &rrset("alias", "CNAME", &["big"])));
    let (msg, outcome) = ask(&e, "alias.t.example.", RecordType::TXT, Transport::Tcp);
    assert!(outcome.len > 0x3fff, "{}", outcome.len);
    assert_eq!(msg.answers.len(), 201);
    assert!(msg.answers[1..].iter().all(|r| r.name.to_ascii() == "big.t.example."));
    let (msg, _) = ask(&e, "alias.t.example.", RecordType::TXT, Transport::Udp);
    assert!(msg.metadata.truncation);
    // Past 65,535 octets even TCP cannot carry it: TC, never a broken message.
    let more: Vec<String> = (200..300).map(|i| format!("\"{i:04}{}\"", "y".repeat(240))).collect();
    let all: Vec<&str> = refs.iter().copied().chain(more.iter().map(String::as_str)).collect();
    let e = engine(&rrset("big", "TXT", &all));
    let (msg, _) = ask(&e, "big.t.example.", RecordType::TXT, Transport::Tcp);
    assert!(msg.metadata.truncation && msg.answers.is_empty());
}

#[test]
fn glue_that_does_not_fit_truncates_the_referral() {
    // 13 name servers with long names and glue: the NS set fits 512, the glue does not.
    let mut zone = String::new();
    let mut ns = Vec::new();
    for i in 0..13 {
        let host = format!("ns{i}-with-a-rather-long-label-to-fill-the-space.sub");
        ns.push(host.clone());
        zone += &rrset(&host, "A", &[&format!("192.0.2.{i}")]);
        zone += &rrset(&host, "AAAA", &[&format!("2001:db8::{i}")]);
    }
    let refs: Vec<&str> = ns.iter().map(String::as_str).collect();
    zone += &rrset("sub", "NS", &refs);
    let e = engine(&zone);
    let (msg, outcome) = ask(&e, "www.sub.t.example.", RecordType::A, Transport::Udp);
    assert!(
        outcome.truncated && msg.metadata.truncation,
        "required glue missing → TC (RFC 9471)"
    );
    let (msg, _) = ask(&e, "www.sub.t.example.", RecordType::A, Transport::Tcp);
    assert_eq!(msg.authorities.len(), 13);
    assert_eq!(msg.additionals.len(), 26);
}

#[test]
fn optional_additional_data_is_dropped_not_truncated() {
    let mut zone = rrset("@", "MX", &["10 mx"]);
    let addrs: Vec<String> = (0..60).map(|i| format!("2001:db8::{i}")).collect();
    let refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    zone += &rrset("mx", "AAAA", &refs);
    let e = engine(&zone);
    let (msg, outcome) = ask(&e, "t.example.", RecordType::MX, Transport::Udp);
    assert!(!outcome.truncated);
    assert_eq!(msg.answers.len(), 1);
    assert!(
        msg.additionals.is_empty(),
        "the AAAA set does not fit 512 and is left out whole"
    );
}

#[test]
fn compile_rejects_a_snapshot_without_soa() {
    let mut snapshot = {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t.toml"), HEAD).unwrap();
        qdns_zone::load_dir(dir.path(), 1).unwrap()
    };
    snapshot.zones[0].rrsets.retain(|set| set.rtype != 6);
    let err = Engine::compile(&snapshot).err().unwrap();
    assert_eq!(err.to_string(), "zone t.example.: no SOA record at the apex");
}

/// Answers per member: the chosen member's bit at the set's counter block, through a
/// CNAME too; nothing for plain sets or without a registry; blocks kept across engines.
#[test]
fn policy_answers_name_their_members_for_the_counters() {
    let zone = format!(
        "{}{}{}",
        rrset("plain", "A", &["192.0.2.1"]),
        rrset("alias", "CNAME", &["pool.t.example."]),
        "[[rrset]]\nname = \"pool\"\ntype = \"A\"\npolicy = \"multivalue\"\nmembers = [\
         { id = \"x\", values = [\"192.0.2.10\"] }, { id = \"y\", values = [\"192.0.2.11\"] }]\n\
         [[rrset]]\nname = \"one\"\ntype = \"A\"\npolicy = \"failover\"\nmembers = [\
         { id = \"p\", role = \"primary\", values = [\"192.0.2.20\"] }, \
         { id = \"s\", role = \"secondary\", values = [\"192.0.2.21\"] }]\n",
    );
    let without = engine(&zone);
    assert!(without.counted_sets().is_empty());
    assert_eq!(
        ask(&without, "one.t.example.", RecordType::A, Transport::Udp).1.members,
        None
    );

    let sets = std::sync::Arc::new(crate::answers::AnswerSets::default());
    let options = super::ServeOptions {
        answer_sets: Some(std::sync::Arc::clone(&sets)),
        ..super::ServeOptions::default()
    };
    let counted = engine(&zone).with_options(&options);
    let mut listed = counted.counted_sets();
    listed.sort();
    let base = |label: &str| listed.iter().find(|(l, ..)| l == label).map(|(_, b, _)| *b).unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed
        .iter()
        .any(|(l, _, ids)| l == "one.t.example. A" && ids == &["p", "s"]));
    let one = ask(&counted, "one.t.example.", RecordType::A, Transport::Udp).1;
    assert_eq!(
        one.members,
        Some(crate::answers::AnsweredMembers {
            counter: base("one.t.example. A"),
            mask: 0b01
        })
    );
    let chased = ask(&counted, "alias.t.example.", RecordType::A, Transport::Udp).1;
    assert_eq!(
        chased.members,
        Some(crate::answers::AnsweredMembers {
            counter: base("pool.t.example. A"),
            mask: 0b11
        })
    );
    assert_eq!(
        ask(&counted, "plain.t.example.", RecordType::A, Transport::Udp)
            .1
            .members,
        None
    );
    // A recompiled engine keeps the blocks (counters never change meaning).
    let again = engine(&zone).with_options(&options);
    let mut relisted = again.counted_sets();
    relisted.sort();
    assert_eq!(
        relisted.iter().map(|(l, b, _)| (l.clone(), *b)).collect::<Vec<_>>(),
        listed.iter().map(|(l, b, _)| (l.clone(), *b)).collect::<Vec<_>>()
    );
}

#[test]
fn nodes_are_the_zone_names_only() {
    // Every owner and its ancestors up to the apex, nothing above it (the XDP tables
    // are built from these: a node for `com.` in zone example.com. would answer
    // NXDOMAIN for names of no zone here).
    let snapshot = qdns_zone::load_dir(&qdns_testkit::fixtures::example_zones(), 1).unwrap();
    let engine = Engine::compile(&snapshot).unwrap();
    let nodes = engine.export();
    assert!(nodes.len() > 10);
    for node in &nodes {
        assert!(
            node.name.len() >= node.apex_len,
            "node {} above its apex",
            qdns_zone::name::to_text(node.name)
        );
    }
    let names: std::collections::HashSet<String> = nodes.iter().map(|n| qdns_zone::name::to_text(n.name)).collect();
    // Empty non-terminals are nodes too (NODATA, not NXDOMAIN).
    for name in ["example.com.", "www.example.com.", "shop.example."] {
        assert!(names.contains(name), "{name} missing from {names:?}");
    }
}

#[test]
fn a_zone_asking_for_dnssec_is_refused_unless_control_signed_it() {
    let dir = tempfile::tempdir().unwrap();
    let head = HEAD.replacen("ttl = 60\n", "ttl = 60\ndnssec = true\n", 1);
    std::fs::write(dir.path().join("t.toml"), head).unwrap();
    let mut snapshot = qdns_zone::load_dir(dir.path(), 1).unwrap();
    let err = Engine::compile(&snapshot).err().expect("an unsigned zone is refused");
    assert!(err.to_string().contains("standalone edge cannot sign"), "{err}");
    let key = qdns_zone::dnssec::ZoneKey::generate(
        qdns_zone::dnssec::Algorithm::EcdsaP256Sha256,
        qdns_zone::dnssec::KeyState::Active,
        1,
    )
    .unwrap();
    qdns_zone::dnssec::sign_zone(
        &mut snapshot.zones[0],
        &[key],
        qdns_zone::dnssec::SignOptions::at(1_800_000_000),
    )
    .unwrap();
    let engine = Engine::compile(&snapshot).unwrap();
    assert_eq!(engine.dnssec_expiration(), Some(1_800_000_000 + 14 * 86_400));
}

#[test]
fn ds_at_a_hosted_child_apex_is_answered_from_the_parent() {
    // RFC 4035 §3.1.4.1: authoritative for both sides of a cut, answer DS from the
    // parent; the child's own apex answers everything else.
    let dir = tempfile::tempdir().unwrap();
    let parent = rrset("kid", "NS", &["ns.kid.t.example."])
        + &rrset("ns.kid", "A", &["192.0.2.53"])
        + &rrset(
            "kid",
            "DS",
            &["12345 13 2 2BB183AF5F22588179A53B0A98631FAD1A292118C8A4D1C79A5A78A2FCDA4F0F"],
        );
    std::fs::write(dir.path().join("t.toml"), format!("{HEAD}{parent}")).unwrap();
    let child = HEAD.replace("t.example.", "kid.t.example.") + &rrset("www", "A", &["192.0.2.80"]);
    std::fs::write(dir.path().join("kid.toml"), child).unwrap();
    // A hosted zone whose parent does not delegate to it answers its own DS (NODATA).
    let orphan = HEAD.replace("t.example.", "lone.t.example.");
    std::fs::write(dir.path().join("lone.toml"), orphan).unwrap();
    let e = Engine::compile(&qdns_zone::load_dir(dir.path(), 1).unwrap()).unwrap();

    let (msg, _) = ask(&e, "kid.t.example.", RecordType::DS, Transport::Udp);
    assert_eq!(msg.metadata.response_code, ResponseCode::NoError, "{msg:?}");
    assert!(msg.metadata.authoritative, "{msg:?}");
    assert_eq!(msg.answers.len(), 1, "{msg:?}");
    assert_eq!(msg.answers[0].record_type(), RecordType::DS);

    let (msg, _) = ask(&e, "kid.t.example.", RecordType::SOA, Transport::Udp);
    assert_eq!(msg.answers.len(), 1, "{msg:?}");
    assert_eq!(msg.answers[0].name.to_ascii(), "kid.t.example.", "the child's own SOA");
    let (msg, _) = ask(&e, "www.kid.t.example.", RecordType::A, Transport::Udp);
    assert_eq!(msg.answers.len(), 1, "{msg:?}");

    let (msg, _) = ask(&e, "lone.t.example.", RecordType::DS, Transport::Udp);
    assert_eq!(msg.metadata.response_code, ResponseCode::NoError, "{msg:?}");
    assert!(msg.answers.is_empty(), "{msg:?}");
    let soa = msg.authorities.first().map(|r| r.name.to_ascii());
    assert_eq!(soa.as_deref(), Some("lone.t.example."), "the child's NODATA: {msg:?}");
}

/// Two engines read a health bitmap alike when their snapshots name the same slots in
/// the same places: an edited record keeps the layout, a zone of checks gone changes it.
#[test]
fn health_layouts_match_when_only_records_change() {
    let dir = tempfile::tempdir().unwrap();
    qdns_testkit::fixtures::copy_examples(dir.path());
    let compile = |dir: &std::path::Path| Engine::compile(&qdns_zone::load_dir(dir, 1).unwrap()).unwrap();
    let before = compile(dir.path());
    let zone = dir.path().join("example.com.toml");
    let text = std::fs::read_to_string(&zone).unwrap();
    assert!(text.contains("192.0.2.10"));
    std::fs::write(&zone, text.replace("192.0.2.10", "192.0.2.12")).unwrap();
    let edited = compile(dir.path());
    assert_eq!(before.health_layout(), edited.health_layout());
    std::fs::remove_file(dir.path().join("shop.example.toml")).unwrap();
    let fewer = compile(dir.path());
    assert_ne!(before.health_layout(), fewer.health_layout());
    assert_ne!(Engine::default().health_layout(), before.health_layout());
}

/// The codes of the OPT record's options of `response`; `None` without one.
fn option_codes(response: &[u8]) -> Option<Vec<u16>> {
    let message = Message::from_vec(response).unwrap();
    let edns = message.edns.as_ref()?;
    Some(
        edns.options()
            .as_ref()
            .iter()
            .map(|(code, _)| u16::from(*code))
            .collect(),
    )
}

/// RFC 8914 Extended DNS Errors: an edge without a snapshot answers SERVFAIL with EDE
/// 14 (Not Ready), a name in no zone REFUSED with EDE 20 (Not Authoritative) — each only
/// to a query with EDNS; answers of our zones carry none.
#[test]
fn extended_dns_errors_say_not_ready_and_not_authoritative() {
    let ask_edns = |engine: &Engine, name: &str, edns: bool| {
        let mut query = Message::query();
        query.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
        if edns {
            query.set_edns(hickory_proto::op::Edns::new());
        }
        let bytes = query.to_vec().unwrap();
        let mut out = vec![0u8; 65_535];
        let outcome = engine.respond(&bytes, &mut out, Transport::Udp).unwrap();
        out.truncate(outcome.len);
        out
    };
    let rcode = |response: &[u8]| Message::from_vec(response).unwrap().metadata.response_code;
    let unready = Engine::default();
    let answer = ask_edns(&unready, "www.t.example.", true);
    assert_eq!(rcode(&answer), ResponseCode::ServFail);
    // EDE last (ours is the only option here), INFO-CODE 14, no EXTRA-TEXT.
    assert_eq!(option_codes(&answer), Some(vec![15]));
    assert!(answer.ends_with(&[0, 15, 0, 2, 0, 14]));
    let plain = ask_edns(&unready, "www.t.example.", false);
    assert_eq!(rcode(&plain), ResponseCode::ServFail);
    assert_eq!(option_codes(&plain), None);

    let served = engine(&rrset("www", "A", &["192.0.2.1"]));
    let outside = ask_edns(&served, "www.example.org.", true);
    assert_eq!(rcode(&outside), ResponseCode::Refused);
    assert_eq!(option_codes(&outside), Some(vec![15]));
    assert!(outside.ends_with(&[0, 15, 0, 2, 0, 20]));
    let inside = ask_edns(&served, "www.t.example.", true);
    assert_eq!(rcode(&inside), ResponseCode::NoError);
    assert_eq!(option_codes(&inside), Some(vec![]));
    assert_eq!(option_codes(&ask_edns(&served, "www.example.org.", false)), None);
}
