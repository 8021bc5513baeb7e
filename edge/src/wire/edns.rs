//! EDNS(0) (RFC 6891): the OPT pseudo-record of a query and of our response.

/// UDP payload size this server advertises and uses as its ceiling by default
/// (DNS flag day 2020 value: avoids IP fragmentation).
pub const DEFAULT_UDP_PAYLOAD: u16 = 1232;
/// Smallest UDP payload an EDNS requestor may advertise; lower values count as 512
/// (RFC 6891 §6.2.5).
pub const MIN_UDP_PAYLOAD: u16 = 512;
/// Octets of an OPT record without options.
pub const OPT_LEN: usize = 11;
/// The DO bit in the OPT TTL flags (RFC 3225).
pub const DO_BIT: u16 = 0x8000;
/// The NSID option code (RFC 5001).
pub const OPTION_NSID: u16 = 3;
/// Longest server identifier sent in an NSID option.
pub const NSID_MAX: usize = 128;
/// The EDNS Client Subnet option code (RFC 7871).
pub const OPTION_ECS: u16 = 8;
/// The COOKIE option code (RFC 7873).
pub const OPTION_COOKIE: u16 = qdns_abi::cookie::OPTION_COOKIE;

/// The Extended DNS Error option code (RFC 8914).
pub const OPTION_EDE: u16 = 15;
/// Octets of an Extended DNS Error option without EXTRA-TEXT (ours carry none).
pub const EDE_LEN: usize = 6;
/// EDE INFO-CODE 14, Not Ready: the edge has no snapshot yet.
pub const EDE_NOT_READY: u16 = 14;
/// EDE INFO-CODE 20, Not Authoritative: the name is in no zone served here.
pub const EDE_NOT_AUTHORITATIVE: u16 = 20;

/// The Extended DNS Error option with INFO-CODE `code` and no EXTRA-TEXT.
#[must_use]
pub fn ede_option(code: u16) -> [u8; EDE_LEN] {
    let [c0, c1] = OPTION_EDE.to_be_bytes();
    let [i0, i1] = code.to_be_bytes();
    [c0, c1, 0, 2, i0, i1]
}

/// A query's COOKIE option (RFC 7873 §4): the client cookie, and the server cookie when
/// it is 16 octets (the only length ours have; any other is answered as none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CookieOption {
    /// The client cookie.
    pub client: [u8; 8],
    /// A 16-octet server cookie, if the query carried one.
    pub server: Option<[u8; 16]>,
}

impl CookieOption {
    /// The option's data, or `None` for a length RFC 7873 §5.2.2 answers with FORMERR
    /// (not 8, not 16 to 40 octets).
    #[must_use]
    pub fn parse(data: &[u8]) -> Option<CookieOption> {
        if data.len() != 8 && !(16..=40).contains(&data.len()) {
            return None;
        }
        let client = data.get(..8)?.try_into().ok()?;
        let server = data.get(8..).filter(|s| s.len() == 16).and_then(|s| s.try_into().ok());
        Some(CookieOption { client, server })
    }
}

/// A query's EDNS Client Subnet option (RFC 7871 §6), checked: FAMILY 1 (IPv4) or 2
/// (IPv6), SOURCE PREFIX-LENGTH within the family, SCOPE PREFIX-LENGTH 0, the address
/// cut to SOURCE bits with the rest of its last octet zero. Anything else is FORMERR
/// (§7.1.2). A response echoes FAMILY, SOURCE and ADDRESS with our SCOPE (§7.2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientSubnet {
    /// 1 or 2.
    pub family: u16,
    /// SOURCE PREFIX-LENGTH.
    pub source: u8,
    /// The address; its first [`ClientSubnet::address_len`] octets were sent.
    pub address: [u8; 16],
}

impl ClientSubnet {
    /// The option's data, or `None` when it breaks a rule of RFC 7871 §6.
    #[must_use]
    pub fn parse(data: &[u8]) -> Option<ClientSubnet> {
        let family = u16::from_be_bytes([*data.first()?, *data.get(1)?]);
        let (source, scope) = (*data.get(2)?, *data.get(3)?);
        let bits = match family {
            1 => 32,
            2 => 128,
            _ => return None,
        };
        let sent = data.get(4..)?;
        let len = usize::from(source).div_ceil(8);
        if source > bits || scope != 0 || sent.len() != len {
            return None;
        }
        // The bits of the last octet past SOURCE must be zero.
        if let (Some(&last), rest @ 1..=7) = (sent.last(), source % 8) {
            if last & (0xff >> rest) != 0 {
                return None;
            }
        }
        let mut address = [0u8; 16];
        address[..len].copy_from_slice(sent);
        Some(ClientSubnet {
            family,
            source,
            address,
        })
    }

    /// The address as an [`IpAddr`] (bits past SOURCE are zero).
    #[must_use]
    pub fn ip(&self) -> std::net::IpAddr {
        if self.family == 1 {
            let [a, b, c, d, ..] = self.address;
            std::net::IpAddr::from([a, b, c, d])
        } else {
            std::net::IpAddr::from(self.address)
        }
    }

    /// Octets of the address as sent: SOURCE bits, rounded up to whole octets.
    #[must_use]
    pub fn address_len(&self) -> usize {
        usize::from(self.source).div_ceil(8)
    }

    /// Octets the option takes in a response (code, length, family, prefixes, address).
    #[must_use]
    pub fn option_len(&self) -> usize {
        8 + self.address_len()
    }

    /// The option echoed with SCOPE PREFIX-LENGTH `scope`: its first
    /// [`ClientSubnet::option_len`] octets.
    #[must_use]
    pub fn echo(&self, scope: u8) -> [u8; 24] {
        let mut out = [0u8; 24];
        out[..2].copy_from_slice(&OPTION_ECS.to_be_bytes());
        out[2..4].copy_from_slice(&((4 + self.address_len()) as u16).to_be_bytes());
        out[4..6].copy_from_slice(&self.family.to_be_bytes());
        out[6] = self.source;
        out[7] = scope;
        out[8..8 + self.address_len()].copy_from_slice(&self.address[..self.address_len()]);
        out
    }
}

/// The OPT record of a query, as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edns {
    /// Requestor's UDP payload size (already raised to at least 512).
    pub udp_payload: u16,
    /// EDNS version.
    pub version: u8,
    /// The DO bit (copied into the response, RFC 3225 §3).
    pub dnssec_ok: bool,
    /// The query carried an NSID option (RFC 5001 §2.1: a request for our identifier).
    pub nsid: bool,
    /// The query's Client Subnet option, if it carried one.
    pub ecs: Option<ClientSubnet>,
    /// The query's first COOKIE option, if it carried a well-formed one.
    pub cookie: Option<CookieOption>,
    /// Its first COOKIE option had a length RFC 7873 §5.2.2 answers with FORMERR (an
    /// edge with cookies off ignores it, as any unknown option).
    pub bad_cookie: bool,
}

/// Writes our OPT record: payload `udp_payload`, extended RCODE bits, version 0, DO echoed.
#[must_use]
pub fn opt_record(udp_payload: u16, extended_rcode: u8, dnssec_ok: bool) -> [u8; OPT_LEN] {
    let [p0, p1] = udp_payload.to_be_bytes();
    let [f0, f1] = if dnssec_ok { DO_BIT } else { 0 }.to_be_bytes();
    [0, 0, 41, p0, p1, extended_rcode, 0, f0, f1, 0, 0]
}

/// The NSID option carrying `id` (RFC 5001 §2.3), written after an OPT record whose
/// RDLENGTH is then `4 + id.len()`.
#[must_use]
pub fn nsid_option_header(id: &[u8]) -> [u8; 4] {
    let [c0, c1] = OPTION_NSID.to_be_bytes();
    let [l0, l1] = (id.len().min(NSID_MAX) as u16).to_be_bytes();
    [c0, c1, l0, l1]
}

#[cfg(test)]
mod tests {
    use super::{ClientSubnet, CookieOption};

    #[test]
    fn cookie_lengths_follow_rfc_7873() {
        assert_eq!(CookieOption::parse(&[1; 8]).map(|c| c.server), Some(None));
        assert_eq!(CookieOption::parse(&[1; 24]).map(|c| c.server), Some(Some([1; 16])));
        // Server cookies of 8 to 32 octets are well-formed, but only ours are 16.
        assert_eq!(CookieOption::parse(&[1; 16]).map(|c| c.server), Some(None));
        assert_eq!(CookieOption::parse(&[1; 40]).map(|c| c.server), Some(None));
        for bad in [0, 1, 7, 9, 15, 41, 64] {
            assert_eq!(CookieOption::parse(&vec![1; bad]), None, "{bad} octets");
        }
    }

    #[test]
    fn client_subnets_follow_rfc_7871() {
        let v4 = ClientSubnet::parse(&[0, 1, 24, 0, 198, 51, 100]).unwrap();
        assert_eq!((v4.family, v4.source, v4.address_len()), (1, 24, 3));
        assert_eq!(&v4.echo(0)[..v4.option_len()], [0, 8, 0, 7, 0, 1, 24, 0, 198, 51, 100]);
        let v6 = ClientSubnet::parse(&[0, 2, 56, 0, 0x20, 1, 0x0d, 0xb8, 0, 0, 0]).unwrap();
        assert_eq!(v6.address_len(), 7);
        assert_eq!(ClientSubnet::parse(&[0, 1, 0, 0]).map(|c| c.address_len()), Some(0));
        assert_eq!(
            ClientSubnet::parse(&[0, 1, 22, 0, 10, 0, 4]).map(|c| c.source),
            Some(22)
        );
        for bad in [
            &[0, 3, 24, 0, 1, 2, 3][..],     // unknown family
            &[0, 1, 33, 0, 1, 2, 3, 4, 5],   // SOURCE over 32
            &[0, 1, 24, 8, 198, 51, 100],    // SCOPE in a query
            &[0, 1, 24, 0, 198, 51],         // address shorter than SOURCE
            &[0, 1, 24, 0, 198, 51, 100, 0], // and longer
            &[0, 1, 22, 0, 10, 0, 5],        // bits past SOURCE
            &[0, 1, 24],                     // cut short
        ] {
            assert_eq!(ClientSubnet::parse(bad), None, "{bad:?}");
        }
    }
}
