//! UDP crews (`server::udp`): each socket's lead thread receives alone while it keeps
//! up; a burst it cannot keep up with calls a helper in, and every query is answered
//! by one or the other.
mod common;

use std::{
    collections::HashSet,
    net::{Ipv4Addr, SocketAddr, UdpSocket},
    time::Duration,
};

use common::{example_zones, query, Ask, Edge};
use hickory_proto::{op::Message, rr::RecordType};
use qdns_testkit::fixtures::{free_port, sample, scrape_from};

/// Queries sent back to back before reading the answers: more than one receive batch
/// (32), fewer than the default socket buffers hold.
const WINDOW: u16 = 64;
/// Windows sent.
const ROUNDS: u16 = 300;

#[test]
fn a_burst_calls_a_helper_in_and_every_query_is_answered() {
    let port = free_port();
    let metrics: SocketAddr = (Ipv4Addr::LOCALHOST, port).into();
    // The common start gives `--workers 2`: one socket, its lead and one helper.
    let edge = Edge::start_with(&example_zones(), &["--metrics", &metrics.to_string()]);
    let wakeups = || {
        let text = scrape_from(Ipv4Addr::LOCALHOST, metrics);
        sample(&text, "qdns_edge_udp_helper_wakeups_total").unwrap_or_else(|| panic!("no helper series in\n{text}"))
    };
    assert_eq!(wakeups(), 0, "an idle edge called a helper");

    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let template = query("www.example.com.", RecordType::A, Ask::default());
    let mut buf = [0u8; 4096];
    let mut answered = 0usize;
    for round in 0..ROUNDS {
        let first = round.wrapping_mul(WINDOW);
        let mut waiting: HashSet<u16> = HashSet::new();
        for i in 0..WINDOW {
            let id = first.wrapping_add(i);
            let mut q = template.clone();
            q[..2].copy_from_slice(&id.to_be_bytes());
            client.send_to(&q, edge.v4).unwrap();
            waiting.insert(id);
        }
        while !waiting.is_empty() {
            let n = match client.recv(&mut buf) {
                Ok(n) => n,
                Err(err) => panic!("round {round}: {} of {WINDOW} unanswered ({err})", waiting.len()),
            };
            let answer = Message::from_vec(&buf[..n]).unwrap();
            assert!(
                waiting.remove(&answer.metadata.id),
                "unexpected or repeated id {}",
                answer.metadata.id
            );
            assert_eq!(answer.answers.len(), 2, "{answer:?}"); // www.example.com. has two A records
            answered += 1;
        }
    }
    assert_eq!(answered, usize::from(WINDOW) * usize::from(ROUNDS));
    // Windows of 64 outrun one thread: full batches were seen and the helper came in.
    assert!(wakeups() > 0, "no helper was ever called in");
    drop(edge);
}
