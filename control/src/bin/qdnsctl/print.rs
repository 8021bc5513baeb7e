//! `qdnsctl`'s human-readable output: status, health, explain and the rest, as tables
//! and lines an operator reads (`--json` prints the reply as it came instead).
use std::time::Duration;

use qdns_control::api::{Distribution, ExplainDetail, Explanation, MemberAnswer, Reply, StatusReport};
use qdns_link::protocol::XdpReport;

/// Unix seconds as RFC 3339 UTC ("-" for 0: never).
pub(crate) fn time(secs: u64) -> String {
    if secs == 0 {
        return "-".to_owned();
    }
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(secs)).to_string()
}

/// The text, or "-".
pub(crate) fn or_dash(text: Option<&str>) -> &str {
    text.unwrap_or("-")
}

pub(crate) fn status_word(healthy: bool) -> &'static str {
    if healthy {
        "healthy"
    } else {
        "UNHEALTHY"
    }
}

pub(crate) fn print_human(reply: &Reply) {
    match reply {
        Reply::Status(status) => print_status(status),
        Reply::Reloaded(reloaded) => {
            println!("snapshot {}", reloaded.snapshot_version);
            for zone in &reloaded.zones {
                println!("  {zone}");
            }
        }
        Reply::Health(checks) => {
            println!("{:<36} {:<10} {:<9} {:<20}  WHY", "CHECK", "TYPE", "STATUS", "SINCE");
            for c in checks {
                println!(
                    "{:<36} {:<10} {:<9} {:<20}  {}",
                    c.check,
                    c.kind,
                    status_word(c.healthy),
                    time(c.since),
                    c.why
                );
                for o in &c.observations {
                    // A checker whose latest report is stale no longer counts: say so,
                    // so a partition shows as which checkers this location hears.
                    let heard = if c.reachable.contains(&o.checker) {
                        ""
                    } else {
                        "  (unreachable: report stale)"
                    };
                    println!(
                        "    {:<20} {:<12} {:<9} {}  {}{heard}",
                        o.checker,
                        o.region,
                        status_word(o.healthy),
                        time(o.at),
                        o.reason
                    );
                }
            }
        }
        Reply::Explain(explanation) => print_explain(explanation),
        Reply::Dump(dump) => print!("{}", dump.text),
        Reply::Records(rows) => {
            for r in rows {
                let by = match (&r.key, r.added) {
                    (Some(key), Some(at)) => format!(" ; dynamic update by key {key} at {at}"),
                    _ => String::new(),
                };
                println!("{} {} IN {} {}{by}", r.name, r.ttl, r.rtype, r.rdata);
            }
        }
        Reply::DnssecKeys(keys) => {
            for key in keys {
                println!("; key {} {} ({})", key.tag, key.algorithm, key.state);
                println!("{}", key.ds);
            }
        }
        Reply::OverrideSet(o) => println!("{} forced {} for {}s", o.check, status_word(o.healthy), o.expires_in_s),
        Reply::OverrideCleared(o) => println!("{}: override cleared", o.check),
        Reply::External(e) => println!("{} set {}", e.check, status_word(e.healthy)),
        Reply::Shifts(shifts) => {
            println!("{:<28} {:<8} {:>10}  NOTE", "RRSET", "AZ", "EXPIRES_IN");
            for sh in shifts {
                println!(
                    "{:<28} {:<8} {:>9}s  {}",
                    sh.rrset,
                    sh.az,
                    sh.expires_in_s,
                    or_dash(sh.note.as_deref().or(sh.comment.as_deref()))
                );
            }
        }
        Reply::Events(events) => {
            for e in events {
                println!("{}  {:<9} {}", time(e.time), e.kind, e.message);
            }
        }
    }
}

pub(crate) fn print_status(status: &StatusReport) {
    if let Some(err) = &status.persist_error {
        println!("WARNING: {err} — overrides, shifts and external statuses are refused until it can be saved");
    }
    println!("snapshot {}  health seq {}", status.snapshot_version, status.health_seq);
    if status.intent_revision > 0 {
        let heard = status
            .intent_heard_s
            .map_or_else(String::new, |s| format!("; the store answered {s}s ago"));
        println!(
            "intent revision {}, operator state of revision {}{heard}",
            status.intent_revision, status.intent_operator_revision
        );
    }
    println!("{:<28} {:>12} {:>7}  FILE", "ZONE", "SERIAL", "RRSETS");
    for z in &status.zones {
        println!("{:<28} {:>12} {:>7}  {}", z.zone, z.serial, z.rrsets, z.file);
        if let Some(s) = &z.dnssec {
            println!(
                "  dnssec {}: {} signatures, valid {} to {} (signed again 7 days before)",
                s.algorithm,
                s.signatures,
                time(s.inception),
                time(s.expiration)
            );
        }
        if let Some(t) = &z.transfer {
            let serial = t
                .serial
                .map_or_else(String::new, |s| format!("secondaries get serial {s}"));
            let primary = t
                .primary
                .as_deref()
                .map_or_else(String::new, |p| format!("taken from {p}"));
            let both = [serial, primary]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>();
            println!("  transfer: {}", both.join("; "));
        }
    }
    for waiting in &status.waiting_for_primary {
        println!("{waiting}: not served");
    }
    println!(
        "fail-open: {}",
        if status.fail_open.is_empty() {
            "none".to_owned()
        } else {
            status.fail_open.join(", ")
        }
    );
    let checkers: Vec<String> = status
        .checkers
        .list
        .iter()
        .map(|c| format!("{} ({})", c.id, c.region))
        .collect();
    println!(
        "checkers reachable: {} {}  (healthy iff > {} of them say so; reports accepted {}, rejected {})",
        status.checkers.reachable,
        if checkers.is_empty() {
            String::new()
        } else {
            checkers.join(", ")
        },
        status.checkers.quorum,
        status.checkers.reports_accepted,
        status.checkers.reports_rejected.values().sum::<u64>()
    );
    println!("overrides: {}  shifts: {}", status.overrides, status.shifts);
    println!("{:<24} {:>16} {:>6}  XDP", "EDGE", "SNAPSHOT", "SEQ");
    for e in &status.edges {
        println!(
            "{:<24} {:>16} {:>6}  {}",
            e.name,
            e.snapshot.map_or_else(|| "-".to_owned(), |v| v.to_string()),
            e.seq,
            xdp_summary(e.xdp.as_ref())
        );
    }
}

pub(crate) fn print_explain(e: &Explanation) {
    println!("{} {}  policy {}  ttl {}", e.name, e.rtype, e.policy, e.ttl);
    let policy = match &e.detail {
        ExplainDetail::Plain { answer, values } => {
            println!("answer: {answer}");
            for value in values {
                println!("  {} {} IN {} {value}", e.name, e.ttl, e.rtype);
            }
            return;
        }
        ExplainDetail::Policy(policy) => policy,
    };
    if policy.fail_open {
        println!("FAIL-OPEN: {}", or_dash(policy.fail_open_note.as_deref()));
    }
    if let Some(latency) = &policy.latency {
        println!("LATENCY: {latency}");
    }
    println!(
        "{:<10} {:>7} {:>6} {:<10} {:<9} {:>9} {:<28}  WHY",
        "MEMBER", "WEIGHT", "LOAD", "ROLE", "STATUS", "RTT", "ANSWERS"
    );
    for c in &policy.candidates {
        let answers = match &c.answers {
            MemberAnswer::Records { values, .. } => values.join(" "),
            MemberAnswer::Alias { alias } => format!("alias {alias}"),
        };
        println!(
            "{:<10} {:>7} {:>6} {:<10} {:<9} {:>9} {:<28}  {}",
            c.id,
            c.weight_text(),
            c.load_text(),
            or_dash(c.role.as_deref()),
            status_word(c.healthy),
            c.rtt_text(),
            answers,
            c.why
        );
    }
    for shift in &policy.shifts {
        println!(
            "shift: away from {} for {}s more{}",
            shift.az,
            shift.expires_in_s,
            if shift.moves_traffic {
                ""
            } else {
                " (moves no traffic: fail-open)"
            }
        );
    }
    match &policy.distribution {
        Distribution::Shares(shares) => {
            let parts: Vec<String> = shares
                .iter()
                .map(|s| format!("{} {:.1} %", or_dash(s.member.as_deref()), s.share * 100.0))
                .collect();
            println!("answers: {}", parts.join(", "));
        }
        Distribution::Multivalue {
            answered_from,
            per_answer,
        } => println!(
            "answers: {per_answer} records per answer, drawn from {}",
            answered_from.join(", ")
        ),
        Distribution::Zonal { answered_azs } => println!("answers: AZs {}", answered_azs.join(", ")),
        Distribution::ByClient { by_client } => {
            println!("{:<24} {:<28} ANSWERED BY", "CLIENTS MATCHING", "TRIES");
            for o in by_client {
                println!(
                    "{:<24} {:<28} {}{}",
                    o.matched,
                    o.chain.join(" > "),
                    or_dash(o.answered_by.as_deref()),
                    if o.fail_open { " (fail-open)" } else { "" }
                );
            }
        }
    }
    if let Some(c) = &policy.client {
        println!(
            "client {} (decided by {}): matches {}, scope {} (ECS scope /{}); tries {}; answered by {}{}",
            c.client,
            c.decided_by,
            c.matched,
            c.scope_prefix,
            c.scope,
            c.chain.join(" > "),
            or_dash(c.answered_by.as_deref()),
            if c.fail_open { " (fail-open)" } else { "" }
        );
    }
}

/// "off", or the interfaces, the table generation, and packets answered / passed.
pub(crate) fn xdp_summary(xdp: Option<&XdpReport>) -> String {
    let Some(xdp) = xdp else {
        return "off".to_owned();
    };
    let (mut answered, mut passed) = (0u64, 0u64);
    for (label, n) in &xdp.counters {
        if label.starts_with("answered_") {
            answered += n;
        } else if label.starts_with("pass_") {
            passed += n;
        }
    }
    format!(
        "{} gen {}: {answered} answered, {passed} passed",
        xdp.interfaces.join(","),
        xdp.generation
    )
}
