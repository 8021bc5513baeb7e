//! Label values in control's `/metrics` are escaped (issue 53 §8): an edge's hello
//! name is the edge's to choose, and one made to end a label and start lines of its own
//! must stay one label value. A light edge (`qdns_testkit::link_client`) says hello with
//! such a name to a real control; its metrics page is read and parsed line by line.
mod common;

use std::time::{Duration, Instant};

use common::{scrape, Location};
use qdns_testkit::{
    fixtures::free_port,
    link_client::{LinkClient, Received},
};

/// A name that would, unescaped, close the label set and add a sample and a comment.
const HOSTILE: &str = "evil\"} 1\nqdns_injected_total 99\n# \\";

/// Whether `line` is one sample of the text format: a name, labels whose values are
/// quoted with `\\`, `\"` and `\n` as the only escapes, a space and a value.
fn is_sample(line: &str) -> bool {
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let (name, mut rest) = line.split_at(name_end);
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        return false;
    }
    if let Some(labels) = rest.strip_prefix('{') {
        let mut chars = labels.char_indices();
        let mut in_value = false;
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match (in_value, c) {
                (true, '\\') => match chars.next() {
                    Some((_, '\\' | '"' | 'n')) => {}
                    _ => return false,
                },
                (true, '"') => in_value = false,
                (true, _) => {}
                (false, '"') => in_value = true,
                (false, '}') => {
                    end = Some(i);
                    break;
                }
                (false, c) if c.is_ascii_alphanumeric() || matches!(c, '_' | '=' | ',') => {}
                (false, _) => return false,
            }
        }
        let Some(end) = end else { return false };
        rest = &labels[end + 1..];
    }
    rest.strip_prefix(' ')
        .is_some_and(|value| value.trim().parse::<f64>().is_ok())
}

#[test]
fn an_edge_name_made_to_inject_lines_stays_one_escaped_label_value() {
    let mut loc = Location::prepared();
    let metrics = format!("127.0.0.1:{}", free_port());
    loc.start_control_with(&["--no-embedded-checker", "--metrics", &metrics]);
    let mut edge = LinkClient::connect(&loc.edge_socket(), HOSTILE, None, Some(LinkClient::takes_deltas(None)));
    assert_eq!(edge.read_frame(), Received::Whole);
    let escaped = "evil\\\"} 1\\nqdns_injected_total 99\\n# \\\\";
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let body = scrape(&metrics);
        if body.contains(escaped) || Instant::now() > deadline {
            break body;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        body.lines()
            .any(|l| l.starts_with("qdns_edge_snapshot_version{") && l.contains(&format!("edge=\"{escaped}\""))),
        "the edge's line, its name escaped:\n{body}"
    );
    for line in body.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        assert!(is_sample(line), "not one sample: {line:?}\n{body}");
        assert!(!line.starts_with("qdns_injected"), "an injected line: {line:?}");
    }
    drop(edge);
}

#[test]
fn the_sample_parser_tells_escaped_from_injected() {
    assert!(is_sample("qdns_edge_snapshot_version{edge=\"a\\\"b\\nc\\\\\"} 3"));
    assert!(is_sample("qdns_health_seq 0"));
    assert!(!is_sample(
        "qdns_edge_snapshot_version{edge=\"evil\"} 1"[..40].trim_end()
    ));
    assert!(!is_sample("qdns_edge_snapshot_version{edge=\"a\\qb\"} 3"));
    assert!(!is_sample("# \\\"} 3"));
}
