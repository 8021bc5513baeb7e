//! Response codes (RFC 1035 §4.1.1, RFC 6891 §6.1.3 extended RCODE).

/// A response code; values above 15 use the EDNS extended-RCODE octet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Rcode {
    /// No error.
    NoError = 0,
    /// The query could not be interpreted.
    FormErr = 1,
    /// Server failure.
    ServFail = 2,
    /// The name does not exist.
    NxDomain = 3,
    /// Not implemented (opcode).
    NotImp = 4,
    /// Refused (not authoritative for the name, or policy).
    Refused = 5,
    /// EDNS version not supported (RFC 6891 §6.1.3).
    BadVers = 16,
}

impl Rcode {
    /// The low four bits, for the header.
    #[must_use]
    pub const fn header_bits(self) -> u16 {
        (self as u16) & 0xf
    }

    /// The high eight bits, for the OPT record's extended-RCODE field.
    #[must_use]
    pub const fn extended_bits(self) -> u8 {
        ((self as u16) >> 4) as u8
    }

    /// Index for per-rcode counters.
    #[must_use]
    pub const fn index(self) -> usize {
        match self {
            Rcode::NoError => 0,
            Rcode::FormErr => 1,
            Rcode::ServFail => 2,
            Rcode::NxDomain => 3,
            Rcode::NotImp => 4,
            Rcode::Refused => 5,
            Rcode::BadVers => 6,
        }
    }

    /// Every rcode, in [`Rcode::index`] order.
    pub const ALL: [Rcode; 7] = [
        Rcode::NoError,
        Rcode::FormErr,
        Rcode::ServFail,
        Rcode::NxDomain,
        Rcode::NotImp,
        Rcode::Refused,
        Rcode::BadVers,
    ];

    /// Mnemonic, used as a metric label.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Rcode::NoError => "NOERROR",
            Rcode::FormErr => "FORMERR",
            Rcode::ServFail => "SERVFAIL",
            Rcode::NxDomain => "NXDOMAIN",
            Rcode::NotImp => "NOTIMP",
            Rcode::Refused => "REFUSED",
            Rcode::BadVers => "BADVERS",
        }
    }
}
