//! The edge answers the DNS clients operators use: dig (BIND) and kdig (Knot).
mod common;

use std::process::Command;

use common::Edge;

fn run(tool: &str, args: &[String]) -> String {
    let out = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{tool} is required (scripts/setup installs it): {e}"));
    assert!(
        out.status.success(),
        "{tool} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn dig_gets_authoritative_answers_over_udp_and_tcp_v4_and_v6() {
    let edge = Edge::start();
    for addr in edge.addrs() {
        for transport in ["+notcp", "+tcp"] {
            let out = run(
                "dig",
                &[
                    format!("@{}", addr.ip()),
                    "-p".into(),
                    addr.port().to_string(),
                    transport.into(),
                    "www.example.com".into(),
                    "A".into(),
                ],
            );
            assert!(out.contains("status: NOERROR"), "{out}");
            assert!(out.contains("flags: qr aa"), "{out}");
            assert!(out.contains("192.0.2.10") && out.contains("192.0.2.11"), "{out}");
        }
        // dig retries a truncated answer over TCP by itself.
        let out = run(
            "dig",
            &[
                format!("@{}", addr.ip()),
                "-p".into(),
                addr.port().to_string(),
                "big.example.com".into(),
                "TXT".into(),
            ],
        );
        assert!(out.contains("Truncated, retrying in TCP mode"), "{out}");
        assert_eq!(out.matches("record-").count(), 20, "{out}");
    }
}

/// dig's `+subnet` (EDNS Client Subnet, RFC 7871) comes back with scope 0: the answer
/// holds for every client.
#[test]
fn dig_sees_its_client_subnet_echoed_with_scope_zero() {
    let edge = Edge::start();
    for addr in edge.addrs() {
        for (subnet, echoed) in [
            ("198.51.100.0/24", "198.51.100.0/24/0"),
            ("2001:db8:12::/56", "2001:db8:12::/56/0"),
        ] {
            let out = run(
                "dig",
                &[
                    format!("@{}", addr.ip()),
                    "-p".into(),
                    addr.port().to_string(),
                    format!("+subnet={subnet}"),
                    "www.example.com".into(),
                    "A".into(),
                ],
            );
            assert!(out.contains("status: NOERROR") && out.contains("192.0.2.10"), "{out}");
            assert!(out.contains(&format!("CLIENT-SUBNET: {echoed}")), "{out}");
        }
    }
}

#[test]
fn kdig_sees_nxdomain_refused_with_its_ede_and_edns() {
    let edge = Edge::start();
    let at = |addr: std::net::SocketAddr| vec![format!("@{}", addr.ip()), "-p".into(), addr.port().to_string()];
    for addr in edge.addrs() {
        let mut args = at(addr);
        args.extend(["nope.example.com".into(), "A".into(), "+edns".into()]);
        let out = run("kdig", &args);
        assert!(out.contains("status: NXDOMAIN;"), "{out}");
        assert!(out.contains("Version: 0; flags: ; UDP size: 1232 B"), "{out}");
        assert!(out.contains("SOA"), "{out}");
        let mut args = at(addr);
        args.extend(["www.example.org".into(), "A".into(), "+tcp".into(), "+edns".into()]);
        let out = run("kdig", &args);
        // With the Extended DNS Error knotd gives too (RFC 8914: 20, Not Authoritative).
        assert!(
            out.contains("status: REFUSED;") && out.contains("EDE: 20 (Not Authoritative)"),
            "{out}"
        );
    }
}
