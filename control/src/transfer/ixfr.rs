//! IXFR from a primary (RFC 1995 §4), the client side: reading the answer — the SOA
//! alone (current), the whole zone (AXFR form), or changes (each the old SOA and the
//! records gone, the new SOA and the records come) — and applying changes to the copy
//! held from the last transfer.
use super::wire::{rtype, Rr};

/// One change: what goes (the old SOA first), what comes (the new SOA first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Records removed.
    pub removed: Vec<Rr>,
    /// Records added.
    pub added: Vec<Rr>,
}

/// An IXFR answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ixfr {
    /// The SOA alone: the copy is current.
    Current,
    /// The whole zone (SOA first, the closing SOA left out).
    Whole(Vec<Rr>),
    /// Changes, oldest first.
    Changes(Vec<Change>),
}

fn is_soa(r: &Rr, origin: &[u8]) -> bool {
    r.rtype == rtype::SOA && r.owner == origin
}

/// The serial of an SOA record.
#[must_use]
pub fn serial(r: &Rr) -> u32 {
    let at = r.rdata.len().saturating_sub(20);
    r.rdata
        .get(at..at + 4)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Reads the records of an IXFR answer so far: `Ok(None)` while it is not complete.
pub fn parse(origin: &[u8], records: &[Rr]) -> Result<Option<Ixfr>, String> {
    let Some(first) = records.first() else {
        return Ok(None);
    };
    if !is_soa(first, origin) {
        return Err("the IXFR answer does not start with the SOA".to_owned());
    }
    let new = serial(first);
    match records.get(1) {
        None => Ok(Some(Ixfr::Current)),
        Some(second) if is_soa(second, origin) => changes(origin, records, new),
        Some(_) => Ok(match records.last() {
            Some(last) if records.len() > 1 && is_soa(last, origin) => {
                Some(Ixfr::Whole(records[..records.len() - 1].to_vec()))
            }
            _ => None,
        }),
    }
}

fn changes(origin: &[u8], records: &[Rr], new: u32) -> Result<Option<Ixfr>, String> {
    let mut out = Vec::new();
    let mut i = 1;
    loop {
        let Some(old) = records.get(i) else { return Ok(None) };
        if !is_soa(old, origin) {
            return Err("an IXFR change that does not start with the SOA".to_owned());
        }
        if serial(old) == new {
            return if i + 1 == records.len() {
                Ok(Some(Ixfr::Changes(out)))
            } else {
                Err("records after the IXFR's closing SOA".to_owned())
            };
        }
        let mut removed = vec![old.clone()];
        i += 1;
        while let Some(r) = records.get(i).filter(|r| !is_soa(r, origin)) {
            removed.push(r.clone());
            i += 1;
        }
        let Some(soa) = records.get(i) else { return Ok(None) };
        let mut added = vec![soa.clone()];
        i += 1;
        while let Some(r) = records.get(i).filter(|r| !is_soa(r, origin)) {
            added.push(r.clone());
            i += 1;
        }
        if i >= records.len() {
            return Ok(None);
        }
        out.push(Change { removed, added });
    }
}

/// `base` (a whole zone, SOA first) with `changes` applied; an error when a change
/// removes a record the copy does not hold (the copy and the primary disagree: take the
/// whole zone).
pub fn apply(base: &[Rr], changes: &[Change]) -> Result<Vec<Rr>, String> {
    let mut zone: Vec<Rr> = base.to_vec();
    let same = |a: &Rr, b: &Rr| a.owner == b.owner && a.rtype == b.rtype && a.class == b.class && a.rdata == b.rdata;
    for change in changes {
        for gone in &change.removed {
            let at = zone
                .iter()
                .position(|r| same(r, gone))
                .ok_or("an IXFR change removes a record the copy does not hold")?;
            zone.swap_remove(at);
        }
        zone.extend(change.added.iter().cloned());
    }
    // The SOA first again (the copy's master file starts with it).
    if let Some(at) = zone.iter().position(|r| r.rtype == rtype::SOA) {
        let soa = zone.remove(at);
        zone.insert(0, soa);
    }
    Ok(zone)
}

#[cfg(test)]
mod tests {
    use super::*;

    const O: &[u8] = b"\x01z\x00";

    fn soa(serial: u32) -> Rr {
        let mut rdata = b"\x00\x00".to_vec();
        for f in [serial, 1, 1, 1, 1] {
            rdata.extend_from_slice(&f.to_be_bytes());
        }
        Rr {
            owner: O.to_vec(),
            rtype: rtype::SOA,
            class: 1,
            ttl: 60,
            rdata,
        }
    }

    fn a(last: u8) -> Rr {
        Rr {
            owner: b"\x01a\x01z\x00".to_vec(),
            rtype: 1,
            class: 1,
            ttl: 60,
            rdata: vec![192, 0, 2, last],
        }
    }

    #[test]
    fn the_three_forms_and_what_is_incomplete() {
        assert_eq!(parse(O, &[soa(3)]).unwrap(), Some(Ixfr::Current));
        assert_eq!(parse(O, &[soa(3), a(1)]).unwrap(), None);
        assert_eq!(
            parse(O, &[soa(3), a(1), soa(3)]).unwrap(),
            Some(Ixfr::Whole(vec![soa(3), a(1)]))
        );
        let two = [soa(3), soa(1), a(1), soa(2), a(2), soa(2), a(2), soa(3), a(3), soa(3)];
        for end in 2..two.len() {
            assert_eq!(parse(O, &two[..end]).unwrap(), None, "{end}");
        }
        let Some(Ixfr::Changes(changes)) = parse(O, &two).unwrap() else {
            panic!()
        };
        assert_eq!(changes.len(), 2);
        let base = vec![soa(1), a(1)];
        let now = apply(&base, &changes).unwrap();
        assert_eq!(now[0], soa(3));
        assert_eq!(now[1..].to_vec(), vec![a(3)]);
        assert!(apply(&[soa(1)], &changes).is_err(), "removing what the copy lacks");
        assert!(parse(O, &[a(1)]).is_err());
    }
}
