//! RR type mnemonics (IANA registry) and the types a zone file may not hold.
//!
//! Our own table rather than hickory-proto's `RecordType`: that one lacks SPF, URI,
//! RP, AFSDB and KX, and has no `TYPEnnn` form (RFC 3597 §5).

pub(super) const A: u16 = 1;
pub(super) const NS: u16 = 2;
pub(super) const CNAME: u16 = 5;
pub(super) const SOA: u16 = 6;
pub(super) const PTR: u16 = 12;
pub(super) const HINFO: u16 = 13;
pub(super) const MX: u16 = 15;
pub(super) const TXT: u16 = 16;
pub(super) const RP: u16 = 17;
pub(super) const AFSDB: u16 = 18;
pub(super) const AAAA: u16 = 28;
pub(super) const SRV: u16 = 33;
pub(super) const NAPTR: u16 = 35;
pub(super) const KX: u16 = 36;
pub(super) const DNAME: u16 = 39;
pub(super) const DS: u16 = 43;
pub(super) const SSHFP: u16 = 44;
pub(super) const NSEC: u16 = 47;
pub(super) const TLSA: u16 = 52;
pub(super) const SMIMEA: u16 = 53;
pub(super) const CDS: u16 = 59;
pub(super) const CDNSKEY: u16 = 60;
pub(super) const OPENPGPKEY: u16 = 61;
pub(super) const SVCB: u16 = 64;
pub(super) const HTTPS: u16 = 65;
pub(super) const SPF: u16 = 99;
pub(super) const URI: u16 = 256;
pub(super) const CAA: u16 = 257;

/// Code and mnemonic of every type we name.
const TABLE: &[(u16, &str)] = &[
    (A, "A"),
    (NS, "NS"),
    (3, "MD"),
    (4, "MF"),
    (CNAME, "CNAME"),
    (SOA, "SOA"),
    (7, "MB"),
    (8, "MG"),
    (9, "MR"),
    (10, "NULL"),
    (11, "WKS"),
    (PTR, "PTR"),
    (HINFO, "HINFO"),
    (14, "MINFO"),
    (MX, "MX"),
    (TXT, "TXT"),
    (RP, "RP"),
    (AFSDB, "AFSDB"),
    (24, "SIG"),
    (25, "KEY"),
    (AAAA, "AAAA"),
    (29, "LOC"),
    (SRV, "SRV"),
    (NAPTR, "NAPTR"),
    (KX, "KX"),
    (37, "CERT"),
    (DNAME, "DNAME"),
    (41, "OPT"),
    (42, "APL"),
    (DS, "DS"),
    (SSHFP, "SSHFP"),
    (45, "IPSECKEY"),
    (46, "RRSIG"),
    (NSEC, "NSEC"),
    (48, "DNSKEY"),
    (49, "DHCID"),
    (50, "NSEC3"),
    (51, "NSEC3PARAM"),
    (TLSA, "TLSA"),
    (SMIMEA, "SMIMEA"),
    (55, "HIP"),
    (CDS, "CDS"),
    (CDNSKEY, "CDNSKEY"),
    (OPENPGPKEY, "OPENPGPKEY"),
    (62, "CSYNC"),
    (63, "ZONEMD"),
    (SVCB, "SVCB"),
    (HTTPS, "HTTPS"),
    (SPF, "SPF"),
    (108, "EUI48"),
    (109, "EUI64"),
    (249, "TKEY"),
    (250, "TSIG"),
    (251, "IXFR"),
    (252, "AXFR"),
    (253, "MAILB"),
    (254, "MAILA"),
    (255, "ANY"),
    (URI, "URI"),
    (CAA, "CAA"),
];

/// The mnemonic of `code`, or `TYPEnnn`.
pub(super) fn name(code: u16) -> String {
    TABLE
        .iter()
        .find(|(c, _)| *c == code)
        .map_or_else(|| format!("TYPE{code}"), |(_, n)| (*n).to_owned())
}

/// The code of a mnemonic or `TYPEnnn` (case-insensitive).
pub(super) fn code(mnemonic: &str) -> Option<u16> {
    let upper = mnemonic.to_ascii_uppercase();
    if let Some(digits) = upper.strip_prefix("TYPE") {
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            return digits.parse().ok();
        }
    }
    TABLE.iter().find(|(_, n)| *n == upper).map(|(c, _)| *c)
}

/// Types a zone may not hold, with the reason: DNSSEC records (qdns signs in the
/// control plane; a zone's own signatures would go stale under health changes) and
/// meta or question types (RFC 6895 §3.1).
pub(super) fn refuse(code: u16) -> Result<(), String> {
    match code {
        24 | 25 | 46 | NSEC | 48 | 50 | 51 => Err(format!(
            "{} records are not served: qdns does not serve signed zones from zone files",
            name(code)
        )),
        DNAME => Err(
            "DNAME redirection (RFC 6672) is not implemented: names below it would get NXDOMAIN; use CNAMEs".to_owned(),
        ),
        0 | 41 | 128..=255 => Err(format!("{} is a meta or question type, not zone data", name(code))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes() {
        assert_eq!(code("aaaa"), Some(28));
        assert_eq!(code("TYPE65280"), Some(65280));
        assert_eq!(code("type1"), Some(1));
        assert_eq!(code("TYPE"), None);
        assert_eq!(code("TYPE70000"), None);
        assert_eq!(code("FOO"), None);
        assert_eq!(name(65280), "TYPE65280");
        assert_eq!(name(99), "SPF");
        assert!(refuse(DS).is_ok());
        assert!(refuse(46).is_err());
        assert!(refuse(DNAME).unwrap_err().contains("RFC 6672"));
    }
}
