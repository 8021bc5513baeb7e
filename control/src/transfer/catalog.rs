//! Catalog zones (RFC 9432), consumed: a zone with `catalog = true` and a `primary`
//! lists member zones as `UNIQUE-ID.zones.CATALOG PTR MEMBER`; each member is taken from
//! the same primary (with the same key) and served — added when it appears in the
//! catalog, removed when it leaves — by a zone file control writes for it under
//! `STATE_DIR/secondary/members/`, loaded with the operator's zone files (an operator's
//! file for the same origin takes its place, to add health on top). Only version 2 is
//! read; member properties (`group`, `coo`) are not used.
use std::{fmt::Write as _, io, path::Path};

use super::{primary::Primary, wire};

/// Most members one catalog may list.
pub const MAX_MEMBERS: usize = 100_000;
const PTR: u16 = 12;
const TXT: u16 = 16;

/// The members a catalog's records list (wire names, lowercase, sorted, once each).
pub fn members(origin: &[u8], records: &[wire::Rr]) -> Result<Vec<Vec<u8>>, String> {
    let version = [&b"\x07version"[..], origin].concat();
    let versions: Vec<&wire::Rr> = records
        .iter()
        .filter(|r| r.rtype == TXT && r.owner == version)
        .collect();
    if versions.len() != 1 || versions[0].rdata != b"\x012" {
        return Err(format!(
            "{} is not a version 2 catalog zone (RFC 9432 §4.2: one `version` TXT \"2\")",
            qdns_zone::name::to_text(origin)
        ));
    }
    let zones = [&b"\x05zones"[..], origin].concat();
    let mut out: Vec<Vec<u8>> = records
        .iter()
        .filter(|r| r.rtype == PTR && r.owner.len() > zones.len() && r.owner.ends_with(&zones))
        .filter(|r| usize::from(r.owner[0]) + 1 + zones.len() == r.owner.len())
        .map(|r| wire::lowercase(&r.rdata))
        .collect();
    out.sort();
    out.dedup();
    if out.len() > MAX_MEMBERS {
        return Err(format!("the catalog lists {} zones, over {MAX_MEMBERS}", out.len()));
    }
    if let Some(bad) = out.iter().find(|m| !host_like(m)) {
        // The member's name becomes a file name under the state directory: nothing but
        // letters, digits, `-` and `_` in its labels (a `/` would leave the directory).
        return Err(format!(
            "member {:?} is not a zone name of letters, digits, '-' and '_'",
            qdns_zone::name::to_text(bad)
        ));
    }
    Ok(out)
}

/// A wire name of one or more labels of letters, digits, `-` and `_`.
fn host_like(name: &[u8]) -> bool {
    let mut i = 0;
    let mut labels = 0;
    while let Some(&len) = name.get(i) {
        if len == 0 {
            return labels > 0 && i + 1 == name.len();
        }
        let Some(label) = name.get(i + 1..i + 1 + usize::from(len)) else {
            return false;
        };
        if len > 63
            || !label
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
        {
            return false;
        }
        labels += 1;
        i += 1 + usize::from(len);
    }
    false
}

/// Member zone files written and removed by one [`sync_files`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Sync {
    /// Members new (or whose file changed).
    pub added: Vec<Vec<u8>>,
    /// Members no longer listed.
    pub removed: Vec<Vec<u8>>,
    /// Members another catalog already holds (its file is left as it is: the first
    /// catalog to list a zone keeps it, issue 53 §5).
    pub taken: Vec<Vec<u8>>,
}

impl Sync {
    /// True when anything changed.
    #[must_use]
    pub fn any(&self) -> bool {
        !self.added.is_empty() || !self.removed.is_empty()
    }
}

fn marker(catalog: &[u8]) -> String {
    format!(
        "# member of catalog zone {} (RFC 9432), written by qdns-control",
        qdns_zone::name::to_text(catalog)
    )
}

fn file_text(catalog: &[u8], member: &[u8], zone: &Primary) -> String {
    let mut text = format!(
        "{}\n[zone]\norigin = \"{}\"\nprimary = \"{}\"\n",
        marker(catalog),
        qdns_zone::name::to_text(member),
        zone.addr
    );
    if let Some(key) = &zone.tsig {
        let _ = writeln!(text, "primary_tsig = \"{key}\"");
    }
    text
}

/// Makes `dir` hold a zone file for each of `members` of `catalog` and none for the
/// members it no longer lists (files of other catalogs are left alone).
pub fn sync_files(dir: &Path, catalog: &[u8], zone: &Primary, members: &[Vec<u8>]) -> io::Result<Sync> {
    std::fs::create_dir_all(dir)?;
    let mark = marker(catalog);
    let mut sync = Sync::default();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if text.lines().next() != Some(mark.as_str()) {
            continue;
        }
        let origin = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix("toml"))
            .and_then(|origin| qdns_zone::master::parse_name_wire(origin, b"\0").ok());
        if let Some(origin) = origin.filter(|o| !members.contains(o)) {
            std::fs::remove_file(&path)?;
            sync.removed.push(origin);
        }
    }
    for member in members {
        let name = format!("{}toml", qdns_zone::name::to_text(member));
        let text = file_text(catalog, member, zone);
        let held = std::fs::read_to_string(dir.join(&name)).ok();
        if held
            .as_deref()
            .is_some_and(|held| held.lines().next() != Some(mark.as_str()))
        {
            sync.taken.push(member.clone());
            continue;
        }
        if held.as_deref() != Some(text.as_str()) {
            crate::persist::write_private(dir, &name, text.as_bytes())?;
            sync.added.push(member.clone());
        }
    }
    Ok(sync)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rr(owner: &[u8], rtype: u16, rdata: &[u8]) -> wire::Rr {
        wire::Rr {
            owner: owner.to_vec(),
            rtype,
            class: 1,
            ttl: 0,
            rdata: rdata.to_vec(),
        }
    }

    #[test]
    fn members_of_a_version_2_catalog() {
        let cat = b"\x03cat\x00";
        let records = vec![
            rr(b"\x07version\x03cat\x00", TXT, b"\x012"),
            rr(b"\x02id\x05zones\x03cat\x00", PTR, b"\x02M1\x00"),
            rr(b"\x03id2\x05zones\x03cat\x00", PTR, b"\x02m2\x00"),
            // A property below a member (RFC 9432 §4.4): not a member.
            rr(b"\x05group\x02id\x05zones\x03cat\x00", TXT, b"\x01g"),
            rr(b"\x01x\x02id\x05zones\x03cat\x00", PTR, b"\x02m3\x00"),
        ];
        assert_eq!(
            members(cat, &records).unwrap(),
            vec![b"\x02m1\x00".to_vec(), b"\x02m2\x00".to_vec()]
        );
        let v1 = [rr(b"\x07version\x03cat\x00", TXT, b"\x011")];
        assert!(members(cat, &v1).unwrap_err().contains("version 2"));
        // A member whose name would leave the members directory as a file name.
        let escape = [
            rr(b"\x07version\x03cat\x00", TXT, b"\x012"),
            rr(b"\x02id\x05zones\x03cat\x00", PTR, b"\x04/etc\x03cat\x00"),
        ];
        assert!(members(cat, &escape).unwrap_err().contains("not a zone name"));
    }

    #[test]
    fn member_files_follow_the_catalog() {
        let dir = tempfile::tempdir().unwrap();
        let zone = Primary {
            addr: "127.0.0.1:53".parse().unwrap(),
            tsig: Some("k".to_owned()),
            catalog: true,
        };
        let (m1, m2) = (b"\x02m1\x00".to_vec(), b"\x02m2\x00".to_vec());
        let first = sync_files(dir.path(), b"\x03cat\x00", &zone, &[m1.clone(), m2.clone()]).unwrap();
        assert_eq!(first.added.len(), 2);
        let text = std::fs::read_to_string(dir.path().join("m1.toml")).unwrap();
        assert!(
            text.contains("origin = \"m1.\"") && text.contains("primary_tsig = \"k\""),
            "{text}"
        );
        assert!(
            !sync_files(dir.path(), b"\x03cat\x00", &zone, &[m1.clone(), m2.clone()])
                .unwrap()
                .any()
        );
        let other = sync_files(dir.path(), b"\x05other\x00", &zone, &[]).unwrap();
        assert!(!other.any(), "another catalog's members are left alone");
        // Another catalog listing m1 as well does not take it over.
        let before = std::fs::read_to_string(dir.path().join("m1.toml")).unwrap();
        let rival = Primary {
            addr: "192.0.2.66:53".parse().unwrap(),
            tsig: None,
            catalog: true,
        };
        let grab = sync_files(dir.path(), b"\x05other\x00", &rival, std::slice::from_ref(&m1)).unwrap();
        assert_eq!(grab.taken, vec![m1.clone()]);
        assert!(grab.added.is_empty());
        assert_eq!(std::fs::read_to_string(dir.path().join("m1.toml")).unwrap(), before);
        let second = sync_files(dir.path(), b"\x03cat\x00", &zone, &[m2]).unwrap();
        assert_eq!(second.removed, vec![m1]);
        assert!(!dir.path().join("m1.toml").exists());
    }
}
