//! `[[zone.update]]` rules (SPEC §11, "Dynamic update"): which TSIG key may change
//! which records of a zone by UPDATE (RFC 2136) — Knot's `update-owner` and
//! `update-type` ACLs in one rule. Control checks every record of an UPDATE against
//! them before it applies anything.
/// One label of an owner pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Label {
    /// This label (lowercase).
    Exact(Vec<u8>),
    /// `*`: exactly one label.
    One,
    /// `**`: one label or more.
    Any,
}

/// An owner pattern relative to the origin: its labels, leftmost first; empty for `@`
/// (the apex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(pub Vec<Label>);

impl Pattern {
    /// `@`, or labels separated by dots (`_acme-challenge.*`, `**.dyn`): each `*`, `**`
    /// or a label of letters, digits, `-` and `_`.
    ///
    /// # Errors
    /// A pattern that is empty, absolute or has an empty or unusual label.
    pub fn parse(text: &str) -> Result<Pattern, String> {
        let text = text.trim();
        if text == "@" {
            return Ok(Pattern(Vec::new()));
        }
        if text.is_empty() || text.ends_with('.') {
            return Err(format!(
                "{text:?}: names are relative to the origin (`@` for the apex), without a trailing dot"
            ));
        }
        let labels = text
            .split('.')
            .map(|label| match label {
                "*" => Ok(Label::One),
                "**" => Ok(Label::Any),
                _ if !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
                {
                    Ok(Label::Exact(label.to_ascii_lowercase().into_bytes()))
                }
                _ => Err(format!(
                    "{text:?}: label {label:?} is not `*`, `**` or letters, digits, `-` and `_`"
                )),
            })
            .collect::<Result<Vec<Label>, String>>()?;
        Ok(Pattern(labels))
    }

    /// True when `labels` (leftmost first, lowercase) match.
    #[must_use]
    pub fn matches(&self, labels: &[&[u8]]) -> bool {
        fn at(pattern: &[Label], labels: &[&[u8]]) -> bool {
            match pattern.split_first() {
                None => labels.is_empty(),
                Some((Label::Exact(want), rest)) => {
                    labels.first().is_some_and(|l| l.eq_ignore_ascii_case(want)) && at(rest, &labels[1..])
                }
                Some((Label::One, rest)) => !labels.is_empty() && at(rest, &labels[1..]),
                // One label or more: every split, shortest first (patterns are a few
                // labels, names at most 127).
                Some((Label::Any, rest)) => (1..=labels.len()).any(|n| at(rest, &labels[n..])),
            }
        }
        at(&self.0, labels)
    }
}

/// A `[[zone.update]]` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The key's name (lowercase, no trailing dot).
    pub key: String,
    /// Owners it may change.
    pub names: Vec<Pattern>,
    /// Types it may change; `None`: any type UPDATE may change (`["*"]`).
    pub types: Option<Vec<u16>>,
    /// The key's UPDATEs to the zone, at most this many a minute; `None`: no limit.
    pub per_minute: Option<u32>,
}

/// The lowest `per_minute` of the rules of `key` among `rules`; `None` when none of
/// them limits it.
#[must_use]
pub fn per_minute(rules: &[Rule], key: &str) -> Option<u32> {
    rules
        .iter()
        .filter(|rule| rule.key.eq_ignore_ascii_case(key))
        .filter_map(|rule| rule.per_minute)
        .min()
}

impl Rule {
    /// True when this rule lets `key` change records of `rtype` at `owner` (wire) of
    /// the zone at `origin` (wire).
    #[must_use]
    pub fn permits(&self, key: &str, origin: &[u8], owner: &[u8], rtype: u16) -> bool {
        if !self.key.eq_ignore_ascii_case(key) || self.types.as_ref().is_some_and(|t| !t.contains(&rtype)) {
            return false;
        }
        relative_labels(origin, owner).is_some_and(|labels| self.names.iter().any(|p| p.matches(&labels)))
    }
}

/// The labels of `owner` (wire) above `origin` (wire), leftmost first; `None` when
/// `owner` is not at or below `origin`. Both lowercase, as control's are.
#[must_use]
pub fn relative_labels<'n>(origin: &[u8], owner: &'n [u8]) -> Option<Vec<&'n [u8]>> {
    let mut labels = Vec::new();
    let mut rest = owner;
    while rest != origin {
        let len = usize::from(*rest.first()?);
        if len == 0 {
            return None;
        }
        labels.push(rest.get(1..=len)?);
        rest = rest.get(1 + len..)?;
    }
    Some(labels)
}

/// Types UPDATE never changes, whatever the rules say (RFC 2136 §3.4.1.2 and SPEC
/// §11): the SOA (its serial is control's), and the DNSSEC records control makes.
pub const NEVER: [u16; 7] = [
    6,  // SOA
    43, // DS: the child's, in the parent
    46, // RRSIG
    47, // NSEC
    48, // DNSKEY
    50, // NSEC3
    51, // NSEC3PARAM
];

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(text: &str) -> Vec<u8> {
        crate::name::to_wire(&crate::master::parse_name(text, &hickory_proto::rr::Name::root()).unwrap())
    }

    #[test]
    fn patterns_match_as_the_spec_says() {
        let origin = wire("example.com.");
        let rule = |names: &[&str], types: Option<Vec<u16>>| Rule {
            key: "acme".into(),
            names: names.iter().map(|n| Pattern::parse(n).unwrap()).collect(),
            types,
            per_minute: None,
        };
        let acme = rule(&["_acme-challenge", "_acme-challenge.*"], Some(vec![16]));
        let txt = 16;
        assert!(acme.permits("acme", &origin, &wire("_acme-challenge.example.com."), txt));
        assert!(acme.permits("ACME", &origin, &wire("_ACME-challenge.www.example.com."), txt));
        assert!(!acme.permits("acme", &origin, &wire("_acme-challenge.a.b.example.com."), txt));
        assert!(!acme.permits("acme", &origin, &wire("_acme-challenge.example.com."), 1));
        assert!(!acme.permits("other", &origin, &wire("_acme-challenge.example.com."), txt));
        assert!(!acme.permits("acme", &origin, &wire("_acme-challenge.example.net."), txt));
        let any = rule(&["**.dyn", "@"], None);
        assert!(any.permits("acme", &origin, &wire("a.dyn.example.com."), 1));
        assert!(any.permits("acme", &origin, &wire("a.b.c.dyn.example.com."), 28));
        assert!(!any.permits("acme", &origin, &wire("dyn.example.com."), 1));
        assert!(any.permits("acme", &origin, &wire("example.com."), 16));
        assert!(!any.permits("acme", &origin, &wire("www.example.com."), 16));
        for bad in ["", "www.", "a..b", "a b", "ü"] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?}");
        }
    }
}
