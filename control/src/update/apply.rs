//! An UPDATE's prerequisites and updates (RFC 2136 §3.2, §3.4) checked against a zone
//! and carried out on the records dynamic update added to it: all of them or none.
//! What the zone files define is never changed here (SPEC §11): an update touching a
//! set the files define, a policy set, the SOA, the apex NS or DNSSEC records is
//! refused, as is one no `[[zone.update]]` rule of the key permits.
use std::collections::BTreeMap;

use qdns_zone::{
    snapshot::{RecordSet, Zone},
    update::{relative_labels, Rule, NEVER},
};

use super::Outcome;
use crate::transfer::wire::{rcode, Rr};

/// Class IN (the zone's).
const IN: u16 = 1;
/// Class NONE.
const NONE: u16 = 254;
/// Class and type ANY.
const ANY: u16 = 255;
const TYPE_NS: u16 = 2;
const TYPE_CNAME: u16 = 5;

/// Most records dynamic update keeps in one zone: an UPDATE that would keep more is
/// refused (a key's holder cannot grow the zone without bound).
pub const MAX_RECORDS: usize = 10_000;

/// A record added by dynamic update: what it is, the key that added it, when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Owner, wire, lowercase.
    pub name: Vec<u8>,
    /// Type.
    pub rtype: u16,
    /// TTL.
    pub ttl: u32,
    /// RDATA, names written out.
    pub rdata: Vec<u8>,
    /// The TSIG key that added it.
    pub key: String,
    /// When (Unix seconds).
    pub at: u64,
}

/// Why an UPDATE is answered with an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The RCODE.
    pub rcode: u8,
    /// What it counts as.
    pub outcome: Outcome,
    /// Why, for the log.
    pub why: String,
}

fn refused(rcode: u8, outcome: Outcome, why: impl Into<String>) -> Refused {
    Refused {
        rcode,
        outcome,
        why: why.into(),
    }
}

/// What the zone holds, as an UPDATE sees it.
struct View<'z> {
    zone: &'z Zone,
    dynamic: &'z [Record],
}

impl View<'_> {
    fn sets_at<'s>(&'s self, name: &'s [u8]) -> impl Iterator<Item = &'s RecordSet> + 's {
        self.zone.rrsets.iter().filter(move |s| s.name == name)
    }

    fn set<'s>(&'s self, name: &'s [u8], rtype: u16) -> Option<&'s RecordSet> {
        self.sets_at(name).find(|s| s.rtype == rtype)
    }

    /// True when dynamic update made the set (name, type).
    fn is_dynamic(&self, name: &[u8], rtype: u16) -> bool {
        self.dynamic.iter().any(|r| r.name == name && r.rtype == rtype)
    }
}

/// Checks `prerequisites` and carries out `updates` with the rights of `key` under
/// `rules`, on `dynamic`, the records dynamic update keeps in `zone` (which the served
/// `zone` includes); the records to keep from now on.
///
/// # Errors
/// The first prerequisite that fails, a malformed or out-of-zone record, or an update
/// that is not permitted — nothing is changed then.
pub fn apply(
    zone: &Zone,
    dynamic: &[Record],
    (prerequisites, updates): (&[Rr], &[Rr]),
    (key, rules): (&str, &[Rule]),
    now: u64,
) -> Result<Vec<Record>, Refused> {
    let view = View { zone, dynamic };
    check_prerequisites(&view, prerequisites)?;
    for rr in updates {
        prescan(&view, rr)?;
        permitted(&view, rr, key, rules)?;
    }
    let mut records = dynamic.to_vec();
    for rr in updates {
        carry_out(&view, &mut records, rr, key, now);
    }
    if records.len() > MAX_RECORDS {
        return Err(refused(
            rcode::REFUSED,
            Outcome::RefusedRule,
            format!("the zone would keep more than {MAX_RECORDS} records added by dynamic update"),
        ));
    }
    Ok(records)
}

fn in_zone(zone: &Zone, rr: &Rr) -> Result<(), Refused> {
    if relative_labels(&zone.origin, &rr.owner).is_none() {
        return Err(refused(
            rcode::NOTZONE,
            Outcome::NotZone,
            format!("{} is outside the zone", qdns_zone::name::to_text(&rr.owner)),
        ));
    }
    Ok(())
}

fn formerr(why: impl Into<String>) -> Refused {
    refused(rcode::FORMERR, Outcome::Malformed, why)
}

/// RFC 2136 §3.2.
fn check_prerequisites(view: &View<'_>, prerequisites: &[Rr]) -> Result<(), Refused> {
    let mut values: BTreeMap<(Vec<u8>, u16), Vec<Vec<u8>>> = BTreeMap::new();
    for rr in prerequisites {
        if rr.ttl != 0 {
            return Err(formerr("a prerequisite with a TTL"));
        }
        in_zone(view.zone, rr)?;
        let name_text = || qdns_zone::name::to_text(&rr.owner);
        let type_text = || qdns_zone::master::type_name(rr.rtype);
        match rr.class {
            ANY | NONE if !rr.rdata.is_empty() => {
                return Err(formerr("a prerequisite of class ANY or NONE with RDATA"))
            }
            ANY if rr.rtype == ANY => {
                if view.sets_at(&rr.owner).next().is_none() {
                    return Err(refused(
                        rcode::NXDOMAIN,
                        Outcome::Prerequisite,
                        format!("{} is not in use", name_text()),
                    ));
                }
            }
            ANY => {
                if view.set(&rr.owner, rr.rtype).is_none() {
                    return Err(refused(
                        rcode::NXRRSET,
                        Outcome::Prerequisite,
                        format!("{} has no {}", name_text(), type_text()),
                    ));
                }
            }
            NONE if rr.rtype == ANY => {
                if view.sets_at(&rr.owner).next().is_some() {
                    return Err(refused(
                        rcode::YXDOMAIN,
                        Outcome::Prerequisite,
                        format!("{} is in use", name_text()),
                    ));
                }
            }
            NONE => {
                if view.set(&rr.owner, rr.rtype).is_some() {
                    return Err(refused(
                        rcode::YXRRSET,
                        Outcome::Prerequisite,
                        format!("{} has {}", name_text(), type_text()),
                    ));
                }
            }
            IN if rr.rtype == ANY => return Err(formerr("a value prerequisite of type ANY")),
            IN => values
                .entry((rr.owner.clone(), rr.rtype))
                .or_default()
                .push(rr.rdata.clone()),
            _ => return Err(formerr("a prerequisite of another class")),
        }
    }
    // Value-dependent: each set exactly as given (RFC 2136 §3.2.3; a policy set has no
    // one value to compare, so it never matches).
    for ((name, rtype), mut want) in values {
        want.sort();
        want.dedup();
        let have = view.set(&name, rtype).filter(|s| s.policy.is_none()).map(|s| {
            let mut have = s.rdata.clone();
            have.sort();
            have
        });
        if have.as_ref() != Some(&want) {
            return Err(refused(
                rcode::NXRRSET,
                Outcome::Prerequisite,
                format!(
                    "{} {} is not the set given",
                    qdns_zone::name::to_text(&name),
                    qdns_zone::master::type_name(rtype)
                ),
            ));
        }
    }
    Ok(())
}

/// Types no update carries (meta and question types).
fn is_meta(rtype: u16) -> bool {
    matches!(rtype, 0 | 41 | 249..=255)
}

/// RFC 2136 §3.4.1: each update record's form.
fn prescan(view: &View<'_>, rr: &Rr) -> Result<(), Refused> {
    in_zone(view.zone, rr)?;
    match rr.class {
        IN => {
            if is_meta(rr.rtype) {
                return Err(formerr(format!("an added record of type {}", rr.rtype)));
            }
            if qdns_zone::master::present::native_text(rr.rtype, &rr.rdata).is_none() {
                return Err(formerr(format!(
                    "{} {}: the RDATA does not read as the type",
                    qdns_zone::name::to_text(&rr.owner),
                    qdns_zone::master::type_name(rr.rtype)
                )));
            }
        }
        ANY => {
            if rr.ttl != 0 || !rr.rdata.is_empty() || (rr.rtype != ANY && is_meta(rr.rtype)) {
                return Err(formerr("a deletion of class ANY with a TTL, RDATA or a meta type"));
            }
        }
        NONE => {
            if rr.ttl != 0 || is_meta(rr.rtype) {
                return Err(formerr("a deletion of class NONE with a TTL or a meta type"));
            }
        }
        _ => return Err(formerr("an update of another class")),
    }
    Ok(())
}

/// What qdns adds to the RFC: the zone files' sets, policy sets, the SOA, the apex NS
/// and DNSSEC records are not changed by UPDATE, and every change needs a rule.
fn permitted(view: &View<'_>, rr: &Rr, key: &str, rules: &[Rule]) -> Result<(), Refused> {
    let name = qdns_zone::name::to_text(&rr.owner);
    let refuse = |why: String| Err(refused(rcode::REFUSED, Outcome::RefusedRule, why));
    let allowed = |rtype: u16| {
        rules
            .iter()
            .any(|r| r.permits(key, &view.zone.origin, &rr.owner, rtype))
    };
    if rr.class == ANY && rr.rtype == ANY {
        // Delete every set at the name: only sets dynamic update made, each permitted.
        for set in view.sets_at(&rr.owner) {
            if !view.is_dynamic(&rr.owner, set.rtype) {
                return refuse(format!(
                    "{name} has {} records the zone files define",
                    qdns_zone::master::type_name(set.rtype)
                ));
            }
            if !allowed(set.rtype) {
                return refuse(format!(
                    "key {key} may not delete {name} {}",
                    qdns_zone::master::type_name(set.rtype)
                ));
            }
        }
        return Ok(());
    }
    let type_text = qdns_zone::master::type_name(rr.rtype);
    if NEVER.contains(&rr.rtype) || qdns_zone::master::refused_type(rr.rtype).is_err() {
        return refuse(format!("{type_text} records are never changed by UPDATE"));
    }
    if rr.rtype == TYPE_NS && rr.owner == view.zone.origin {
        return refuse("the apex NS is never changed by UPDATE".to_owned());
    }
    if let Some(set) = view.set(&rr.owner, rr.rtype) {
        if set.policy.is_some() {
            return refuse(format!("{name} {type_text} is a policy set"));
        }
        if !view.is_dynamic(&rr.owner, rr.rtype) {
            return refuse(format!("{name} {type_text} is defined by the zone files"));
        }
    }
    if !allowed(rr.rtype) {
        return refuse(format!(
            "no [[zone.update]] rule lets key {key} change {name} {type_text}"
        ));
    }
    Ok(())
}

/// RFC 2136 §3.4.2 on `records`.
fn carry_out(view: &View<'_>, records: &mut Vec<Record>, rr: &Rr, key: &str, now: u64) {
    let same_set = |r: &Record| r.name == rr.owner && r.rtype == rr.rtype;
    match rr.class {
        IN => {
            // CNAME and other data never share a name (§3.4.2.2: such an add is ignored).
            let files_have = |other: &dyn Fn(u16) -> bool| {
                view.sets_at(&rr.owner)
                    .any(|s| other(s.rtype) && !view.is_dynamic(&rr.owner, s.rtype))
            };
            let dynamic_has =
                |other: &dyn Fn(u16) -> bool| records.iter().any(|r| r.name == rr.owner && other(r.rtype));
            let conflict: &dyn Fn(u16) -> bool = if rr.rtype == TYPE_CNAME {
                &|t| t != TYPE_CNAME
            } else {
                &|t| t == TYPE_CNAME
            };
            if files_have(conflict) || dynamic_has(conflict) {
                return;
            }
            if rr.rtype == TYPE_CNAME {
                // A CNAME replaces the one there was.
                records.retain(|r| !same_set(r));
            }
            // One TTL a set (RFC 2181 §5.2): the latest given.
            for r in records.iter_mut().filter(|r| same_set(r)) {
                r.ttl = rr.ttl;
            }
            if !records.iter().any(|r| same_set(r) && r.rdata == rr.rdata) {
                records.push(Record {
                    name: rr.owner.clone(),
                    rtype: rr.rtype,
                    ttl: rr.ttl,
                    rdata: rr.rdata.clone(),
                    key: key.to_owned(),
                    at: now,
                });
            }
        }
        ANY if rr.rtype == ANY => records.retain(|r| r.name != rr.owner),
        ANY => records.retain(|r| !same_set(r)),
        NONE => records.retain(|r| !(same_set(r) && r.rdata == rr.rdata)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(text: &str) -> Vec<u8> {
        qdns_zone::name::to_wire(&hickory_proto::rr::Name::from_ascii(text).unwrap())
    }

    fn zone() -> Zone {
        let text = "[zone]\norigin = \"example.com.\"\nttl = 300\n[zone.soa]\nmname = \"ns1.example.com.\"\n\
                    rname = \"h.example.com.\"\nserial = 1\nrefresh = 60\nretry = 60\nexpire = 600\nminimum = 60\n\
                    [zone.ns]\nnames = [\"ns1.example.com.\"]\n[[rrset]]\nname = \"www\"\ntype = \"A\"\nvalues = [\"192.0.2.1\"]\n";
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("z.toml"), text).unwrap();
        qdns_zone::load_dir(dir.path(), 1).unwrap().zones.remove(0)
    }

    fn rr(owner: &str, rtype: u16, class: u16, ttl: u32, rdata: &[u8]) -> Rr {
        Rr {
            owner: wire(owner),
            rtype,
            class,
            ttl,
            rdata: rdata.to_vec(),
        }
    }

    fn acme() -> Vec<Rule> {
        vec![Rule {
            key: "acme".into(),
            names: vec![qdns_zone::update::Pattern::parse("_acme-challenge.**").unwrap()],
            types: Some(vec![16]),
            per_minute: None,
        }]
    }

    const TXT: u16 = 16;

    #[test]
    fn adds_deletes_and_refuses_as_rfc_2136_and_the_rules_say() {
        let zone = zone();
        let rules = acme();
        let challenge = "_acme-challenge.www.example.com.";
        let add = rr(challenge, TXT, IN, 60, b"\x05token");
        let added = apply(&zone, &[], (&[], std::slice::from_ref(&add)), ("acme", &rules), 7).unwrap();
        assert_eq!(added.len(), 1);
        assert_eq!((added[0].key.as_str(), added[0].at), ("acme", 7));
        // Added twice: one record.
        assert_eq!(
            apply(&zone, &added, (&[], std::slice::from_ref(&add)), ("acme", &rules), 8).unwrap(),
            added
        );
        // Delete one RR, delete the set.
        let gone = apply(
            &zone,
            &added,
            (&[], &[rr(challenge, TXT, NONE, 0, b"\x05token")]),
            ("acme", &rules),
            9,
        );
        assert!(gone.unwrap().is_empty());
        assert!(apply(
            &zone,
            &added,
            (&[], &[rr(challenge, TXT, ANY, 0, b"")]),
            ("acme", &rules),
            9
        )
        .unwrap()
        .is_empty());
        // Not permitted: another type, another key, a name the rule does not match.
        for (update, key) in [
            (rr(challenge, 1, IN, 60, &[192, 0, 2, 9]), "acme"),
            (add.clone(), "other"),
            (rr("www.example.com.", TXT, IN, 60, b"\x01x"), "acme"),
        ] {
            let err = apply(&zone, &[], (&[], &[update]), (key, &rules), 9).unwrap_err();
            assert_eq!(
                (err.rcode, err.outcome),
                (rcode::REFUSED, Outcome::RefusedRule),
                "{err:?}"
            );
        }
        // A set of the zone files, the SOA: refused even with a rule for any type.
        let any = vec![Rule {
            key: "acme".into(),
            names: vec![qdns_zone::update::Pattern::parse("**").unwrap()],
            types: None,
            per_minute: None,
        }];
        let www = rr("www.example.com.", 1, IN, 60, &[192, 0, 2, 9]);
        assert_eq!(
            apply(&zone, &[], (&[], &[www]), ("acme", &any), 9).unwrap_err().rcode,
            rcode::REFUSED
        );
        let www_all = rr("www.example.com.", ANY, ANY, 0, b"");
        assert_eq!(
            apply(&zone, &[], (&[], &[www_all]), ("acme", &any), 9)
                .unwrap_err()
                .rcode,
            rcode::REFUSED
        );
        // Outside the zone; bad RDATA for the type.
        let outside = rr("_acme-challenge.example.net.", TXT, IN, 60, b"\x01x");
        assert_eq!(
            apply(&zone, &[], (&[], &[outside]), ("acme", &rules), 9)
                .unwrap_err()
                .rcode,
            rcode::NOTZONE
        );
        let bad = rr(challenge, TXT, IN, 60, b"\x09short");
        assert_eq!(
            apply(&zone, &[], (&[], &[bad]), ("acme", &rules), 9).unwrap_err().rcode,
            rcode::FORMERR
        );
        // All or nothing: a permitted add beside a refused one changes nothing.
        let refused_too = rr("www.example.com.", TXT, IN, 60, b"\x01x");
        assert!(apply(&zone, &[], (&[], &[add, refused_too]), ("acme", &rules), 9).is_err());
    }

    #[test]
    fn each_prerequisite_kind_holds_or_fails_with_its_rcode() {
        let zone = zone();
        let rules = acme();
        let add = rr("_acme-challenge.x.example.com.", TXT, IN, 60, b"\x01x");
        let check = |prerequisite: Rr| {
            apply(
                &zone,
                &[],
                (&[prerequisite], std::slice::from_ref(&add)),
                ("acme", &rules),
                1,
            )
            .map_err(|e| e.rcode)
        };
        let www = "www.example.com.";
        let nowhere = "nowhere.example.com.";
        assert!(check(rr(www, ANY, ANY, 0, b"")).is_ok());
        assert_eq!(check(rr(nowhere, ANY, ANY, 0, b"")), Err(rcode::NXDOMAIN));
        assert!(check(rr(www, 1, ANY, 0, b"")).is_ok());
        assert_eq!(check(rr(www, TXT, ANY, 0, b"")), Err(rcode::NXRRSET));
        assert!(check(rr(nowhere, ANY, NONE, 0, b"")).is_ok());
        assert_eq!(check(rr(www, ANY, NONE, 0, b"")), Err(rcode::YXDOMAIN));
        assert!(check(rr(www, TXT, NONE, 0, b"")).is_ok());
        assert_eq!(check(rr(www, 1, NONE, 0, b"")), Err(rcode::YXRRSET));
        assert!(check(rr(www, 1, IN, 0, &[192, 0, 2, 1])).is_ok());
        assert_eq!(check(rr(www, 1, IN, 0, &[192, 0, 2, 2])), Err(rcode::NXRRSET));
        assert_eq!(check(rr(www, 1, IN, 60, &[192, 0, 2, 1])), Err(rcode::FORMERR));
        assert_eq!(check(rr("www.example.net.", 1, ANY, 0, b"")), Err(rcode::NOTZONE));
    }
}
