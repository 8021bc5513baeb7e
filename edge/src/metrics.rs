//! Prometheus metrics of an edge (SPEC §8), served on `--metrics ADDR:PORT` at
//! `/metrics` (`OpenMetrics` text via prometheus-client), rendered at each scrape from
//! the workers' counters, the engine, and the XDP program's per-CPU counters.
use std::sync::{atomic::AtomicU64, Arc, Mutex};

use arc_swap::ArcSwap;
use prometheus_client::{
    encoding::text::encode,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use qdns_listen::metrics::{Get, Page};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{
    ready::Readiness,
    stats::{totals, WorkerStats},
    xdp::XdpProgram,
    Engine,
};

type Labels = Vec<(String, String)>;
type Counters = Family<Labels, Counter<u64, AtomicU64>>;

/// What the metrics read.
#[derive(Clone)]
pub struct Sources {
    /// UDP workers' counters.
    pub udp: Vec<Arc<WorkerStats>>,
    /// TCP counters.
    pub tcp: Arc<WorkerStats>,
    /// The engine.
    pub engine: Arc<ArcSwap<Engine>>,
    /// The XDP program, when attached.
    pub xdp: Option<Arc<Mutex<XdpProgram>>>,
    /// Readiness (`/ready`).
    pub ready: Arc<Readiness>,
    /// A follower's link and state-directory faults.
    pub link: Option<Arc<crate::follow::LinkStats>>,
    /// Query logs, when on.
    pub dnstap: Option<Arc<crate::dnstap::Tap>>,
}

fn label(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// The metrics text.
#[must_use]
#[expect(clippy::too_many_lines, reason = "one registry filled in order, metric by metric")]
pub fn render(sources: &Sources) -> String {
    let mut r = Registry::with_prefix("qdns_edge");
    let responses = Counters::default();
    let by_type = Counters::default();
    let truncated = Counters::default();
    let dropped = Counters::default();
    let limited = Counters::default();
    let helper_wakeups = Counter::<u64, AtomicU64>::default();
    for (transport, workers) in [
        ("udp", sources.udp.iter().map(AsRef::as_ref).collect::<Vec<_>>()),
        ("tcp", vec![sources.tcp.as_ref()]),
    ] {
        let t = totals(workers.into_iter());
        for (rcode, n) in &t.rcode {
            responses
                .get_or_create(&label(&[("path", "user"), ("transport", transport), ("rcode", rcode)]))
                .inc_by(*n);
        }
        for (qtype, n) in &t.qtype {
            by_type
                .get_or_create(&label(&[("path", "user"), ("qtype", qtype)]))
                .inc_by(*n);
        }
        truncated
            .get_or_create(&label(&[("transport", transport)]))
            .inc_by(t.truncated);
        dropped
            .get_or_create(&label(&[("transport", transport)]))
            .inc_by(t.dropped);
        if transport == "udp" {
            helper_wakeups.inc_by(t.helper_wakeups);
            limited
                .get_or_create(&label(&[("path", "user"), ("outcome", "dropped")]))
                .inc_by(t.rrl_dropped);
            limited
                .get_or_create(&label(&[("path", "user"), ("outcome", "slipped")]))
                .inc_by(t.rrl_slipped);
        }
    }
    r.register("responses", "Responses sent, by path, transport and RCODE", responses);
    r.register("responses_by_type", "Responses sent, by path and QTYPE", by_type);
    r.register("truncated", "Responses sent with TC set", truncated);
    r.register("dropped", "Datagrams or messages dropped unanswered", dropped);
    let evicted = Counter::<u64, AtomicU64>::default();
    evicted.inc_by(sources.tcp.evicted.load(std::sync::atomic::Ordering::Relaxed));
    r.register(
        "tcp_evicted",
        "TCP connections waiting for a query closed to make room for a new one (at --max-tcp-connections or --max-tcp-per-source)",
        evicted,
    );
    r.register(
        "udp_helper_wakeups",
        "UDP helper threads called in because a socket's receiving thread fell behind (a full batch waiting); steadily rising means --workers is in use",
        helper_wakeups,
    );
    r.register(
        "rrl",
        "Responses the rate limiter held back (dropped) or sent slipped (TC=1, no records); counted in responses too",
        limited,
    );
    let engine = sources.engine.load();
    let version = Gauge::<i64, std::sync::atomic::AtomicI64>::default();
    version.set(i64::try_from(engine.version()).unwrap_or(i64::MAX));
    r.register(
        "snapshot_version",
        "Version of the snapshot being served (0: none)",
        version,
    );
    register_answers(&mut r, sources, &engine);
    if let Some(link) = &sources.link {
        let load = |n: &std::sync::atomic::AtomicU64| {
            let c = Counter::<u64, AtomicU64>::default();
            c.inc_by(n.load(std::sync::atomic::Ordering::Relaxed));
            c
        };
        r.register(
            "control_timeouts",
            "Connections to control given up because it did not connect or send its snapshot within --control-timeout",
            load(&link.control_timeouts),
        );
        r.register(
            "persist_failures",
            "Snapshots or health updates that could not be written to the state directory (full or read-only); served from memory",
            load(&link.persist_failures),
        );
        r.register(
            "link_deltas_applied",
            "New snapshot versions taken from control as deltas (changed zones and record sets only)",
            load(&link.deltas_applied),
        );
        r.register(
            "link_deltas_refused",
            "Snapshot deltas that could not be applied (another base, or not control's zones); the snapshot then came whole",
            load(&link.deltas_refused),
        );
        r.register(
            "link_received_bytes",
            "Octets read from control on the link (frames with their length prefixes)",
            load(&link.received_octets),
        );
    }
    let ready = Gauge::<i64, std::sync::atomic::AtomicI64>::default();
    ready.set(i64::from(sources.ready.check(&engine).is_ok()));
    r.register(
        "ready",
        "1 while the edge is ready for traffic (as /ready says: serving a snapshot, not cut off from control past --ready-max-stale)",
        ready,
    );
    if let Some(left) = engine.check_dnssec_expiry() {
        let expiry = Gauge::<i64, std::sync::atomic::AtomicI64>::default();
        expiry.set(left);
        r.register(
            "dnssec_expiry_seconds",
            "Seconds until the first DNSSEC signature of the served zones expires (control re-signs well ahead, 7 days by default; alert well before 0)",
            expiry,
        );
        let unsigned = Gauge::<i64, std::sync::atomic::AtomicI64>::default();
        unsigned.set(i64::try_from(engine.dnssec_unsigned_answers()).unwrap_or(i64::MAX));
        r.register(
            "dnssec_unsigned_answers",
            "DO=1 answers of signed zones sent without an RRSIG since the served snapshot was applied (an answer control did not sign; validators fail it): alert above 0",
            unsigned,
        );
    }
    if let Some(tap) = &sources.dnstap {
        let dropped = Counters::default();
        dropped.get_or_create(&label(&[("path", "user")])).inc_by(tap.dropped());
        r.register(
            "dnstap_dropped",
            "Query-log events not sent: the writer's queue was full (the reader slow or away) or the connection failed under them; by path",
            dropped,
        );
        let sent = Counters::default();
        sent.get_or_create(&label(&[("path", "user")])).inc_by(tap.sent());
        r.register(
            "dnstap_sent",
            "Query-log events (a query and its response) written to the dnstap reader, by path",
            sent,
        );
    }
    let age = Gauge::<i64, std::sync::atomic::AtomicI64>::default();
    age.set(
        engine
            .compiled_at()
            .elapsed()
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
    );
    r.register(
        "snapshot_age_seconds",
        "Seconds since the served snapshot was applied",
        age,
    );
    if let Some(xdp) = &sources.xdp {
        let packets = Counters::default();
        let entries =
            prometheus_client::metrics::family::Family::<Labels, prometheus_client::metrics::gauge::Gauge>::default();
        let generation = prometheus_client::metrics::gauge::Gauge::<i64>::default();
        let bytes = prometheus_client::metrics::gauge::Gauge::<i64>::default();
        let tables_snapshot = prometheus_client::metrics::gauge::Gauge::<i64>::default();
        if let Ok(program) = xdp.lock() {
            tables_snapshot.set(i64::try_from(program.tables_snapshot()).unwrap_or(i64::MAX));
            for (counter, n) in program.counters() {
                packets.get_or_create(&label(&[("counter", counter)])).inc_by(n);
            }
            let (active, stats) = program.table_stats();
            generation.set(i64::from(active));
            bytes.set(i64::try_from(stats.bytes).unwrap_or(i64::MAX));
            for (kind, n) in [
                ("plain", stats.plain),
                ("policy", stats.policy),
                ("node", stats.nodes),
                ("pass", stats.pass),
                ("crowded", stats.crowded),
            ] {
                entries
                    .get_or_create(&label(&[("kind", kind)]))
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
        r.register("xdp_packets", "XDP program counters, summed over CPUs", packets);
        r.register(
            "xdp_table_entries",
            "Entries of the active XDP table generation, by kind",
            entries,
        );
        r.register(
            "xdp_table_bytes",
            "Kernel memory of the active XDP table generation's arrays (twice that while one is built)",
            bytes,
        );
        r.register(
            "xdp_table_generation",
            "Active XDP table generation (0: none, every query goes to user space)",
            generation,
        );
        r.register(
            "xdp_table_snapshot_version",
            "Snapshot version the XDP tables answer from; behind snapshot_version while a new snapshot's tables are built",
            tables_snapshot,
        );
    }
    let mut out = String::new();
    if encode(&mut out, &r).is_err() {
        out.clear();
    }
    out
}

/// `answers{rrset,member,path}`: each counted policy set's answers per member, from
/// the workers' counters (`user`) and the XDP program's (`xdp`).
fn register_answers(r: &mut Registry, sources: &Sources, engine: &Engine) {
    let answers = Counters::default();
    let workers: Vec<&WorkerStats> = sources
        .udp
        .iter()
        .map(AsRef::as_ref)
        .chain([sources.tcp.as_ref()])
        .collect();
    let program = sources.xdp.as_ref().and_then(|xdp| xdp.lock().ok());
    for (rrset, base, members) in engine.counted_sets() {
        for (i, member) in members.iter().enumerate() {
            let index = base.saturating_add(i as u32);
            let user = crate::stats::answers(workers.iter().copied(), index);
            answers
                .get_or_create(&label(&[("rrset", &rrset), ("member", member), ("path", "user")]))
                .inc_by(user);
            if let Some(program) = &program {
                answers
                    .get_or_create(&label(&[("rrset", &rrset), ("member", member), ("path", "xdp")]))
                    .inc_by(program.answers(index));
            }
        }
    }
    r.register(
        "answers",
        "Answers per policy set and member, by path (a multivalue answer counts each member in it)",
        answers,
    );
}

/// Serves the edge's `/metrics` and `/ready` (200 or 503 with one line of why) until
/// `shutdown`.
pub async fn serve(listener: TcpListener, sources: Sources, shutdown: CancellationToken) {
    qdns_listen::metrics::serve_pages(
        listener,
        move |get: Get| {
            let sources = sources.clone();
            async move {
                match get.path.as_str() {
                    "/metrics" => Page::metrics(render(&sources)),
                    "/ready" => match sources.ready.check(&sources.engine.load()) {
                        Ok(why) => Page::text(200, format!("ready: {why}\n")),
                        Err(why) => Page::text(503, format!("not ready: {why}\n")),
                    },
                    _ => Page::text(404, "see /metrics or /ready\n"),
                }
            }
        },
        shutdown,
    )
    .await;
}
