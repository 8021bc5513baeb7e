//! DNS cookies (RFC 7873, server cookies per RFC 9018) through real sockets: dig's
//! `+cookie` gets a server cookie and has it accepted back, a malformed option gets
//! FORMERR, and a client that presents a valid server cookie is not rate limited
//! while the same flood without one is. (The XDP path: `xdp_differential.rs`, and
//! BIND in `real_resolvers.rs`.)
mod common;

use std::{
    net::{SocketAddr, UdpSocket},
    process::Command,
    time::Duration,
};

use common::{example_zones, Edge};

fn dig(addr: SocketAddr, args: &[&str]) -> String {
    let out = Command::new("dig")
        .arg(format!("@{}", addr.ip()))
        .args(["-p", &addr.port().to_string(), "+tries=1", "+time=3"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("dig is required (scripts/setup installs it): {e}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `; COOKIE: HEX (good)` line of dig's output: the hex (client and server cookie).
fn cookie_of(out: &str) -> Option<String> {
    let line = out.lines().find(|l| l.starts_with("; COOKIE: "))?;
    assert!(line.ends_with("(good)"), "dig found its client cookie echoed: {line}");
    Some(
        line.trim_start_matches("; COOKIE: ")
            .split_whitespace()
            .next()?
            .to_owned(),
    )
}

#[test]
fn dig_gets_a_server_cookie_and_it_is_accepted_back() {
    let edge = Edge::start();
    for addr in edge.addrs() {
        for transport in ["+notcp", "+tcp"] {
            let out = dig(addr, &[transport, "+cookie", "www.example.com", "A"]);
            assert!(out.contains("status: NOERROR"), "{out}");
            // 8 octets of client cookie, 16 of ours: version 1, reserved, timestamp, hash.
            let cookie = cookie_of(&out).unwrap_or_else(|| panic!("no server cookie: {out}"));
            assert_eq!(cookie.len(), 48, "{cookie}");
            assert_eq!(&cookie[16..24], "01000000", "version 1, reserved 0: {cookie}");
            // Sent back while fresh: accepted, and returned as it came.
            let again = dig(addr, &[transport, &format!("+cookie={cookie}"), "www.example.com", "A"]);
            assert_eq!(cookie_of(&again).as_deref(), Some(cookie.as_str()), "{again}");
            // A forged one (a hash bit flipped): answered, with a new cookie.
            let last = u8::from_str_radix(&cookie[46..], 16).unwrap() ^ 1;
            let forged = format!("{}{last:02x}", &cookie[..46]);
            let out = dig(addr, &[transport, &format!("+cookie={forged}"), "www.example.com", "A"]);
            assert!(out.contains("status: NOERROR"), "{out}");
            let fresh = cookie_of(&out).unwrap();
            assert_ne!(fresh, forged, "{out}");
            assert_eq!(fresh[..16], cookie[..16], "the client cookie echoed");
        }
    }
    // Another client address (IPv6 rather than IPv4) cannot use the IPv4 one's cookie.
    let v4 = cookie_of(&dig(edge.v4, &["+cookie", "www.example.com", "A"])).unwrap();
    let v6 = cookie_of(&dig(edge.v6, &[&format!("+cookie={v4}"), "www.example.com", "A"])).unwrap();
    assert_ne!(v4, v6);
}

/// A query for `www.example.com A` with an OPT record carrying `options`.
fn query(id: u16, options: &[u8]) -> Vec<u8> {
    let mut msg = id.to_be_bytes().to_vec();
    msg.extend([0, 0, 0, 1, 0, 0, 0, 0, 0, 1]);
    msg.extend(b"\x03www\x07example\x03com\x00\x00\x01\x00\x01");
    msg.extend([0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
    msg.extend((options.len() as u16).to_be_bytes());
    msg.extend(options);
    msg
}

/// A COOKIE option with `data`.
fn cookie_option(data: &[u8]) -> Vec<u8> {
    [&[0, 10][..], &(data.len() as u16).to_be_bytes(), data].concat()
}

/// The RCODE of a response.
fn rcode(response: &[u8]) -> u8 {
    response[3] & 0x0f
}

/// Sends `count` queries as fast as the socket takes them, then counts the responses
/// that come back within a second.
fn flood(socket: &UdpSocket, to: SocketAddr, count: u16, options: &[u8]) -> usize {
    for id in 0..count {
        socket.send_to(&query(id, options), to).unwrap();
    }
    socket.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut buf = [0u8; 2048];
    let mut answered = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    while std::time::Instant::now() < deadline {
        match socket.recv_from(&mut buf) {
            // NOERROR, not truncated (a slip), with the answer.
            Ok((len, _)) if len > 12 && rcode(&buf) == 0 && buf[2] & 0x02 == 0 && buf[7] > 0 => answered += 1,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    answered
}

#[test]
fn a_valid_server_cookie_exempts_a_client_from_rate_limiting() {
    let edge = Edge::start_with(&example_zones(), &["--rrl-rate", "2", "--rrl-slip", "0"]);
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    // A client cookie alone: answered with a server cookie.
    let client = *b"qdnstest";
    socket.send_to(&query(1, &cookie_option(&client)), edge.v4).unwrap();
    let mut buf = [0u8; 2048];
    let (len, _) = socket.recv_from(&mut buf).unwrap();
    let cookie = common::response_cookie(&buf[..len]).expect("a server cookie");
    assert_eq!(cookie[..8], client);
    // With it, every answer of a flood comes back ...
    let with_cookie = flood(&socket, edge.v4, 60, &cookie_option(&cookie));
    assert_eq!(with_cookie, 60, "a client with a valid server cookie is not limited");
    // ... without it (or with a forged one), the limiter holds the same flood back.
    let without = flood(&socket, edge.v4, 60, &cookie_option(&client));
    let mut forged = cookie.clone();
    forged[23] ^= 1;
    let forged = flood(&socket, edge.v4, 60, &cookie_option(&forged));
    assert!(
        without < 10 && forged < 10,
        "limited: {without} and {forged} of 60 answered"
    );
}

#[test]
fn malformed_cookies_get_formerr_and_no_cookies_turns_them_off() {
    let edge = Edge::start();
    for bad in [&[1u8; 5][..], &[1; 12], &[1; 41]] {
        let response = common::udp_raw(edge.v4, &query(7, &cookie_option(bad)));
        assert_eq!(rcode(&response), 1, "{} octets: FORMERR (RFC 7873 §5.2.2)", bad.len());
    }
    // Server cookies of 8 to 32 octets are well-formed (only ours are 16).
    let response = common::udp_raw(edge.v4, &query(8, &cookie_option(&[1; 40])));
    assert_eq!(rcode(&response), 0);
    assert_eq!(
        common::response_cookie(&response).map(|c| c[..8].to_vec()),
        Some(vec![1; 8])
    );
    drop(edge);
    let off = Edge::start_with(&example_zones(), &["--no-cookies"]);
    let out = dig(off.v4, &["+cookie", "www.example.com", "A"]);
    assert!(out.contains("status: NOERROR") && !out.contains("; COOKIE:"), "{out}");
    // Off, the option is ignored like an unknown one, whatever its length.
    let response = common::udp_raw(off.v4, &query(9, &cookie_option(&[1; 5])));
    assert_eq!(rcode(&response), 0, "no FORMERR with cookies off");
}
