//! The status page (`/status` on the `--metrics` listener): one HTML document, rendered
//! from the state at each request, for a person to read at a glance. No script: tables,
//! a form for `explain`, and a refresh every 10 s by `<meta http-equiv>`.
//!
//! It shows what `qdnsctl status`, `health`, `shift list` and `events` show, drawn from
//! the same functions, plus overrides and externals with their expiry and, for the name
//! in the query (`?name=www.example.com.&type=A`), `explain`'s answer distribution.
use std::fmt::Write as _;

use crate::{
    api::{Candidate, Distribution, ExplainDetail, Explanation, MemberAnswer, StatusReport},
    clock::now,
    explain::explain,
    handler::{health, shift_list, status},
    operator::Ends as _,
    state::State,
};

/// Events shown, newest first.
const EVENTS_SHOWN: usize = 50;

/// What the `explain` form asks.
#[derive(Clone, Copy, Debug)]
pub struct ExplainQuery<'q> {
    /// Owner name.
    pub name: &'q str,
    /// RR type.
    pub rtype: &'q str,
    /// A client address or ECS prefix (client-aware sets).
    pub client: Option<&'q str>,
}

/// The page for `state`; `query` is the `explain` form's, if given.
#[must_use]
pub fn render(state: &State, query: Option<ExplainQuery<'_>>) -> String {
    let report = status(state);
    let mut page = String::with_capacity(16 * 1024);
    head(&mut page, &report);
    // An asked-for explanation comes first; the empty form goes last.
    if query.is_some() {
        explain_section(&mut page, state, query);
    }
    zones(&mut page, &report);
    checks(&mut page, state);
    checkers(&mut page, &report);
    operator(&mut page, state, &report);
    edges(&mut page, &report);
    if query.is_none() {
        explain_section(&mut page, state, None);
    }
    events(&mut page, state);
    page.push_str("</body>\n</html>\n");
    page
}

/// `text` with `&`, `<`, `>`, `"` and `'` escaped (names and reasons come from zone
/// files and checkers).
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Unix seconds as RFC 3339 (UTC), or "never" for 0.
fn at(secs: u64) -> String {
    if secs == 0 {
        return "never".to_owned();
    }
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)).to_string()
}

/// A span of seconds, roughly ("3m 20s").
fn span(secs: u64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}

/// A status badge: class `healthy` or `unhealthy`, and the word.
fn badge(healthy: bool) -> &'static str {
    if healthy {
        "<span class=\"badge healthy\">healthy</span>"
    } else {
        "<span class=\"badge unhealthy\">unhealthy</span>"
    }
}

fn head(page: &mut String, report: &StatusReport) {
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"refresh\" content=\"10\">\n<title>qdns status</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <header><h1>qdns control</h1><p>snapshot <b id=\"snapshot\">{}</b> · health delta {} · \
         rendered {} · refreshes every 10 s</p></header>\n",
        report.snapshot_version,
        report.health_seq,
        at(now()),
    );
    // A location of a deployment: what it applied, and whether the store is heard.
    if report.intent_revision > 0 {
        let heard = report.intent_heard_s.unwrap_or(u64::MAX);
        let class = if heard > 30 { " class=\"warn\"" } else { "" };
        let _ = writeln!(
            page,
            "<p id=\"intent\"{class}>intent revision <b>{}</b> · operator state of revision {} · {}</p>",
            report.intent_revision,
            report.intent_operator_revision,
            if heard > 30 {
                "cut off from the intent store: serving the revision applied last".to_owned()
            } else {
                format!("the store answered {heard} s ago")
            }
        );
    }
    // Loud, and first: changes are refused until the state can be saved again.
    if let Some(err) = &report.persist_error {
        let _ = writeln!(
            page,
            "<p class=\"warn\" id=\"persist-error\">{} — overrides, shifts and external statuses are refused until it can be saved.</p>",
            esc(err)
        );
    }
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
h1{margin:0;font-size:1.5em}h2{margin:1.4em 0 .4em;font-size:1.15em;border-bottom:1px solid #ccc}\
header p{margin:.2em 0;color:#555}table{border-collapse:collapse}\
th,td{padding:.2em .7em;text-align:left;border-bottom:1px solid #eee;vertical-align:top}\
th{background:#f4f4f4}.badge{padding:0 .5em;border-radius:.6em;font-weight:600}\
.healthy{background:#d6f5d6;color:#135713}.unhealthy{background:#f8d3d3;color:#8a1111}\
.warn{color:#8a5a00}.none{color:#888}.bar{display:inline-block;height:.8em;background:#4a7fd6}\
code{font-size:.95em}form input{margin-right:.5em}";

fn zones(page: &mut String, report: &StatusReport) {
    page.push_str("<h2 id=\"zones\">Zones</h2>\n<table><tr><th>zone</th><th>serial</th><th>record sets</th><th>health slots</th><th>file</th></tr>\n");
    for z in &report.zones {
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
            esc(&z.zone),
            z.serial,
            z.rrsets,
            z.health_slots,
            esc(&z.file)
        );
    }
    page.push_str("</table>\n");
}

/// Every check: its status, why, since when, and each region's fresh reports.
fn checks(page: &mut String, state: &State) {
    page.push_str(
        "<h2 id=\"checks\">Health checks</h2>\n<table><tr><th>check</th><th>type</th><th>status</th>\
         <th>since</th><th>why</th><th>regions (fresh reports healthy / fresh reports)</th></tr>\n",
    );
    let all = health(state, None).unwrap_or_default();
    if all.is_empty() {
        page.push_str("<tr><td colspan=\"6\" class=\"none\">no health checks</td></tr>\n");
    }
    for check in &all {
        let mut regions: std::collections::BTreeMap<&str, (u32, u32)> = std::collections::BTreeMap::new();
        for o in state
            .probe_interval(&check.check)
            .into_iter()
            .flat_map(|interval| state.fresh_observations(&check.check, interval))
        {
            let tally = regions.entry(o.region.as_str()).or_default();
            tally.0 += u32::from(o.healthy);
            tally.1 += 1;
        }
        let regions: Vec<String> = regions
            .iter()
            .map(|(region, (healthy, of))| format!("{}: {healthy}/{of}", esc(region)))
            .collect();
        let _ = writeln!(
            page,
            "<tr id=\"check-{}\" class=\"check\"><td>{}</td><td>{}</td><td class=\"status\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&check.check),
            esc(&check.check),
            esc(&check.kind),
            badge(check.healthy),
            at(check.since),
            esc(&check.why),
            if regions.is_empty() {
                "<span class=\"none\">no fresh reports</span>".to_owned()
            } else {
                regions.join(", ")
            }
        );
    }
    page.push_str("</table>\n");
}

fn checkers(page: &mut String, report: &StatusReport) {
    let c = &report.checkers;
    let _ = writeln!(
        page,
        "<h2 id=\"checkers\">Checkers</h2>\n<p><b id=\"reachable\">{}</b> reachable · healthy iff more than {:.0} % of them say so · \
         {} reports accepted ({} octets)</p>",
        c.reachable,
        c.quorum * 100.0,
        c.reports_accepted,
        c.report_bytes
    );
    if c.reachable == 0 {
        page.push_str("<p class=\"warn\">No checker is reachable: every probed check keeps its last decision.</p>\n");
    } else {
        page.push_str("<table><tr><th>checker</th><th>region</th></tr>\n");
        for checker in &c.list {
            let _ = writeln!(
                page,
                "<tr><td>{}</td><td>{}</td></tr>",
                esc(&checker.id),
                esc(&checker.region)
            );
        }
        page.push_str("</table>\n");
    }
    if !c.reports_rejected.is_empty() {
        let rejected: Vec<String> = c
            .reports_rejected
            .iter()
            .map(|(reason, n)| format!("{}: {n}", esc(reason)))
            .collect();
        let _ = writeln!(page, "<p class=\"warn\">Reports rejected: {}</p>", rejected.join(", "));
    }
}

/// Fail-open sets, overrides, externals and shifts.
fn operator(page: &mut String, state: &State, report: &StatusReport) {
    page.push_str("<h2 id=\"fail-open\">Failing open</h2>\n");
    if report.fail_open.is_empty() {
        page.push_str("<p class=\"none\">No set fails open.</p>\n");
    } else {
        page.push_str(
            "<p class=\"warn\">Every member of these sets is unhealthy, so all of them are answered:</p>\n<ul>\n",
        );
        for set in &report.fail_open {
            let _ = writeln!(page, "<li><code>{}</code></li>", esc(set));
        }
        page.push_str("</ul>\n");
    }
    page.push_str("<h2 id=\"overrides\">Overrides and external statuses</h2>\n");
    let overrides: Vec<_> = state
        .operator
        .set
        .overrides
        .iter()
        .filter(|(_, o)| o.in_force())
        .collect();
    if overrides.is_empty() && state.operator.set.externals.is_empty() {
        page.push_str("<p class=\"none\">None.</p>\n");
    } else {
        page.push_str("<table><tr><th>check</th><th>kind</th><th>status</th><th>set</th><th>expires in</th></tr>\n");
        for (key, o) in overrides {
            let _ = writeln!(
                page,
                "<tr id=\"override-{}\"><td>{}</td><td>override</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(key),
                esc(key),
                badge(o.healthy),
                at(o.set_at),
                span(o.ends_in())
            );
        }
        for (key, e) in &state.operator.set.externals {
            let _ = writeln!(
                page,
                "<tr><td>{}</td><td>external</td><td>{}</td><td>{}</td><td>—</td></tr>",
                esc(key),
                badge(e.healthy),
                at(e.set_at)
            );
        }
        page.push_str("</table>\n");
    }
    page.push_str("<h2 id=\"shifts\">Zonal shifts</h2>\n");
    let shifts = shift_list(state);
    if shifts.is_empty() {
        page.push_str("<p class=\"none\">None.</p>\n");
    } else {
        page.push_str("<table><tr><th>set</th><th>away from</th><th>started</th><th>expires in</th><th>moves traffic</th><th>comment</th></tr>\n");
        for s in shifts {
            let _ = writeln!(
                page,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&s.rrset),
                esc(&s.az),
                at(s.started),
                span(s.expires_in_s),
                if s.moves_traffic {
                    "yes".to_owned()
                } else {
                    format!(
                        "<span class=\"warn\">no: {}</span>",
                        esc(s.note.as_deref().unwrap_or(""))
                    )
                },
                esc(s.comment.as_deref().unwrap_or(""))
            );
        }
        page.push_str("</table>\n");
    }
}

/// Connected edges: snapshot, delta, connection age and the XDP share of answers.
fn edges(page: &mut String, report: &StatusReport) {
    page.push_str("<h2 id=\"edges\">Edges</h2>\n");
    if report.edges.is_empty() {
        page.push_str("<p class=\"none\">No edge is connected.</p>\n");
        return;
    }
    page.push_str(
        "<table><tr><th>edge</th><th>snapshot</th><th>health delta</th><th>connected for</th><th>XDP</th></tr>\n",
    );
    let t = now();
    for e in &report.edges {
        let snapshot = match e.snapshot {
            Some(v) if v == report.snapshot_version => format!("{v} (current)"),
            Some(v) => format!("<span class=\"warn\">{v} (behind {})</span>", report.snapshot_version),
            None => "<span class=\"warn\">none yet</span>".to_owned(),
        };
        let xdp = match &e.xdp {
            None => "<span class=\"none\">off</span>".to_owned(),
            Some(x) => {
                let count = |prefix: &str| -> u64 {
                    x.counters
                        .iter()
                        .filter(|(k, _)| k.starts_with(prefix))
                        .map(|(_, n)| n)
                        .sum()
                };
                let (seen, answered) = (count("seen"), count("answered_"));
                let share = if seen == 0 {
                    "no queries yet".to_owned()
                } else {
                    #[expect(clippy::cast_precision_loss, reason = "a percentage for a person")]
                    let pct = answered as f64 * 100.0 / seen as f64;
                    format!("{pct:.1} % of {seen} queries answered in XDP")
                };
                format!(
                    "on {} · generation {} · {share}",
                    esc(&x.interfaces.join(", ")),
                    x.generation
                )
            }
        };
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{snapshot}</td><td>{}</td><td>{}</td><td>{xdp}</td></tr>",
            esc(&e.name),
            e.seq,
            span(t.saturating_sub(e.connected_at))
        );
    }
    page.push_str("</table>\n");
}

/// The `explain` form and, for a query, its answer.
fn explain_section(page: &mut String, state: &State, query: Option<ExplainQuery<'_>>) {
    let ExplainQuery { name, rtype, client } = query.unwrap_or(ExplainQuery {
        name: "",
        rtype: "A",
        client: None,
    });
    let _ = writeln!(
        page,
        "<h2 id=\"explain\">Explain an answer</h2>\n<form method=\"get\" action=\"/status\">\
         <input name=\"name\" size=\"40\" placeholder=\"www.example.com.\" value=\"{}\">\
         <input name=\"type\" size=\"6\" value=\"{}\">\
         <input name=\"client\" size=\"20\" placeholder=\"client 192.0.2.1/24\" value=\"{}\">\
         <input type=\"submit\" value=\"explain\"></form>",
        esc(name),
        esc(rtype),
        esc(client.unwrap_or_default())
    );
    if query.is_none() || name.is_empty() {
        return;
    }
    match explain(state, name, rtype, client) {
        Ok(e) => explanation(page, &e),
        Err(err) => {
            let _ = writeln!(page, "<p class=\"warn\" id=\"explain-error\">{}</p>", esc(&err.message));
        }
    }
}

fn explanation(page: &mut String, e: &Explanation) {
    let _ = writeln!(
        page,
        "<p id=\"explained\"><code>{} {}</code>: {} · TTL {}</p>",
        esc(&e.name),
        esc(&e.rtype),
        esc(&e.policy),
        e.ttl
    );
    match &e.detail {
        ExplainDetail::Plain { answer, values } => {
            let _ = writeln!(page, "<p>{}</p>\n<ul>", esc(answer));
            for v in values {
                let _ = writeln!(page, "<li><code>{}</code></li>", esc(v));
            }
            page.push_str("</ul>\n");
        }
        ExplainDetail::Policy(p) => {
            if p.fail_open {
                let _ = writeln!(
                    page,
                    "<p class=\"warn\">Failing open: {}</p>",
                    esc(p.fail_open_note.as_deref().unwrap_or("every member answers"))
                );
            }
            if let Some(latency) = &p.latency {
                let _ = writeln!(page, "<p>Latency: {}</p>", esc(latency));
            }
            page.push_str("<table><tr><th>member</th><th>weight / role</th><th>check</th><th>status</th><th>why</th><th>round trip</th><th>answers with</th></tr>\n");
            for c in &p.candidates {
                candidate(page, c);
            }
            page.push_str("</table>\n");
            if let Some(c) = &p.client {
                let _ = writeln!(
                    page,
                    "<p id=\"client\">Client <code>{}</code> (decided by {}): matches <code>{}</code>, \
                     scope <code>{}</code>; tries {}; answered by <b>{}</b>{}</p>",
                    esc(&c.client),
                    esc(&c.decided_by),
                    esc(&c.matched),
                    esc(&c.scope_prefix),
                    esc(&c.chain.join(" → ")),
                    esc(c.answered_by.as_deref().unwrap_or("(nothing)")),
                    if c.fail_open { " (fail-open)" } else { "" }
                );
            }
            distribution(page, &p.distribution);
            for s in &p.shifts {
                let _ = writeln!(
                    page,
                    "<p>Shifted away from {} for another {}{}</p>",
                    esc(&s.az),
                    span(s.expires_in_s),
                    if s.moves_traffic {
                        ""
                    } else {
                        " (moves no traffic: the set fails open)"
                    }
                );
            }
        }
    }
}

fn candidate(page: &mut String, c: &Candidate) {
    let role = match (c.weight, &c.role) {
        (Some(_), _) if c.effective_weight.is_some() => {
            format!("weight {} (load {})", esc(&c.weight_text()), esc(&c.load_text()))
        }
        (Some(_), _) => format!("weight {}", c.weight_text()),
        (None, Some(role)) => esc(role),
        (None, None) => String::new(),
    };
    let answers = match &c.answers {
        MemberAnswer::Records { records, values } if values.is_empty() => format!("{records} records"),
        MemberAnswer::Records { values, .. } => values.iter().map(|v| esc(v)).collect::<Vec<_>>().join("<br>"),
        MemberAnswer::Alias { alias } => format!("alias of {}", esc(alias)),
    };
    let _ = writeln!(
        page,
        "<tr><td>{}</td><td>{role}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{answers}</code></td></tr>",
        esc(&c.id),
        esc(c.check.as_deref().unwrap_or("—")),
        badge(c.healthy),
        esc(&c.why),
        esc(&c.rtt_text())
    );
}

fn distribution(page: &mut String, d: &Distribution) {
    page.push_str("<h3>Who answers</h3>\n");
    match d {
        Distribution::Shares(shares) => {
            page.push_str("<table id=\"distribution\"><tr><th>member</th><th>share of answers</th></tr>\n");
            for s in shares {
                let pct = s.share * 100.0;
                let _ = writeln!(
                    page,
                    "<tr><td>{}</td><td><span class=\"bar\" style=\"width:{:.0}px\"></span> {pct:.1} %</td></tr>",
                    esc(s.member.as_deref().unwrap_or("(no member)")),
                    pct * 2.0
                );
            }
            page.push_str("</table>\n");
        }
        Distribution::Multivalue {
            answered_from,
            per_answer,
        } => {
            let _ = writeln!(
                page,
                "<p id=\"distribution\">{per_answer} records per answer, drawn from {}</p>",
                esc(&answered_from.join(", "))
            );
        }
        Distribution::Zonal { answered_azs } => {
            let _ = writeln!(
                page,
                "<p id=\"distribution\">AZs answered: {}</p>",
                esc(&answered_azs.join(", "))
            );
        }
        Distribution::ByClient { by_client } => {
            page.push_str(
                "<table id=\"distribution\"><tr><th>clients matching</th><th>tries</th><th>answered by</th></tr>\n",
            );
            for o in by_client {
                let _ = writeln!(
                    page,
                    "<tr><td><code>{}</code></td><td>{}</td><td>{}{}</td></tr>",
                    esc(&o.matched),
                    esc(&o.chain.join(" → ")),
                    esc(o.answered_by.as_deref().unwrap_or("(nothing)")),
                    if o.fail_open { " (fail-open)" } else { "" }
                );
            }
            page.push_str("</table>\n");
        }
    }
}

/// The newest events first.
fn events(page: &mut String, state: &State) {
    page.push_str("<h2 id=\"events\">Events</h2>\n");
    if state.log.events.is_empty() {
        page.push_str("<p class=\"none\">None yet.</p>\n");
        return;
    }
    page.push_str("<table><tr><th>time</th><th>kind</th><th>what</th></tr>\n");
    for e in state.log.events.last(EVENTS_SHOWN).rev() {
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            at(e.time),
            esc(&e.kind),
            esc(&e.message)
        );
    }
    page.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::esc;

    #[test]
    fn markup_in_names_and_reasons_is_escaped() {
        assert_eq!(
            esc("<script>alert('x') & \"y\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;"
        );
    }
}
