//! What each fuzz target asserts about one input: shared, through `#[path]`, by the
//! targets (`fuzz/fuzz_targets/*.rs`, run by `cargo +nightly fuzz`) and by the corpus
//! replay (`control/tests/fuzz_corpora.rs`, run by `cargo test`), so the corpus a
//! fuzzer kept is replayed with exactly the checks it was found under.
//!
//! Every function takes bytes from outside the process — a zone file, a master file,
//! a checker's report frame, a frame on the control↔edge link, a control-socket line —
//! and panics only when the code under test breaks a rule (a panic, an answer that is
//! not an answer, a request that does not survive its own encoding).
#![allow(dead_code, reason = "each target uses one check")]

use std::{
    path::{Path, PathBuf},
    sync::OnceLock,
};

use qdns_control::{
    api::Response,
    report::{self, Keys},
    report_listener,
};
use qdns_edge::{Engine, Transport};
use qdns_link::protocol::ToEdge;

/// The checker key the report target knows (`c1`, region `eu`).
pub const CHECKER_KEY: [u8; 32] = [7; 32];

/// A directory that exists and stays empty: zone and master files are parsed as if
/// they lived there, so a relative `include` or `$INCLUDE` names nothing.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("qdns-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    })
}

/// Answers one query for each zone's origin (SOA) and an unknown name, checking the
/// response is one.
fn ask_each_zone(engine: &Engine, snapshot: &qdns_zone::Snapshot) {
    let mut out = vec![0u8; 65_535];
    for zone in &snapshot.zones {
        for owner in [zone.origin.clone(), [b"\x03zzz".as_slice(), &zone.origin].concat()] {
            let mut query = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
            query.extend_from_slice(&owner);
            query.extend_from_slice(&[0, 6, 0, 1]);
            if let Some(outcome) = engine.respond(&query, &mut out, Transport::Udp) {
                assert!(
                    outcome.len >= 12 && outcome.len <= 1232,
                    "UDP answer of {} octets",
                    outcome.len
                );
                assert_eq!(out[..2], [0x12, 0x34], "response ID is the query ID");
            }
        }
    }
}

/// Compiles a snapshot the way an edge applies one: the user-space engine, then the
/// XDP tables from it, then a few answers.
fn serve(snapshot: &qdns_zone::Snapshot) {
    if let Ok(engine) = Engine::compile(snapshot) {
        let _ = qdns_edge::xdp::table::compile(&engine, 1, 1232);
        ask_each_zone(&engine, snapshot);
    }
}

/// A zone's TOML file: loaded (validation must refuse, never panic), and if it loads,
/// served.
pub fn zone_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(zone) = qdns_zone::parse_zone_text(&scratch().join("fuzz.toml"), text) {
        let zones = vec![zone];
        let bitmap = qdns_zone::evaluate::all_checks_healthy(&zones);
        serve(&qdns_zone::Snapshot::new(1, zones, bitmap));
    }
}

/// An RFC 1035 master file under `example.`.
pub fn master_file(data: &[u8]) {
    static ORIGIN: OnceLock<hickory_proto::rr::Name> = OnceLock::new();
    let origin = ORIGIN.get_or_init(|| hickory_proto::rr::Name::from_ascii("example.").expect("origin"));
    if let Ok(sets) = qdns_zone::master::parse(data, &scratch().join("fuzz.zone"), origin, 3600) {
        for set in &sets {
            for rdata in &set.rdata {
                // Presentation form of whatever was accepted, as `qdnsctl dump` prints it.
                let _ = qdns_zone::master::rdata_text(set.rtype, rdata);
            }
        }
    }
}

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let path = scratch().join("checkers.toml");
        let key = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, CHECKER_KEY);
        std::fs::write(
            &path,
            format!("[[checker]]\nid = \"c1\"\nregion = \"eu\"\nkey = \"{key}\"\n"),
        )
        .expect("checker keys");
        // A secret file must be private to be read (qdns_link::secret).
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
        Keys::load(&path).expect("checker keys load")
    })
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
    })
}

/// Bytes on the checker-report listener, read frame by frame as the listener reads
/// them (bounded before the MAC) and verified; an input whose first octet is 0xFF is
/// instead a report body signed with the known key, so the parser behind the MAC is
/// fuzzed too. Nothing may be accepted that the known checker did not sign.
pub fn report_frames(data: &[u8]) {
    let keys = keys();
    let mut seqs = std::collections::HashMap::new();
    if let Some(body) = data.strip_prefix(&[0xFF]) {
        let Ok(signed) = report::seal("c1", body.to_vec(), &CHECKER_KEY) else {
            return;
        };
        if let Ok(accepted) = report::verify(&signed, keys, "fra", &mut seqs, 1_000) {
            assert_eq!(accepted.checker, "c1");
            assert_eq!(accepted.region, "eu");
            assert_eq!(accepted.location, "fra");
        }
        return;
    }
    runtime().block_on(async {
        let mut reader = data;
        for _ in 0..64 {
            match report_listener::read_frame(&mut reader, keys).await {
                Ok(Some(signed)) => {
                    assert!(signed.body.len() <= report::MAX_REPORT);
                    if let Ok(accepted) = report::verify(&signed, keys, "fra", &mut seqs, 1_000) {
                        // Only a MAC under the known key gets here.
                        assert_eq!(accepted.checker, "c1");
                    }
                }
                // The end, or a refusal that closes the connection.
                Ok(None) | Err(_) => return,
            }
        }
    });
}

/// A frame body on the control↔edge link, in each direction: what an edge decodes
/// from control (a snapshot is compiled and served, a health delta applied to a
/// bitmap) and what control decodes from an edge.
pub fn link_frame(data: &[u8]) {
    match qdns_link::protocol::decode_to_edge(data).map(|(_, message)| message) {
        Ok(ToEdge::Snapshot { snapshot, .. }) => serve(&snapshot),
        Ok(ToEdge::Health(delta) | ToEdge::HealthSince { delta, .. }) => {
            let mut bitmap = vec![0u64; 4];
            let applied = qdns_edge::follow::apply_words(&mut bitmap, &delta.words);
            assert_eq!(applied, delta.words.iter().all(|&(i, _)| i < 4));
            assert_eq!(bitmap.len(), 4, "a delta never resizes the bitmap");
        }
        Ok(ToEdge::Cookies {
            current,
            previous,
            next,
        }) => {
            // Taken as the edge takes them, and made into what the program reads.
            let jar = qdns_edge::cookies::CookieJar::new(current, previous, next);
            let secrets = jar.secrets();
            assert_eq!(
                secrets.flags & qdns_abi::cookie::COOKIES_PREVIOUS != 0,
                previous.is_some()
            );
        }
        Ok(ToEdge::Delta(delta)) => {
            // Applied as the edge applies it, to the example zones (version 1): refused,
            // or a snapshot every patched zone of which matches its digest, and served.
            let base = example_snapshot().clone();
            if let Ok(snapshot) = qdns_link::delta::apply(base, *delta) {
                serve(&snapshot);
            }
        }
        Ok(ToEdge::Keepalive) | Err(_) => {}
    }
    // An edge's first frame (the message, then the hello's extension): a body that reads
    // as a message alone reads so as a first frame too, without an extension.
    if let Ok(message) = qdns_link::protocol::decode_to_control(data) {
        let hello = qdns_link::protocol::decode_hello(data).ok();
        assert_eq!(hello, Some((message, None)));
    }
}

/// The example zones as a snapshot of version 1, unsigned.
fn example_snapshot() -> &'static qdns_zone::Snapshot {
    static SNAPSHOT: OnceLock<qdns_zone::Snapshot> = OnceLock::new();
    SNAPSHOT.get_or_init(|| {
        let zones = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/zones");
        qdns_zone::load_dir(&zones, 1).expect("the example zones load")
    })
}

/// A control-socket line: refused with a precise error, or a request that encodes
/// back to one that parses equal.
pub fn control_request(data: &[u8]) {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    match Response::parse_request(line) {
        Ok(request) => {
            let again = serde_json::to_string(&request).expect("a request encodes");
            assert_eq!(Response::parse_request(&again).ok(), Some(request.clone()), "{again}");
            // Then carried out, against a real State over the example zones: an answer,
            // never a panic (the connection would close without a reply).
            let (runtime, ctx) = control_handler();
            let response = runtime.block_on(qdns_control::handler::handle(ctx, request, Some("fuzz")));
            assert!(response.ok == response.error.is_none(), "{response:?}");
            serde_json::to_string(&response).expect("a response encodes");
        }
        Err(refused) => {
            assert!(!refused.ok);
            assert!(refused.error.is_some_and(|e| e.starts_with("bad request: ")));
        }
    }
}

/// The control handler the `control_request` target drives: the example zones, signed,
/// with operator state kept in the scratch directory; no checker, no edges.
fn control_handler() -> &'static (tokio::runtime::Runtime, qdns_control::ctx::Ctx) {
    static CTX: OnceLock<(tokio::runtime::Runtime, qdns_control::ctx::Ctx)> = OnceLock::new();
    CTX.get_or_init(|| {
        let zones = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/zones");
        let state_dir = scratch().join("control-state");
        std::fs::create_dir_all(&state_dir).expect("state directory");
        let lifetimes = qdns_control::dnssec::Lifetimes::default();
        let mut snapshot = qdns_zone::load_dir(&zones, 1).expect("the example zones load");
        let keys = qdns_control::dnssec::KeyStore::new(&state_dir, lifetimes);
        qdns_control::dnssec::sign_snapshot(&keys, &mut snapshot, qdns_control::dnssec::now(), None).expect("signed");
        let operator = qdns_control::persist::load(&state_dir).expect("operator state");
        let state = qdns_control::state::State::new(zones, snapshot, operator);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let ctx = qdns_control::ctx::Ctx {
            checker: None,
            shutdown: tokio_util::sync::CancellationToken::new(),
            state: std::sync::Arc::new(tokio::sync::Mutex::new(state)),
            updates: tokio::sync::broadcast::channel(16).0,
            cookies: std::sync::Arc::new(tokio::sync::watch::Sender::new(
                qdns_control::cookies::load_or_make(&state_dir, 0).expect("cookie secrets"),
            )),
            state_dir,
            lifetimes,
            transfers: std::sync::Arc::default(),
            deployment: None,
        };
        (runtime, ctx)
    })
}

/// Octets on the transfer listener: the first octet picks TCP or UDP (bit 0) and a peer
/// inside or outside `transfer_allow` (bit 1); the rest is the request. Every answer
/// carries the request's ID with QR set and fits its frame, a whole zone ends, and a
/// zone that requires TSIG gives nothing to a request the fuzzer could not sign.
pub fn transfer_request(data: &[u8]) {
    use qdns_control::transfer::{serve::respond, Outcome};
    let Some((&mode, message)) = data.split_first() else {
        return;
    };
    // The same octets as a primary's answer (transfer in): read or refused, every
    // record's names written out within the message's bounds.
    if let Ok(response) = qdns_control::transfer::wire::read_response(message) {
        for rr in &response.answers {
            assert!(rr.owner.len() <= 255);
        }
    }
    let transfers = transfer_fixture();
    let tcp = mode & 1 == 1;
    let peer: std::net::IpAddr = if mode & 2 == 0 {
        [127, 0, 0, 1].into()
    } else {
        [192, 0, 2, 1].into()
    };
    let Some((mut answer, outcome)) = respond(transfers, peer, message, tcp, 1_800_000_000) else {
        assert!(message.len() < 2, "only a request without an ID goes unanswered");
        return;
    };
    let mut messages = 0usize;
    while let Some(out) = answer.next_message() {
        assert!(u16::try_from(out.len()).is_ok(), "{} octets", out.len());
        assert_eq!(out.get(..2), message.get(..2), "the request's ID");
        assert!(out.get(2).is_some_and(|f| f & 0x80 != 0), "QR");
        messages += 1;
        assert!(messages < 10_000, "an answer that does not end");
        if !tcp {
            break;
        }
    }
    let served = matches!(
        outcome,
        Outcome::Axfr | Outcome::Ixfr | Outcome::IxfrWhole | Outcome::Soa
    );
    let qname = qdns_control::transfer::wire::read_request(message).map(|r| r.qname);
    if served {
        assert_eq!(peer, std::net::IpAddr::from([127, 0, 0, 1]), "outside transfer_allow");
        assert_ne!(
            qname.as_deref().ok(),
            Some(&b"\x04shop\x07example\x00"[..]),
            "served without the key"
        );
    }
}

/// The MAC key of the `transfer_request` target's TSIG-only zone (shop.example.).
pub const FUZZ_TSIG_SECRET: [u8; 32] = [0x5a; 32];

/// The example zones, signed, served for transfer to 127.0.0.0/8: shop.example. with
/// TSIG (`fuzz-key`, [`FUZZ_TSIG_SECRET`]), the others without.
pub fn transfer_fixture() -> &'static std::sync::Arc<qdns_control::transfer::Transfers> {
    use qdns_control::transfer::{tsig, Transfers};
    static TRANSFERS: OnceLock<std::sync::Arc<Transfers>> = OnceLock::new();
    TRANSFERS.get_or_init(|| {
        let zones = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/zones");
        let state_dir = scratch().join("transfer-state");
        std::fs::create_dir_all(&state_dir).expect("state directory");
        let lifetimes = qdns_control::dnssec::Lifetimes::default();
        let mut snapshot = qdns_zone::load_dir(&zones, 1).expect("the example zones load");
        let store = qdns_control::dnssec::KeyStore::new(&state_dir, lifetimes);
        qdns_control::dnssec::sign_snapshot(&store, &mut snapshot, qdns_control::dnssec::now(), None).expect("signed");
        for zone in &mut snapshot.zones {
            let shop = zone.origin == b"\x04shop\x07example\x00";
            zone.transfer = Some(Box::new(qdns_zone::snapshot::Transfer {
                allow: vec![([127, 0, 0, 0].into(), 8)],
                tsig: shop.then(|| "fuzz-key".to_owned()),
                notify: Vec::new(),
                primary: None,
                primary_tsig: None,
                catalog: false,
                update: Vec::new(),
            }));
        }
        let key = tsig::Key::new("fuzz-key", tsig::Algorithm::HmacSha256, FUZZ_TSIG_SECRET.to_vec()).expect("a key");
        let transfers = std::sync::Arc::new(Transfers::new(tsig::Keys::from_keys(vec![key])));
        qdns_control::transfer::serve_snapshot(&transfers, &snapshot, store, state_dir);
        transfers
    })
}

/// The time the `update_message` target checks at.
pub const UPDATE_NOW: u64 = 1_800_000_000;

/// Octets on the update listener. The first octet says how the check signs the rest
/// before it is read, so the fuzzer explores what lies behind the MAC: bit 0 signed,
/// bit 1 signed 1,000 s before the check's time (BADTIME), bit 2 with `fuzz-any` (may
/// change any type anywhere in example.com.) rather than `fuzz-acme` (TXT at
/// `_acme-challenge` and one label below). The rest goes through the functions the
/// update task runs, in its order (`authenticate`, `zone_and_rules`, `apply`).
/// Asserts: nothing gets past `authenticate` that this check did not sign with a good
/// time (so neither an unsigned UPDATE nor one the fuzzer could not sign); a refusal
/// carries the request's ID and QR; an applied UPDATE keeps only records inside the zone
/// that a rule of the key permits, never of a type UPDATE never changes, at most
/// `MAX_RECORDS`.
pub fn update_message(data: &[u8]) {
    use qdns_control::{
        transfer::tsig,
        update::{self, apply},
    };
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let (transfers, snapshot, keys) = update_fixture();
    let key = &keys[usize::from(mode >> 2 & 1)];
    let signed = mode & 1 == 1 && body.len() >= 12;
    let mut message = body.to_vec();
    if signed {
        let at = if mode & 2 == 0 { UPDATE_NOW } else { UPDATE_NOW - 1_000 };
        tsig::sign(&mut message, key, tsig::Chain::Request, at, 0);
    }
    let (update, verified) = match update::authenticate(transfers, &message, UPDATE_NOW) {
        Err((answer, _)) => {
            if message.len() >= 2 {
                assert_eq!(answer.get(..2), message.get(..2), "the request's ID");
            }
            assert!(answer.get(2).is_some_and(|f| f & 0x80 != 0), "QR");
            return;
        }
        Ok(authenticated) => authenticated,
    };
    assert!(
        signed && mode & 2 == 0,
        "an UPDATE the check did not sign now got past TSIG"
    );
    assert_eq!(verified.name, key.name);
    let Ok((zone, rules)) = update::zone_and_rules(snapshot, &update.request.qname) else {
        return;
    };
    let sections = (&update.prerequisites[..], &update.updates[..]);
    let Ok(records) = apply::apply(&zone, &[], sections, (&verified.name, &rules), UPDATE_NOW) else {
        return;
    };
    assert!(records.len() <= apply::MAX_RECORDS);
    for record in &records {
        assert!(record.name.ends_with(&zone.origin), "a record outside the zone");
        assert!(
            !qdns_zone::update::NEVER.contains(&record.rtype),
            "type {} changed by UPDATE",
            record.rtype
        );
        assert!(
            rules
                .iter()
                .any(|rule| rule.permits(&verified.name, &zone.origin, &record.name, record.rtype)),
            "a record no rule of {} permits",
            verified.name
        );
    }
}

/// The MAC key of the `update_message` target's keys (`fuzz-acme`, `fuzz-any`).
pub const FUZZ_UPDATE_SECRET: [u8; 32] = [0x3c; 32];

/// The example zones with example.com. open to UPDATE: `fuzz-acme` (hmac-md5, as
/// certbot's) may change TXT at `_acme-challenge` and one label below, `fuzz-any`
/// (hmac-sha256) any type UPDATE may change anywhere.
pub fn update_fixture() -> &'static (
    std::sync::Arc<qdns_control::transfer::Transfers>,
    qdns_zone::Snapshot,
    [qdns_control::transfer::tsig::Key; 2],
) {
    use qdns_control::transfer::{tsig, Transfers};
    use qdns_zone::update::{Pattern, Rule};
    static FIXTURE: OnceLock<(std::sync::Arc<Transfers>, qdns_zone::Snapshot, [tsig::Key; 2])> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let zones = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/zones");
        let state_dir = scratch().join("update-state");
        std::fs::create_dir_all(&state_dir).expect("state directory");
        let mut snapshot = qdns_zone::load_dir(&zones, 1).expect("the example zones load");
        let rule = |key: &str, names: &[&str], types: Option<Vec<u16>>| Rule {
            key: key.to_owned(),
            names: names.iter().map(|n| Pattern::parse(n).expect("a pattern")).collect(),
            types,
            per_minute: None,
        };
        for zone in &mut snapshot.zones {
            if zone.origin == b"\x07example\x03com\x00" {
                zone.transfer = Some(Box::new(qdns_zone::snapshot::Transfer {
                    update: vec![
                        rule("fuzz-acme", &["_acme-challenge", "_acme-challenge.*"], Some(vec![16])),
                        rule("fuzz-any", &["@", "**"], None),
                    ],
                    ..Default::default()
                }));
            }
        }
        let keys = [
            tsig::Key::new("fuzz-acme", tsig::Algorithm::HmacMd5, FUZZ_UPDATE_SECRET.to_vec()).expect("a key"),
            tsig::Key::new("fuzz-any", tsig::Algorithm::HmacSha256, FUZZ_UPDATE_SECRET.to_vec()).expect("a key"),
        ];
        let transfers = std::sync::Arc::new(Transfers::new(tsig::Keys::from_keys(keys.to_vec())));
        let store = qdns_control::dnssec::KeyStore::new(&state_dir, qdns_control::dnssec::Lifetimes::default());
        qdns_control::transfer::serve_snapshot(&transfers, &snapshot, store, state_dir);
        (transfers, snapshot, keys)
    })
}
