//! The records dynamic update added, kept in the state directory: one master file a
//! zone under `STATE_DIR/dynamic/` (named as a secondary copy is), which the zone loader
//! reads as if the zone included it — so a reload, a restart and `qdnsctl reload` keep
//! them. Each line is one record in presentation form, then a comment with the key that
//! added it and when: `NAME TTL IN TYPE RDATA ; key=KEY at=UNIX`.
use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use super::apply::Record;

/// Where under the state directory.
pub const DIR: &str = "dynamic";

/// The file of the zone at `origin` (wire) under `dir`.
#[must_use]
pub fn path(dir: &Path, origin: &[u8]) -> PathBuf {
    dir.join(qdns_zone::load::secondary_copy_name(origin))
}

/// The records kept for the zone at `origin`; none when there is no file.
///
/// # Errors
/// A file that cannot be read, or a line that does not read back (named).
pub fn read(dir: &Path, origin: &[u8]) -> Result<Vec<Record>, String> {
    let path = path(dir, origin);
    match qdns_zone::master::read_bounded(&path) {
        Ok(bytes) => parse(&bytes, &path.display().to_string()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(err) => Err(format!("{}: {err}", path.display())),
    }
}

/// The records of a dynamic file's text `bytes` (`source` names it in errors).
///
/// # Errors
/// Not UTF-8, or a line that does not read back (named).
pub fn parse(bytes: &[u8], source: &str) -> Result<Vec<Record>, String> {
    let path = Path::new(source);
    let text = std::str::from_utf8(bytes).map_err(|_| format!("{source}: not UTF-8"))?;
    let mut records = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let bad = |why: &str| format!("{}:{}: {why}", path.display(), n + 1);
        let (record, meta) = line.rsplit_once(" ; key=").ok_or_else(|| bad("no `; key=… at=…`"))?;
        let (key, at) = meta.split_once(" at=").ok_or_else(|| bad("no `at=`"))?;
        let at: u64 = at.trim().parse().map_err(|_| bad("`at=` is not a number"))?;
        let mut parsed = None;
        qdns_zone::master::parse_each(record.as_bytes(), path, &hickory_proto::rr::Name::root(), 0, &mut |r| {
            parsed = Some((r.name, r.rtype, r.ttl, r.rdata));
            Ok(())
        })
        .map_err(|e| bad(&e.to_string()))?;
        let (name, rtype, ttl, rdata) = parsed.ok_or_else(|| bad("no record"))?;
        records.push(Record {
            name,
            rtype,
            ttl,
            rdata,
            key: key.trim().to_owned(),
            at,
        });
    }
    Ok(records)
}

/// Keeps `records` as the zone's (no file when there are none), durably: written to a
/// new file, synced, then renamed over the old.
///
/// # Errors
/// The directory or file cannot be written.
pub fn write(dir: &Path, origin: &[u8], records: &[Record]) -> Result<(), String> {
    let path = path(dir, origin);
    if records.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(format!("{}: {err}", path.display())),
            _ => Ok(()),
        };
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    qdns_link::pki::write_atomic(&path, text(records).as_bytes(), 0o600).map_err(|e| e.to_string())
}

/// The file's text (also the deployment's value of the zone's records).
#[must_use]
pub fn text(records: &[Record]) -> String {
    use qdns_zone::master::{present, type_name};
    let mut out = String::new();
    for r in records {
        // The RDATA's own form: what apply admitted (present::native_text) reads back.
        let rdata = present::rdata_text(r.rtype, &r.rdata);
        let _ = writeln!(
            out,
            "{} {} IN {} {rdata} ; key={} at={}",
            present::name_text(&r.name),
            r.ttl,
            type_name(r.rtype),
            r.key,
            r.at
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let origin = b"\x07example\x03com\x00";
        let records = vec![
            Record {
                name: b"\x0f_acme-challenge\x07example\x03com\x00".to_vec(),
                rtype: 16,
                ttl: 60,
                rdata: b"\x0ctok ; key=x\"".to_vec(),
                key: "acme".into(),
                at: 1_765_000_000,
            },
            Record {
                name: b"\x03dyn\x07example\x03com\x00".to_vec(),
                rtype: 1,
                ttl: 300,
                rdata: vec![192, 0, 2, 7],
                key: "external-dns".into(),
                at: 1_765_000_001,
            },
        ];
        write(dir.path(), origin, &records).unwrap();
        assert_eq!(read(dir.path(), origin).unwrap(), records);
        write(dir.path(), origin, &[]).unwrap();
        assert!(read(dir.path(), origin).unwrap().is_empty());
        assert!(!path(dir.path(), origin).exists());
    }
}
