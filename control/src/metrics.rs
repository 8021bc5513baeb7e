//! Prometheus metrics of a location (SPEC §8), rendered from the state at each scrape
//! (`OpenMetrics` text, prometheus-client) and served on `--metrics ADDR:PORT` at
//! `/metrics`.
use std::sync::atomic::AtomicU64;

use prometheus_client::{
    encoding::{text::encode, EncodeLabelValue, LabelValueEncoder},
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use qdns_abi::health::slot_healthy;
use qdns_listen::metrics::{Get, Page};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{ctx::Ctx, state::State};

type Labels = Vec<(String, Value)>;

/// A label value, escaped as the text format wants (`\\`, `\"` and a line feed as
/// `\n`; prometheus-client writes values as they are): edge names come from hellos, and
/// zone, set, member and check names from primaries and catalogs — none may end a label
/// early or start a line of its own.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Value(String);

impl EncodeLabelValue for Value {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        use std::fmt::Write as _;
        for c in self.0.chars() {
            match c {
                '\\' => encoder.write_str("\\\\")?,
                '"' => encoder.write_str("\\\"")?,
                '\n' => encoder.write_str("\\n")?,
                c => encoder.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// One label.
fn label(key: &str, value: impl Into<String>) -> (String, Value) {
    (key.to_owned(), Value(value.into()))
}

fn family() -> Family<Labels, Gauge> {
    Family::default()
}

fn counter(value: u64) -> Counter<u64, AtomicU64> {
    let c = Counter::<u64, AtomicU64>::default();
    c.inc_by(value);
    c
}

fn gauge(value: i64) -> Gauge {
    let g = Gauge::default();
    g.set(value);
    g
}

/// The metrics text for `state`.
#[must_use]
pub fn render(state: &State) -> String {
    render_with(state, None)
}

/// The metrics text for `state` and, when served, zone transfers.
#[must_use]
pub fn render_with(state: &State, transfers: Option<&crate::transfer::Transfers>) -> String {
    let mut r = Registry::with_prefix("qdns");
    let version = i64::try_from(state.served.snapshot.version).unwrap_or(i64::MAX);
    r.register(
        "snapshot_version",
        "Version of the snapshot control serves",
        gauge(version),
    );
    let seq = i64::try_from(state.served.seq).unwrap_or(i64::MAX);
    r.register("health_seq", "Health deltas sent for the current snapshot", gauge(seq));
    register_intent(&mut r, state);
    register_checks(&mut r, state);
    register_sets_and_edges(&mut r, state);
    register_round_trips(&mut r, state);
    register_loads(&mut r, state);
    register_counters(&mut r, state);
    if let Some(transfers) = transfers {
        register_transfers(&mut r, transfers);
    }
    let mut out = String::new();
    if encode(&mut out, &r).is_err() {
        out.clear();
    }
    out
}

/// The revision of the deployment's intent served, and how long ago its store last
/// answered (`--intent` only).
fn register_intent(r: &mut Registry, state: &State) {
    let Some(heard) = state.log.intent_heard_at else {
        return;
    };
    let revision = i64::try_from(state.served.snapshot.intent_revision).unwrap_or(i64::MAX);
    r.register(
        "control_intent_revision",
        "Revision of the deployment's intent the snapshot is made from",
        gauge(revision),
    );
    let age = i64::try_from(crate::clock::now().saturating_sub(heard)).unwrap_or(i64::MAX);
    r.register(
        "control_intent_age_seconds",
        "Seconds since the intent store last answered (a location cut off from it serves the revision it applied last)",
        gauge(age),
    );
}

/// Decisions per check, fresh reports per checker and per region, reachable checkers.
fn register_checks(r: &mut Registry, state: &State) {
    let checks = family();
    let observed = family();
    // (check, region) → (fresh reports saying healthy, fresh reports).
    let mut by_region: std::collections::BTreeMap<(String, String), (i64, i64)> = std::collections::BTreeMap::new();
    for (key, probe) in state.probed_checks() {
        if let Some(slot) = state.slot(&key) {
            let healthy = i64::from(slot_healthy(&state.served.snapshot.bitmap, slot));
            checks.get_or_create(&vec![label("check", key.clone())]).set(healthy);
        }
        for o in state.fresh_observations(&key, probe.interval) {
            let labels = vec![
                label("check", key.clone()),
                label("checker", o.checker.clone()),
                label("region", o.region.clone()),
            ];
            observed.get_or_create(&labels).set(i64::from(o.healthy));
            let region = by_region.entry((key.clone(), o.region.clone())).or_default();
            region.0 += i64::from(o.healthy);
            region.1 += 1;
        }
    }
    r.register(
        "check_healthy",
        "Location's decision per probed check (1 healthy)",
        checks,
    );
    r.register(
        "check_observed_healthy",
        "Latest fresh report per check, checker and region (1 healthy)",
        observed,
    );
    let (region_healthy, region_reports) = (family(), family());
    for ((check, region), (healthy, reports)) in by_region {
        let labels = vec![label("check", check), label("region", region)];
        region_healthy.get_or_create(&labels).set(healthy);
        region_reports.get_or_create(&labels).set(reports);
    }
    r.register(
        "check_region_healthy",
        "Fresh reports per check and region that say healthy (the share beside check_region_reports)",
        region_healthy,
    );
    r.register(
        "check_region_reports",
        "Fresh reports per check and region",
        region_reports,
    );
    let reachable = family();
    for (id, region) in state.reachable_checkers() {
        reachable
            .get_or_create(&vec![label("checker", id.clone()), label("region", region.clone())])
            .set(1);
    }
    r.register("checker_reachable", "Checkers with fresh reports", reachable);
}

/// Fail-open state per policy set, and what each edge acknowledged.
fn register_sets_and_edges(r: &mut Registry, state: &State) {
    let fail_open = family();
    for zone in &state.served.snapshot.zones {
        for set in zone.rrsets.iter().filter(|s| s.policy.is_some()) {
            let failing = crate::state::fails_open(zone, set, &state.served.snapshot.bitmap);
            fail_open
                .get_or_create(&vec![label("rrset", qdns_zone::master::set_label(set))])
                .set(i64::from(failing));
        }
    }
    r.register(
        "fail_open",
        "Policy record sets answering by fail-open (1) or by health (0)",
        fail_open,
    );
    let edges = family();
    for edge in state.served.edges.connected() {
        let version = edge.snapshot.map_or(0, |v| i64::try_from(v).unwrap_or(i64::MAX));
        edges
            .get_or_create(&vec![label("edge", edge.name.clone())])
            .set(version);
    }
    r.register(
        "edge_snapshot_version",
        "Snapshot version each connected edge acknowledged",
        edges,
    );
}

/// Each policy member's smoothed round trip as this location's own checkers measure it
/// (members with a probed check, once measured).
fn register_round_trips(r: &mut Registry, state: &State) {
    let round_trips = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for zone in &state.served.snapshot.zones {
        for set in &zone.rrsets {
            let Some(policy) = &set.policy else { continue };
            for member in &policy.members {
                if let Some(trip) = state.member_round_trip(zone, member) {
                    round_trips
                        .get_or_create(&vec![
                            label("rrset", qdns_zone::master::set_label(set)),
                            label("member", member.id.clone()),
                        ])
                        .set(trip.smoothed.as_secs_f64());
                }
            }
        }
    }
    r.register(
        "control_member_rtt_seconds",
        "Smoothed round trip (time to first byte, or connect time for TCP checks) of each policy member, as this location's checkers measure it",
        round_trips,
    );
}

/// Each weighted member's load figure and effective weight, in sets that shed load.
fn register_loads(r: &mut Registry, state: &State) {
    let loads = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let weights = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let now = crate::clock::monotonic();
    for set in &state.observed.shedding.sets {
        let target = crate::shedding::Shedding::target(set, &state.observed.loads, now);
        for (i, id) in set.ids.iter().enumerate() {
            let labels = vec![label("rrset", set.label.clone()), label("member", id.clone())];
            if let Some(milli) = target.get(i).and_then(|(_, f)| *f) {
                loads.get_or_create(&labels).set(f64::from(milli) / 1000.0);
            }
            let configured = set.configured.get(i).copied().unwrap_or(0);
            let kept = set.kept.get(i).copied().unwrap_or(10);
            weights
                .get_or_create(&labels)
                .set(f64::from(configured) * f64::from(kept) / 10.0);
        }
    }
    r.register(
        "control_member_load",
        "Load figure each weighted member's check reads (median of the checkers' fresh figures)",
        loads,
    );
    r.register(
        "control_member_effective_weight",
        "Weight each member of a load-shedding set answers with now (configured weight, less what load sheds)",
        weights,
    );
}

/// Monotonic counters.
fn register_counters(r: &mut Registry, state: &State) {
    r.register(
        "health_transitions",
        "Health slot transitions",
        counter(state.log.counters.health_transitions),
    );
    r.register(
        "fail_open_entered",
        "Record sets entering fail-open",
        counter(state.log.counters.fail_open_entered),
    );
    r.register(
        "fail_open_left",
        "Record sets leaving fail-open",
        counter(state.log.counters.fail_open_left),
    );
    r.register(
        "control_persist_failures",
        "Saves of the operator state (overrides, externals, shifts) that failed",
        counter(state.log.counters.persist_failures),
    );
    let reloads = Family::<Labels, Counter<u64, AtomicU64>>::default();
    reloads
        .get_or_create(&vec![label("result", "ok".to_owned())])
        .inc_by(state.log.counters.reloads_ok);
    reloads
        .get_or_create(&vec![label("result", "rejected".to_owned())])
        .inc_by(state.log.counters.reloads_rejected);
    r.register("reloads", "Zone reloads by result", reloads);
    let reports = Family::<Labels, Counter<u64, AtomicU64>>::default();
    reports
        .get_or_create(&vec![label("result", "accepted".to_owned())])
        .inc_by(state.log.reports.accepted());
    for (reason, n) in state.log.reports.rejected() {
        reports
            .get_or_create(&vec![label("result", reason.to_owned())])
            .inc_by(n);
    }
    r.register("checker_reports", "Remote checker reports by result", reports);
    let refused = Family::<Labels, Counter<u64, AtomicU64>>::default();
    for (reason, n) in state.served.edges.refused() {
        refused
            .get_or_create(&vec![label("reason", reason.to_owned())])
            .inc_by(n);
    }
    r.register(
        "edge_links_refused",
        "Edge connections refused before any snapshot was sent, by reason",
        refused,
    );
    r.register(
        "checker_report_bytes",
        "Octets of accepted checker reports",
        counter(state.log.reports.bytes()),
    );
}

/// Zone transfer requests and NOTIFY by outcome, and each served zone's serial.
fn register_transfers(r: &mut Registry, transfers: &crate::transfer::Transfers) {
    let outcomes = Family::<Labels, Counter<u64, AtomicU64>>::default();
    for (outcome, n) in transfers.stats.counts() {
        outcomes
            .get_or_create(&vec![label("outcome", outcome.label().to_owned())])
            .inc_by(n);
    }
    r.register(
        "control_transfers",
        "Zone transfer requests (axfr, ixfr, soa, refused_*, malformed, dropped) and NOTIFY (notify_*) by outcome",
        outcomes,
    );
    let updates = Family::<Labels, Counter<u64, AtomicU64>>::default();
    for (outcome, n) in transfers.update_stats.counts() {
        updates
            .get_or_create(&vec![label("outcome", outcome.label().to_owned())])
            .inc_by(n);
    }
    r.register(
        "control_updates",
        "Dynamic updates (RFC 2136) by outcome: applied, unchanged, prerequisite_failed, refused_*, notauth, notzone, malformed, failed, busy",
        updates,
    );
    let serials = family();
    for zone in transfers.served() {
        serials
            .get_or_create(&vec![label("zone", qdns_zone::name::to_text(&zone.origin))])
            .set(i64::from(zone.serial));
    }
    r.register(
        "control_transfer_serial",
        "The serial zone transfers carry, per zone",
        serials,
    );
}

/// Serves `/metrics` and the status page (`/status`; `/` redirects there in effect: it
/// is the same page) until `shutdown`.
pub async fn serve(listener: TcpListener, ctx: Ctx, shutdown: CancellationToken) {
    qdns_listen::metrics::serve_pages(
        listener,
        move |get: Get| {
            let ctx = ctx.clone();
            async move {
                match get.path.as_str() {
                    "/metrics" => Page::metrics(render_with(&*ctx.state.lock().await, Some(&ctx.transfers))),
                    "/" | "/status" => {
                        let (name, rtype, client) = (get.param("name"), get.param("type"), get.param("client"));
                        // How each client is routed is the operator's to see: answered to
                        // this host only (issue 53 §8).
                        if client.as_deref().is_some_and(|c| !c.is_empty()) && !get.from_loopback() {
                            return Page::text(
                                403,
                                "explain for a client is answered to this host only: open the page from \
                                 127.0.0.1 (an SSH tunnel), or run qdnsctl explain NAME TYPE --client ADDR\n",
                            );
                        }
                        let query = name.as_deref().map(|name| crate::status_page::ExplainQuery {
                            name,
                            rtype: rtype.as_deref().unwrap_or("A"),
                            client: client.as_deref().filter(|c| !c.is_empty()),
                        });
                        Page::html(crate::status_page::render(&*ctx.state.lock().await, query))
                    }
                    _ => Page::text(404, "see /status or /metrics\n"),
                }
            }
        },
        shutdown,
    )
    .await;
}
