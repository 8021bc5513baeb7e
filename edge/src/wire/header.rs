//! The 12-octet message header (RFC 1035 §4.1.1).

/// Length of the header.
pub const HEADER_LEN: usize = 12;

/// Response flag.
pub const QR: u16 = 0x8000;
/// Authoritative answer.
pub const AA: u16 = 0x0400;
/// Truncated.
pub const TC: u16 = 0x0200;
/// Recursion desired (copied from the query).
pub const RD: u16 = 0x0100;
/// Checking disabled (copied from the query, RFC 6840 §5.9).
pub const CD: u16 = 0x0010;
/// Mask of the OPCODE field.
pub const OPCODE_MASK: u16 = 0x7800;
/// The RCODE bits of the flags word.
pub const RCODE_MASK: u16 = 0x000f;

/// The header fields, in wire order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Query ID.
    pub id: u16,
    /// Flags word (QR, OPCODE, AA, TC, RD, RA, Z, AD, CD, RCODE).
    pub flags: u16,
    /// Question count.
    pub qdcount: u16,
    /// Answer count.
    pub ancount: u16,
    /// Authority count.
    pub nscount: u16,
    /// Additional count.
    pub arcount: u16,
}

impl Header {
    /// Reads a header from the first 12 octets of `msg`.
    #[must_use]
    pub fn read(msg: &[u8]) -> Option<Header> {
        let word = |i: usize| Some(u16::from_be_bytes([*msg.get(i)?, *msg.get(i + 1)?]));
        Some(Header {
            id: word(0)?,
            flags: word(2)?,
            qdcount: word(4)?,
            ancount: word(6)?,
            nscount: word(8)?,
            arcount: word(10)?,
        })
    }

    /// The OPCODE (RFC 1035 §4.1.1; 0 is QUERY).
    #[must_use]
    pub const fn opcode(&self) -> u16 {
        (self.flags & OPCODE_MASK) >> 11
    }

    /// True for a response (QR set).
    #[must_use]
    pub const fn is_response(&self) -> bool {
        self.flags & QR != 0
    }
}
