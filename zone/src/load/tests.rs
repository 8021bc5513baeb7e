use std::fs;

use super::*;
use crate::SlotRule;

const HEAD: &str = r#"
[zone]
origin = "example.com."
ttl = 60

[zone.soa]
mname = "ns1.example.com."
rname = "hostmaster.example.com."
serial = 2026120101
refresh = 7200
retry = 900
expire = 1209600
minimum = 30

[zone.ns]
names = ["ns1", "ns2.example.com."]
"#;

fn load(body: &str) -> Result<Zone, ZoneError> {
    load_with(body, None)
}

fn load_with(body: &str, master: Option<&str>) -> Result<Zone, ZoneError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("example.com.toml");
    fs::write(&path, body).unwrap();
    if let Some(master) = master {
        fs::write(dir.path().join("example.com.zone"), master).unwrap();
    }
    load_zone_file(&path)
}

fn error(body: &str) -> String {
    let msg = load(body).unwrap_err().to_string();
    assert!(msg.contains("example.com.toml"), "error names the file: {msg}");
    assert!(!msg.contains('\n'), "error is one line: {msg}");
    msg
}

#[test]
fn loads_plain_zone() {
    let zone = load(&format!(
        "{HEAD}\n[[rrset]]\nname = \"www\"\ntype = \"A\"\nvalues = [\"192.0.2.1\", \"192.0.2.2\"]\n"
    ))
    .unwrap();
    assert_eq!(zone.origin, b"\x07example\x03com\x00");
    assert_eq!(zone.serial, 2_026_120_101);
    assert_eq!(zone.negative_ttl, 30, "min(SOA TTL 60, minimum 30)");
    let www = zone.rrset(b"\x03www\x07example\x03com\x00", 1).unwrap();
    assert_eq!(www.ttl, 60);
    assert_eq!(www.rdata.len(), 2);
    let ns = zone.rrset(&zone.origin, 2).unwrap();
    assert_eq!(ns.rdata[0], b"\x03ns1\x07example\x03com\x00");
}

#[test]
fn rejects_bad_address_with_line_and_key() {
    let body = format!("{HEAD}\n[[rrset]]\nname = \"www\"\ntype = \"A\"\nvalues = [\"192.0.2.300\"]\n");
    let line = body.lines().position(|l| l.contains("192.0.2.300")).unwrap() + 1;
    let msg = error(&body);
    assert!(msg.contains(&format!(":{line}: rrset[0].values[0]")), "{msg}");
    assert!(msg.contains("invalid A value"), "{msg}");
}

#[test]
fn rejects_name_outside_origin() {
    let msg = error(&format!(
        "{HEAD}\n[[rrset]]\nname = \"www.example.org.\"\ntype = \"A\"\nvalues = [\"192.0.2.1\"]\n"
    ));
    assert!(
        msg.contains("rrset[0].name") && msg.contains("outside the zone"),
        "{msg}"
    );
}

#[test]
fn rejects_unknown_key_and_relative_origin() {
    let msg = error(&format!(
        "{HEAD}\n[[rrset]]\nname = \"www\"\ntype = \"A\"\nvalue = [\"192.0.2.1\"]\n"
    ));
    assert!(msg.contains("unknown field `value`"), "{msg}");
    let msg = error(&HEAD.replace("\"example.com.\"", "\"example.com\""));
    assert!(msg.contains("zone.origin") && msg.contains("absolute"), "{msg}");
}

#[test]
fn rejects_cname_with_other_data_and_at_apex() {
    let msg = error(&format!(
        "{HEAD}\n[[rrset]]\nname = \"x\"\ntype = \"CNAME\"\nvalues = [\"www\"]\n[[rrset]]\nname = \"x\"\ntype = \"A\"\nvalues = [\"192.0.2.1\"]\n"
    ));
    assert!(msg.contains("CNAME and other data"), "{msg}");
    let msg = error(&format!(
        "{HEAD}\n[[rrset]]\nname = \"@\"\ntype = \"CNAME\"\nvalues = [\"www\"]\n"
    ));
    assert!(msg.contains("apex"), "{msg}");
}

#[test]
fn rejects_duplicates_and_bad_ttl() {
    let set = "[[rrset]]\nname = \"www\"\ntype = \"A\"\nvalues = [\"192.0.2.1\"]\n";
    let msg = error(&format!("{HEAD}\n{set}{set}"));
    assert!(msg.contains("defined twice"), "{msg}");
    let msg = error(&format!(
        "{HEAD}\n[[rrset]]\nname = \"www\"\ntype = \"A\"\nttl = -1\nvalues = [\"192.0.2.1\"]\n"
    ));
    assert!(msg.contains("rrset[0].ttl"), "{msg}");
}

#[test]
fn rejects_data_below_delegation_but_keeps_glue() {
    let deleg = "[[rrset]]\nname = \"sub\"\ntype = \"NS\"\nvalues = [\"ns.sub\"]\n[[rrset]]\nname = \"ns.sub\"\ntype = \"A\"\nvalues = [\"192.0.2.53\"]\n";
    load(&format!("{HEAD}\n{deleg}")).unwrap();
    let msg = error(&format!(
        "{HEAD}\n{deleg}[[rrset]]\nname = \"x.sub\"\ntype = \"TXT\"\nvalues = ['\"hidden\"']\n"
    ));
    assert!(msg.contains("below the delegation"), "{msg}");
}

#[test]
fn include_master_file_merges_and_reports_lines() {
    let body = HEAD
        .to_string()
        .replace("ttl = 60", "ttl = 60\ninclude = \"example.com.zone\"");
    let zone = load_with(&body, Some("mail IN MX 10 mx\nmx 120 IN A 192.0.2.25\n")).unwrap();
    let mx = zone.rrset(b"\x04mail\x07example\x03com\x00", 15).unwrap();
    assert_eq!(mx.ttl, 60);
    assert_eq!(zone.rrset(b"\x02mx\x07example\x03com\x00", 1).unwrap().ttl, 120);

    let err = load_with(&body, Some("ok IN A 192.0.2.1\nbad IN MX ten mx\n"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("example.com.zone:2:"), "{err}");

    let err = load_with(&body, Some("@ IN SOA a. b. 1 2 3 4 5\n"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("SOA is also in"), "{err}");

    // Records of one set need not be adjacent: they merge as they are read, the
    // smallest TTL wins, duplicates go (RFC 2181 §5), and the set's origin is its first.
    let zone = load_with(
        &body,
        Some(
            "w 300 IN A 192.0.2.1
x IN A 192.0.2.9
w 30 IN A 192.0.2.2
w 300 IN A 192.0.2.1
",
        ),
    )
    .unwrap();
    let w = zone.rrset(b"\x01w\x07example\x03com\x00", 1).unwrap();
    assert_eq!(w.ttl, 30);
    assert_eq!(w.rdata, vec![vec![192, 0, 2, 1], vec![192, 0, 2, 2]]);
    let err = load_with(
        &body,
        Some(
            "ok IN A 192.0.2.1
big 2147483648 IN A 192.0.2.2
",
        ),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("example.com.zone:2:") && err.contains("above"), "{err}");
}

#[test]
fn load_dir_rejects_duplicate_origins_and_empty_dirs() {
    let dir = tempfile::tempdir().unwrap();
    assert!(load_dir(dir.path(), 1).unwrap_err().to_string().contains("no *.toml"));
    fs::write(dir.path().join("a.toml"), HEAD).unwrap();
    fs::write(dir.path().join("b.toml"), HEAD).unwrap();
    let msg = load_dir(dir.path(), 1).unwrap_err().to_string();
    assert!(msg.contains("b.toml") && msg.contains("already defined"), "{msg}");
}

#[test]
fn ancestors_run_from_the_name_to_the_root() {
    let wire = b"\x01a\x03bar\x03com\x00";
    let all: Vec<&[u8]> = super::ancestors(wire).collect();
    assert_eq!(all, [&wire[..], &wire[2..], &wire[6..], &wire[10..]]);
    assert_eq!(super::ancestors(b"\x00").count(), 1);
    assert_eq!(super::ancestors(b"").count(), 0);
}

#[test]
fn only_the_cut_ns_ds_and_glue_may_sit_at_or_below_a_delegation() {
    let body = HEAD.replace("ttl = 60", "ttl = 60\ninclude = \"example.com.zone\"");
    let cut = "sub IN NS ns.sub\nsub IN DS 12345 13 2 0000000000000000000000000000000000000000000000000000000000000000\nns.sub IN A 192.0.2.53\nns.sub IN AAAA 2001:db8::53\n";
    let zone = load_with(&body, Some(cut)).unwrap();
    assert!(zone.rrsets.iter().any(|s| s.rtype == 43), "DS at the cut");
    for (extra, what) in [
        (
            "sub IN TXT \"x\"\n",
            "sub.example.com. TXT is at or below the delegation sub.example.com.",
        ),
        (
            "deep.ns.sub IN MX 1 mx\n",
            "deep.ns.sub.example.com. MX is at or below the delegation",
        ),
    ] {
        let err = load_with(&body, Some(&format!("{cut}{extra}")))
            .unwrap_err()
            .to_string();
        assert!(err.contains(what), "{err}");
    }
    // A sibling that merely shares a suffix of the label is not below the cut.
    load_with(&body, Some(&format!("{cut}xsub IN TXT \"ok\"\n"))).unwrap();
}

/// Every example zone, and the zones of the other tests here, read one record set at a
/// time give exactly what the whole-document parse gives.
#[test]
fn reading_record_sets_one_at_a_time_gives_the_whole_documents_zone() {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/zones");
    let mut seen = 0;
    for entry in fs::read_dir(&examples).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = fs::read_to_string(&path).unwrap();
            let split = chunks::split(&text).expect("the examples use the plain layout");
            assert!(!split.rrsets.is_empty());
            assert_eq!(
                chunked(&path, &text, &split).unwrap(),
                parse_whole(&path, &text, &LoadContext::default()).unwrap(),
                "{}",
                path.display()
            );
            assert_eq!(
                load_zone_file(&path).unwrap(),
                parse_whole(&path, &text, &LoadContext::default()).unwrap(),
                "read from the file in passes: {}",
                path.display()
            );
            seen += 1;
        }
    }
    assert!(seen >= 3);
}

/// A mistake in the third record set is reported on its own line either way.
#[test]
fn errors_in_a_record_set_name_the_same_line_either_way() {
    let body = format!(
        "{HEAD}\n[[rrset]]\nname = \"a\"\ntype = \"A\"\nvalues = [\"192.0.2.1\"]\n\n\
         [[health_check]]\nid = \"h\"\ntype = \"external\"\n\n\
         [[rrset]]\nname = \"b\"\ntype = \"A\"\nvalues = [\"192.0.2.2\"]\n\n\
         [[rrset]]\nname = \"c\"\ntype = \"A\"\nttl = 60\nvalues = [\"192.0.2.300\"]\n"
    );
    let path = std::path::Path::new("example.com.toml");
    let split = chunks::split(&body).unwrap();
    assert_eq!(split.rrsets.len(), 3);
    let (a, b) = errors_both_ways(path, &body, &split);
    assert_eq!(a, b);
    let line = body.lines().position(|l| l.contains("192.0.2.300")).unwrap() + 1;
    assert!(a.contains(&format!(":{line}")), "{a}");
    // A TOML syntax error inside a record set: the line of the mistake, too.
    let broken = body.replace("name = \"b\"", "name = \"b");
    let split = chunks::split(&broken).unwrap();
    let err = chunked(path, &broken, &split).unwrap_err().to_string();
    let line = broken.lines().position(|l| l.contains("name = \"b")).unwrap() + 1;
    assert!(err.contains(&format!(":{line}")), "{err}");
}

/// The head is read from its own pieces joined: a mistake in a head table that stands
/// after record sets and checks — a bad value the builder finds, a TOML syntax error —
/// names its line in the file either way.
#[test]
fn errors_in_the_head_after_cut_tables_name_the_same_line_either_way() {
    let ok = format!(
        "{HEAD}\n[[rrset]]\nname = \"a\"\ntype = \"A\"\nvalues = [\"192.0.2.1\"]\n\n\
         [[health_check]]\nid = \"h\"\ntype = \"external\"\n\n\
         [[cidr_collection]]\nid = \"c\"\n[cidr_collection.locations]\nl = [\"192.0.2.0/24\"]\nm = [\"198.51.100.0/24\"]\n"
    );
    let path = std::path::Path::new("example.com.toml");
    let split = chunks::split(&ok).unwrap();
    assert_eq!(
        chunked(path, &ok, &split).unwrap(),
        parse_whole(path, &ok, &LoadContext::default()).unwrap()
    );
    for (broken, marker) in [
        (ok.replace("192.0.2.0/24", "192.0.2.0/99"), "192.0.2.0/99"),
        (ok.replace("m = [", "m = =["), "m = =["),
    ] {
        let split = chunks::split(&broken).unwrap();
        let (a, b) = errors_both_ways(path, &broken, &split);
        let line = broken.lines().position(|l| l.contains(marker)).unwrap() + 1;
        assert!(a.contains(&format!(":{line}")), "{a}");
        assert!(b.contains(&format!(":{line}")), "{b}");
    }
}

/// `text` cut into `split`, read in chunks from memory (as `parse_zone_text` does).
fn chunked(path: &std::path::Path, text: &str, split: &chunks::Split) -> Result<Zone, ZoneError> {
    parse_in_chunks(
        path,
        &mut Source::Text(text),
        split,
        &LineIndex::new(text),
        &LoadContext::default(),
    )
}

/// A `[zone]` table that stands after record sets and checks: the mistakes the builder
/// finds as it starts (the origin, the TTL) name their line in the file too.
#[test]
fn errors_in_a_zone_table_after_cut_tables_name_their_line() {
    let text = "[[rrset]]\nname = \"a\"\ntype = \"A\"\nvalues = [\"192.0.2.1\"]\n\n\
                [[health_check]]\nid = \"h\"\ntype = \"external\"\n\n\
                [zone]\nttl = 60\norigin = \"example.com\"\n";
    let path = std::path::Path::new("example.com.toml");
    let split = chunks::split(text).unwrap();
    let (a, b) = errors_both_ways(path, text, &split);
    assert_eq!(a, b);
    let line = text.lines().position(|l| l.starts_with("origin")).unwrap() + 1;
    assert!(a.contains(&format!(":{line}")), "{a}");
}

/// The error of loading `text` cut into `split`, and of loading it whole; reading it
/// from a file in passes (as `load_zone_file` does) gives the first one too.
fn errors_both_ways(path: &std::path::Path, text: &str, split: &chunks::Split) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(path);
    fs::write(&file, text).unwrap();
    let from_file = load_zone_file(&file).unwrap_err().to_string();
    let in_chunks = chunked(path, text, split).unwrap_err().to_string();
    assert_eq!(from_file.replace(&format!("{}/", dir.path().display()), ""), in_chunks);
    (
        in_chunks,
        parse_whole(path, text, &LoadContext::default())
            .unwrap_err()
            .to_string(),
    )
}

/// Health checks are cut out and parsed one table at a time too: a bad value in one and
/// an unknown child of a calculated check name the same line as when the file is read
/// whole; a TOML syntax error in one names its line.
#[test]
fn errors_in_a_health_check_name_the_same_line_either_way() {
    let ok = format!(
        "{HEAD}\n[[health_check]]\nid = \"a\"\ntype = \"external\"\n\n\
         [[rrset]]\nname = \"w\"\ntype = \"A\"\nvalues = [\"192.0.2.1\"]\n\n\
         [[health_check]]\nid = \"b\"\ntype = \"tcp\"\nip = \"192.0.2.2\"\nport = 80\n\n\
         [[health_check]]\nid = \"c\"\ntype = \"calculated\"\nchildren = [\"a\", \"b\"]\nhealthy_threshold = 1\n"
    );
    let path = std::path::Path::new("example.com.toml");
    let split = chunks::split(&ok).unwrap();
    assert_eq!((split.rrsets.len(), split.health_checks.len()), (1, 3));
    let zone = chunked(path, &ok, &split).unwrap();
    let names: Vec<&str> = zone.slots.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"], "probed and external first, then calculated");
    for (broken, marker) in [
        (ok.replace("ip = \"192.0.2.2\"", "ip = \"192.0.2.300\""), "192.0.2.300"),
        (
            ok.replace("children = [\"a\", \"b\"]", "children = [\"a\", \"nope\"]"),
            "\"nope\"",
        ),
        (ok.replace("port = 80", "port = 80 80"), "port = 80 80"),
    ] {
        let split = chunks::split(&broken).unwrap();
        let (a, b) = errors_both_ways(path, &broken, &split);
        let line = broken.lines().position(|l| l.contains(marker)).unwrap() + 1;
        assert!(a.contains(&format!(":{line}")), "{a}");
        if !marker.starts_with("port") {
            assert_eq!(a, b, "chunked and whole agree");
        }
    }
}

/// Checks or record sets written as inline arrays at the root are no table headers, so
/// the head keeps them: such a file is read whole, and loses nothing.
#[test]
fn inline_arrays_of_checks_or_record_sets_are_read_too() {
    let path = std::path::Path::new("example.com.toml");
    let checks = format!(
        "health_check = [{{ id = \"a\", type = \"external\" }}]\n{HEAD}\n\
         [[rrset]]\nname = \"www\"\ntype = \"A\"\nvalues = [\"192.0.2.1\"]\n"
    );
    let sets = format!("rrset = [{{ name = \"www\", type = \"A\", values = [\"192.0.2.1\"] }}]\n{HEAD}");
    for text in [checks, sets] {
        assert!(chunks::split(&text).is_some(), "no header forces a whole read");
        let zone = parse_zone_text(path, &text).unwrap();
        assert!(
            zone.rrsets
                .iter()
                .any(|s| s.name == b"\x03www\x07example\x03com\x00" && s.rtype == 1),
            "{text}"
        );
        if text.starts_with("health_check") {
            assert_eq!(zone.slots.len(), 1, "the inline check is kept");
        }
    }
}

#[test]
fn a_check_reads_load_from_a_header_or_a_json_pointer() {
    let check = |load: &str| {
        format!("{HEAD}\n[[health_check]]\nid = \"web\"\ntype = \"http\"\nip = \"192.0.2.1\"\nload = {load}\n")
    };
    let zone = load(&check(r#"{ from = "header:X-Load", low = 0.7, high = 0.95 }"#)).unwrap();
    let SlotRule::Check { probe: Some(probe), .. } = &zone.slots[0].rule else {
        panic!("{:?}", zone.slots[0].rule)
    };
    let gauge = probe.load.clone().unwrap();
    assert_eq!(
        gauge,
        crate::snapshot::LoadGauge {
            from: crate::snapshot::LoadSource::Header("x-load".into()),
            low_milli: 700,
            high_milli: 950,
        }
    );
    // Full weight to low, none from high, linear in tenths between.
    assert_eq!(
        [0, 700, 725, 800, 825, 900, 949, 950, 2000].map(|m| gauge.keep_tenths(m)),
        [10, 10, 9, 6, 5, 2, 0, 0, 0]
    );
    let zone = load(&check(r#"{ from = "json:/load/cpu", low = 50, high = 90 }"#)).unwrap();
    let SlotRule::Check { probe: Some(probe), .. } = &zone.slots[0].rule else {
        panic!()
    };
    assert_eq!(
        probe.load.as_ref().unwrap().from,
        crate::snapshot::LoadSource::Json("/load/cpu".into())
    );
    for (load, why) in [
        (
            r#"{ from = "header:X Load", low = 0.7, high = 0.9 }"#,
            "not a header name",
        ),
        (r#"{ from = "json:load", low = 0.7, high = 0.9 }"#, "starts with '/'"),
        (r#"{ from = "body", low = 0.7, high = 0.9 }"#, "header:NAME"),
        (r#"{ from = "header:x", low = 0.9, high = 0.9 }"#, "must be below high"),
        (r#"{ from = "header:x", low = -1, high = 0.9 }"#, "numbers in 0..="),
        (r#"{ from = "header:x", low = 0.1 }"#, "missing field `high`"),
        (
            r#"{ from = "header:x", low = 0.1, high = 0.2, mid = 0.15 }"#,
            "unknown field",
        ),
    ] {
        let msg = error(&check(load));
        assert!(msg.contains(why) && msg.contains(":22"), "{load}: {msg}");
    }
    let tcp = format!(
        "{HEAD}\n[[health_check]]\nid = \"db\"\ntype = \"tcp\"\nip = \"192.0.2.1\"\nport = 5432\n\
         load = {{ from = \"header:x\", low = 0.1, high = 0.2 }}\n"
    );
    assert!(error(&tcp).contains("http and https checks only"));
}

#[test]
fn transfer_settings_load_and_their_faults_are_named() {
    let with = |keys: &str| HEAD.replace("ttl = 60\n", &format!("ttl = 60\n{keys}\n"));
    let zone = load(&with(
        "transfer_allow = [\"192.0.2.0/24\", \"2001:db8::53\"]\ntransfer_tsig = \"Xfr.Key.\"\nnotify = [\"192.0.2.53:53\", \"[2001:db8::53]:5353\"]",
    ))
    .unwrap();
    let transfer = zone.transfer.as_deref().unwrap();
    assert!(transfer.allows("192.0.2.9".parse().unwrap()));
    assert!(
        transfer.allows("::ffff:192.0.2.9".parse().unwrap()),
        "v4-mapped peers match v4 prefixes"
    );
    assert!(!transfer.allows("192.0.3.9".parse().unwrap()));
    assert!(transfer.allows("2001:db8::53".parse().unwrap()));
    assert!(!transfer.allows("2001:db8::54".parse().unwrap()));
    assert_eq!(transfer.tsig.as_deref(), Some("xfr.key"));
    assert_eq!(transfer.notify.len(), 2);
    assert!(load(HEAD).unwrap().transfer.is_none());
    let msg = error(&with("transfer_allow = [\"192.0.2.1/24\"]"));
    assert!(
        msg.contains(":5: zone.transfer_allow: ") && msg.contains("bits set past /24"),
        "{msg}"
    );
    let msg = error(&with("transfer_allow = [\"192.0.2.1\"]\nnotify = [\"ns2\"]"));
    assert!(msg.contains("zone.notify: \"ns2\" is not ADDRESS:PORT"), "{msg}");
    let msg = error(&with("notify = [\"192.0.2.1:53\"]"));
    assert!(msg.contains("must be allowed to transfer"), "{msg}");
}

/// `primary`: the records come from the copy under the secondary directory; the file's
/// sets load on top; no copy yet → the zone waits (listed, not an error of the load).
#[test]
fn zones_taken_from_a_primary_load_their_copy() {
    let dir = tempfile::tempdir().unwrap();
    let zones = dir.path().join("zones");
    let copies = dir.path().join("secondary");
    fs::create_dir_all(&zones).unwrap();
    fs::create_dir_all(&copies).unwrap();
    let file = "[zone]\norigin = \"in.example.\"\nprimary = \"192.0.2.53:53\"\nprimary_tsig = \"k\"\n\
                [[rrset]]\nname = \"www\"\ntype = \"A\"\nvalues = [\"192.0.2.1\"]\n";
    fs::write(zones.join("in.example.toml"), file).unwrap();
    let sources = Sources {
        secondary_dir: Some(&copies),
        dynamic_dir: None,
        ..Sources::default()
    };
    let (snapshot, pending) = load_dir_pending(&zones, 1, sources).unwrap();
    assert!(snapshot.zones.is_empty());
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].primary, "192.0.2.53:53".parse().unwrap());
    assert_eq!(pending[0].tsig.as_deref(), Some("k"));
    fs::write(
        copies.join(secondary_copy_name(b"\x02in\x07example\x00")),
        "in.example. 60 IN SOA ns.in.example. h.in.example. 7 60 60 600 5\nin.example. 60 IN NS ns.in.example.\nmail.in.example. 60 IN A 192.0.2.9\n",
    )
    .unwrap();
    let (snapshot, pending) = load_dir_pending(&zones, 1, sources).unwrap();
    assert!(pending.is_empty());
    let zone = &snapshot.zones[0];
    assert_eq!(zone.serial, 7);
    assert!(zone.rrset(b"\x04mail\x02in\x07example\x00", 1).is_some());
    assert!(zone.rrset(b"\x03www\x02in\x07example\x00", 1).is_some());
    // A name in both: the loader's "defined twice".
    fs::write(zones.join("in.example.toml"), file.replace("\"www\"", "\"mail\"")).unwrap();
    let err = load_dir_pending(&zones, 1, sources).unwrap_err().to_string();
    assert!(err.contains("mail.in.example. A is defined twice"), "{err}");
    assert!(err.contains("set `replace = true`"), "{err}");
    // With `replace = true` the file's set answers.
    fs::write(
        zones.join("in.example.toml"),
        file.replace("\"www\"", "\"mail\"")
            .replace("values = [\"192.0.2.1\"]", "values = [\"192.0.2.1\"]\nreplace = true"),
    )
    .unwrap();
    let (snapshot, _) = load_dir_pending(&zones, 1, sources).unwrap();
    let mail = snapshot.zones[0].rrset(b"\x04mail\x02in\x07example\x00", 1).unwrap();
    assert_eq!(mail.rdata, vec![vec![192, 0, 2, 1]]);
    // Only control takes zones from a primary; include and primary do not go together.
    fs::write(zones.join("in.example.toml"), file).unwrap();
    let plain = dir.path().join("plain");
    fs::create_dir_all(&plain).unwrap();
    fs::write(
        plain.join("p.toml"),
        format!("{HEAD}[[rrset]]\nname = \"www\"\ntype = \"A\"\nvalues = [\"192.0.2.1\"]\nreplace = true\n"),
    )
    .unwrap();
    let err = load_dir(&plain, 1).unwrap_err().to_string();
    assert!(
        err.contains("rrset[0].replace: `replace` applies in a zone taken from a primary"),
        "{err}"
    );
    let err = load_dir(&zones, 1).unwrap_err().to_string();
    assert!(err.contains("zone.primary: only qdns-control"), "{err}");
    fs::write(
        zones.join("in.example.toml"),
        file.replace("primary_tsig", "include = \"x.zone\"\nprimary_tsig"),
    )
    .unwrap();
    let err = load_dir_pending(&zones, 1, sources).unwrap_err().to_string();
    assert!(err.contains("zone.include: a zone taken from a primary"), "{err}");
}

/// `[[zone.update]]` rules are read into the zone's transfer settings, and a bad one is
/// an error naming the rule's key.
#[test]
fn update_rules_load_and_bad_ones_name_their_key() {
    let rule = |names: &str, types: &str| {
        format!("{HEAD}\n[[zone.update]]\nkey = \"Acme-Key.\"\nnames = {names}\ntypes = {types}\n")
    };
    let zone = load(&rule(r#"["_acme-challenge", "_acme-challenge.*"]"#, r#"["TXT"]"#)).unwrap();
    let rules = &zone.transfer.as_ref().unwrap().update;
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].key, "acme-key");
    assert_eq!(rules[0].types, Some(vec![16]));
    assert!(rules[0].permits(
        "acme-key",
        &zone.origin,
        b"\x0f_acme-challenge\x07example\x03com\x00",
        16
    ));
    assert_eq!(rules[0].per_minute, None);
    let any = load(&rule(r#"["**"]"#, r#"["*"]"#)).unwrap();
    assert_eq!(any.transfer.as_ref().unwrap().update[0].types, None);
    let limited = load(&rule(r#"["**"]"#, "[\"A\"]\nper_minute = 30")).unwrap();
    assert_eq!(limited.transfer.as_ref().unwrap().update[0].per_minute, Some(30));
    let zero = error(&rule(r#"["**"]"#, "[\"A\"]\nper_minute = 0"));
    assert!(
        zero.contains("zone.update[0].per_minute") && zero.contains("refuse every UPDATE"),
        "{zero}"
    );
    for (names, types, key, says) in [
        (r#"["www."]"#, r#"["A"]"#, "zone.update[0].names", "relative"),
        (r#"["a b"]"#, r#"["A"]"#, "zone.update[0].names", "label"),
        ("[]", r#"["A"]"#, "zone.update[0].names", "no name"),
        (r#"["@"]"#, r#"["BOGUS"]"#, "zone.update[0].types", "unknown type"),
        (r#"["@"]"#, r#"["DNSKEY"]"#, "zone.update[0].types", "never changed"),
        (r#"["@"]"#, r#"["SOA"]"#, "zone.update[0].types", "never changed"),
    ] {
        let msg = error(&rule(names, types));
        assert!(msg.contains(key) && msg.contains(says), "{names} {types}: {msg}");
    }
}
