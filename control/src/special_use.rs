//! `deny_special_use_targets` (SPEC §4): health-check targets in special-use address
//! ranges (RFC 6890 and friends) are rejected when the location asks for it.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use qdns_zone::{name, snapshot::SlotRule, Snapshot};

/// The special-use range `ip` is in, if any.
#[must_use]
pub fn special_use(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return special_v4(v4).or(Some("IPv4-mapped"));
            }
            let s = v6.segments();
            if v6.is_loopback() {
                Some("loopback (RFC 4291)")
            } else if v6.is_unspecified() {
                Some("unspecified")
            } else if s[0] & 0xfe00 == 0xfc00 {
                Some("unique local (RFC 4193)")
            } else if s[0] & 0xffc0 == 0xfe80 {
                Some("link-local (RFC 4291)")
            } else if s[0] & 0xff00 == 0xff00 {
                Some("multicast")
            } else if s[0] == 0x2001 && s[1] == 0x0db8 {
                Some("documentation (RFC 3849)")
            } else if s[0] == 0x0100 && s[1..4] == [0, 0, 0] {
                Some("discard-only (RFC 6666)")
            } else if s[0] == 0x2001 && s[1] < 0x0200 {
                Some("IETF protocol assignments (RFC 2928)")
            } else if v6 == Ipv6Addr::UNSPECIFIED {
                Some("unspecified")
            } else {
                None
            }
        }
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, ..) => "\"this network\" (RFC 1122)",
        (10, ..) | (172, 16..=31, _) | (192, 168, _) => "private (RFC 1918)",
        (100, 64..=127, _) => "shared address space / CGNAT (RFC 6598)",
        (127, ..) => "loopback (RFC 1122)",
        (169, 254, _) => "link-local (RFC 3927)",
        (192, 0, 0) => "IETF protocol assignments (RFC 6890)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation (RFC 5737)",
        (192, 88, 99) => "6to4 relay anycast (RFC 3068)",
        (198, 18..=19, _) => "benchmarking (RFC 2544)",
        (224..=239, ..) => "multicast (RFC 5771)",
        (240..=255, ..) => "reserved (RFC 1112)",
        _ => return None,
    })
}

/// A health-check target refused by `deny_special_use_targets`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecialUseError {
    /// A probed check's target address is in a special-use range.
    #[error("{file}: health_check {check:?} (zone {zone}): ip {ip} is {range}; deny_special_use_targets is on")]
    Target {
        /// The zone file.
        file: String,
        /// The check's name.
        check: String,
        /// The zone's origin.
        zone: String,
        /// The target address.
        ip: IpAddr,
        /// The special-use range it is in.
        range: &'static str,
    },
}

/// The first probed check of `snapshot` whose target is special-use, as an error.
pub fn check(snapshot: &Snapshot) -> Result<(), SpecialUseError> {
    for zone in &snapshot.zones {
        for slot in &zone.slots {
            if let SlotRule::Check { probe: Some(probe), .. } = &slot.rule {
                if let Some(range) = special_use(probe.ip) {
                    return Err(SpecialUseError::Target {
                        file: zone.source.clone(),
                        check: slot.name.clone(),
                        zone: name::to_text(&zone.origin),
                        ip: probe.ip,
                        range,
                    });
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        for (ip, special) in [
            ("127.0.0.1", true),
            ("10.1.2.3", true),
            ("100.64.0.1", true),
            ("100.128.0.1", false),
            ("169.254.1.1", true),
            ("172.31.0.1", true),
            ("172.32.0.1", false),
            ("192.168.1.1", true),
            ("224.0.0.1", true),
            ("198.51.100.7", true),
            ("8.8.8.8", false),
            ("::1", true),
            ("fe80::1", true),
            ("fd00::1", true),
            ("ff02::1", true),
            ("2001:db8::1", true),
            ("::ffff:10.0.0.1", true),
            ("2606:4700::1111", false),
        ] {
            assert_eq!(special_use(ip.parse().unwrap()).is_some(), special, "{ip}");
        }
    }
}
