//! Frames around DNS messages for the XDP tests, and an independent check of the
//! frames the program sends back.
#![allow(dead_code, reason = "each test binary uses a part")]

/// Ethernet + IPv4 + UDP framing around `dns` (checksums left zero: valid for IPv4 UDP).
pub fn ipv4_udp_frame(dns: &[u8], dst_port: u16) -> Vec<u8> {
    let mut frame = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    let total = 20 + 8 + dns.len();
    let mut ip = vec![
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0x40,
        0,
        64,
        17,
        0,
        0,
        127,
        0,
        0,
        1,
        127,
        0,
        0,
        1,
    ];
    let sum = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let folded = !(((sum & 0xffff) + (sum >> 16)) as u16);
    ip[10..12].copy_from_slice(&folded.to_be_bytes());
    frame.extend(ip);
    frame.extend(40000u16.to_be_bytes());
    frame.extend(dst_port.to_be_bytes());
    frame.extend(((8 + dns.len()) as u16).to_be_bytes());
    frame.extend([0, 0]);
    frame.extend(dns);
    frame
}

/// `frame` (from [`ipv4_udp_frame`], untagged) with `words` 4-octet IPv4 options
/// (NOPs, then an end-of-options octet) after the fixed header: IHL, total length and
/// the header checksum follow.
pub fn with_ipv4_options(mut frame: Vec<u8>, words: usize) -> Vec<u8> {
    assert!((1..=10).contains(&words));
    let mut options = vec![1u8; words * 4];
    options[words * 4 - 1] = 0;
    frame.splice(34..34, options);
    let ip = &mut frame[14..14 + 20 + words * 4];
    ip[0] = 0x40 | (5 + words) as u8;
    let total = u16::from_be_bytes([ip[2], ip[3]]) + (words * 4) as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[10..12].copy_from_slice(&[0, 0]);
    let sum = !fold(ones_sum(ip));
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    frame
}

/// Ethernet (optionally VLAN-tagged) + IPv6 + UDP framing around `dns`.
pub fn ipv6_udp_frame(dns: &[u8], dst_port: u16) -> Vec<u8> {
    let mut frame = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x86, 0xdd];
    let len = (8 + dns.len()) as u16;
    frame.extend([0x60, 0, 0, 0]);
    frame.extend(len.to_be_bytes());
    frame.extend([17, 64]);
    frame.extend([0u8; 15]);
    frame.push(1);
    frame.extend([0u8; 15]);
    frame.push(1);
    frame.extend(40000u16.to_be_bytes());
    frame.extend(dst_port.to_be_bytes());
    frame.extend(len.to_be_bytes());
    frame.extend([0, 0]);
    frame.extend(dns);
    frame
}

/// `frame` (untagged, from [`ipv4_udp_frame`] or [`ipv6_udp_frame`]) sent from
/// `source` (an IPv4 source into an IPv4 frame, IPv6 into IPv6; the IPv4 header
/// checksum follows).
pub fn from_source(mut frame: Vec<u8>, source: std::net::IpAddr) -> Vec<u8> {
    match source {
        std::net::IpAddr::V4(a) => {
            assert_eq!(frame[12..14], [0x08, 0x00], "an IPv4 frame");
            frame[14 + 12..14 + 16].copy_from_slice(&a.octets());
            frame[14 + 10..14 + 12].copy_from_slice(&[0, 0]);
            let ihl = usize::from(frame[14] & 0x0f) * 4;
            let sum = !fold(ones_sum(&frame[14..14 + ihl]));
            frame[14 + 10..14 + 12].copy_from_slice(&sum.to_be_bytes());
        }
        std::net::IpAddr::V6(a) => {
            assert_eq!(frame[12..14], [0x86, 0xdd], "an IPv6 frame");
            frame[14 + 8..14 + 24].copy_from_slice(&a.octets());
        }
    }
    frame
}

pub fn vlan(mut frame: Vec<u8>) -> Vec<u8> {
    let tag = [0x81, 0x00, 0x00, 0x64];
    frame.splice(12..12, tag);
    frame
}

/// Sum of big-endian 16-bit words (odd length padded with a zero).
pub fn ones_sum(bytes: &[u8]) -> u32 {
    bytes
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum()
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Checks that `response` is `query` turned around (Ethernet, IP and UDP addresses and
/// ports swapped, lengths and checksums right) and returns its DNS message.
pub fn check_response_frame(query: &[u8], response: &[u8]) -> Vec<u8> {
    assert_eq!(response[0..6], query[6..12], "destination MAC = query source");
    assert_eq!(response[6..12], query[0..6], "source MAC = query destination");
    let mut l3 = 14;
    if query[12..14] == [0x81, 0x00] || query[12..14] == [0x88, 0xa8] {
        assert_eq!(response[12..16], query[12..16], "VLAN tag kept");
        l3 = 18;
    }
    let v6 = response[l3 - 2..l3] == [0x86, 0xdd];
    let (l4, pseudo) = if v6 {
        assert_eq!(response[l3 + 8..l3 + 24], query[l3 + 24..l3 + 40], "IPv6 source");
        assert_eq!(response[l3 + 24..l3 + 40], query[l3 + 8..l3 + 24], "IPv6 destination");
        let l4 = l3 + 40;
        let payload = u16::from_be_bytes([response[l3 + 4], response[l3 + 5]]) as usize;
        assert_eq!(l4 + payload, response.len(), "IPv6 payload length");
        (l4, ones_sum(&response[l3 + 8..l3 + 40]))
    } else {
        let ihl = usize::from(response[l3] & 0x0f) * 4;
        assert_eq!(response[l3..l3 + 2], query[l3..l3 + 2], "IPv4 version, IHL, TOS kept");
        assert_eq!(
            response[l3 + 20..l3 + ihl],
            query[l3 + 20..l3 + ihl],
            "IPv4 options kept"
        );
        assert_eq!(response[l3 + 12..l3 + 16], query[l3 + 16..l3 + 20], "IPv4 source");
        assert_eq!(response[l3 + 16..l3 + 20], query[l3 + 12..l3 + 16], "IPv4 destination");
        let total = u16::from_be_bytes([response[l3 + 2], response[l3 + 3]]) as usize;
        assert_eq!(l3 + total, response.len(), "IPv4 total length");
        assert_eq!(fold(ones_sum(&response[l3..l3 + ihl])), 0xffff, "IPv4 header checksum");
        (l3 + ihl, ones_sum(&response[l3 + 12..l3 + 20]))
    };
    assert_eq!(
        response[l4..l4 + 2],
        query[l4 + 2..l4 + 4],
        "source port = query destination port"
    );
    assert_eq!(
        response[l4 + 2..l4 + 4],
        query[l4..l4 + 2],
        "destination port = query source port"
    );
    let udp_len = u16::from_be_bytes([response[l4 + 4], response[l4 + 5]]) as usize;
    assert_eq!(l4 + udp_len, response.len(), "UDP length");
    assert_ne!(response[l4 + 6..l4 + 8], [0, 0], "UDP checksum present");
    let sum = pseudo + 17 + udp_len as u32 + ones_sum(&response[l4..]);
    assert_eq!(fold(sum), 0xffff, "UDP checksum");
    response[l4 + 8..].to_vec()
}
