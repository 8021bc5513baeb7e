//! The accept loops of control's listeners: edges (Unix or TCP, with mutual TLS), the
//! control socket, and checker reports; each admits a connection under its caps and
//! hands it to its server (`crate::edges`, `crate::handler`, `crate::report_listener`).
use std::{sync::Arc, time::Duration};

use qdns_listen::{Limits, Pool, Ticket};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, UnixListener},
};
use tokio_util::sync::CancellationToken;

use crate::{
    api::{ApiError, ErrorCode, Request, Response, MAX_REQUEST},
    ctx::Ctx,
    edges,
    handler::handle_all,
    report, report_listener,
};

/// A control-socket connection with no complete request for this long is closed, so
/// idle clients cannot hold the 64 slots.
const CONTROL_IDLE: Duration = Duration::from_secs(60);

/// The read buffer of a control connection: what a pipelining client has sent beyond
/// the request being read, handled with it.
const CONTROL_BUFFER: usize = 64 * 1024;

/// At most this many pipelined requests are handled (and their changes persisted) as
/// one group; the rest wait for the next.
const MAX_BATCH: usize = 1024;

/// Most edge connections control serves at once (each holds a snapshot copy while it
/// is sent); more are closed at once and logged.
pub const MAX_EDGE_CONNECTIONS: usize = 1024;
/// Most control-socket connections at once.
pub const MAX_CONTROL_CONNECTIONS: usize = 64;

/// Most edge connections from one address (edges are one per host; a few more let an
/// edge reconnect while its previous connection is still being torn down).
pub const MAX_EDGE_CONNECTIONS_PER_SOURCE: usize = 16;

/// A place in `pool` for a connection from `source`, or `None` when refused (logged at
/// debug level only: a flood must not become a log flood; callers count refusals).
fn admit(pool: &Pool, source: std::net::IpAddr, what: &'static str) -> Option<Ticket> {
    match pool.admit(source) {
        Ok(ticket) => Some(ticket),
        Err(refusal) => {
            tracing::debug!(what, %source, reason = refusal.label(), "connection refused");
            None
        }
    }
}

fn edge_pool() -> Pool {
    Pool::new(Limits {
        total: MAX_EDGE_CONNECTIONS,
        per_source: MAX_EDGE_CONNECTIONS_PER_SOURCE,
    })
}

pub(crate) async fn accept_edges_unix(listener: UnixListener, ctx: Ctx, shutdown: CancellationToken) {
    // One source: the socket's file permissions say who may connect.
    let pool = Pool::new(Limits {
        total: MAX_EDGE_CONNECTIONS,
        per_source: MAX_EDGE_CONNECTIONS,
    });
    loop {
        let Some(stream) = qdns_listen::accept_unix(&listener, &shutdown).await else {
            return;
        };
        let Some(ticket) = admit(&pool, qdns_listen::pool::LOCAL, "edge socket") else {
            edges::count_refusal(&ctx.state, "connection_limit").await;
            continue;
        };
        let (r, w) = stream.into_split();
        tokio::spawn(edges::serve_edge(
            r,
            w,
            edges::Peer::Unchecked,
            ticket,
            Arc::clone(&ctx.state),
            ctx.feeds(),
            shutdown.clone(),
        ));
    }
}

/// Longest TLS handshake of an edge connection.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts edges on TCP: with `tls`, each must complete a mutual-TLS handshake (a
/// certificate from the location CA) within [`HANDSHAKE_TIMEOUT`] before a byte of it is
/// read; one that does not is counted (`edge_links_refused{reason="tls"}`) and closed.
pub(crate) async fn accept_edges_tcp(
    listener: TcpListener,
    tls: Option<Arc<qdns_link::tls::ServerTls>>,
    ctx: Ctx,
    shutdown: CancellationToken,
) {
    let pool = edge_pool();
    loop {
        let Some((stream, from)) = qdns_listen::accept_tcp(&listener, &shutdown).await else {
            return;
        };
        let Some(ticket) = admit(&pool, from.ip(), "edge socket") else {
            edges::count_refusal(&ctx.state, "connection_limit").await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        // A quiet link over a dead path is noticed (and the edge dropped from the
        // registry) within qdns_link::liveness::DEAD_AFTER.
        if let Err(err) = qdns_link::liveness::watch(&stream) {
            tracing::warn!(%from, %err, "cannot arm TCP keepalive on an edge link");
        }
        let ctx = ctx.clone();
        let shutdown = shutdown.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let (state, feeds) = (Arc::clone(&ctx.state), ctx.feeds());
            let Some(tls) = tls else {
                let (r, w) = stream.into_split();
                edges::serve_edge(r, w, edges::Peer::Plaintext, ticket, state, feeds, shutdown).await;
                return;
            };
            let handshake = tokio::select! {
                () = ticket.evicted() => {
                    edges::count_refusal(&state, "evicted").await;
                    return;
                }
                handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.acceptor().accept(stream)) => handshake,
            };
            let stream = match handshake {
                Ok(Ok(stream)) => stream,
                Ok(Err(err)) => {
                    static LOG: qdns_listen::LogLimit = qdns_listen::LogLimit::new();
                    if LOG.allow() {
                        tracing::warn!(%from, %err, "edge connection refused: TLS authentication failed");
                    }
                    edges::count_refusal(&state, "tls").await;
                    return;
                }
                Err(_) => {
                    tracing::warn!(%from, "edge connection refused: no TLS handshake within the timeout");
                    edges::count_refusal(&state, "tls").await;
                    return;
                }
            };
            let Some(cert) = qdns_link::tls::client_certificate(stream.get_ref().1) else {
                return; // the verifier requires one; nothing to serve without it
            };
            let (r, w) = tokio::io::split(stream);
            edges::serve_edge(r, w, edges::Peer::Certified(cert, tls), ticket, state, feeds, shutdown).await;
        });
    }
}

/// Parses one line read from the control socket into `batch` (a request, or its
/// refusal); false when the line was cut at `MAX_REQUEST`.
fn take_request(line: &str, batch: &mut Vec<Result<Request, Response>>) -> bool {
    let complete = line.ends_with('\n') || line.len() < MAX_REQUEST;
    batch.push(if complete {
        Response::parse_request(line)
    } else {
        Err(Response::error(&ApiError::new(
            ErrorCode::Malformed,
            format!("bad request: over {MAX_REQUEST} octets"),
        )))
    });
    complete
}

pub(crate) async fn accept_control(listener: UnixListener, ctx: Ctx, shutdown: CancellationToken) {
    let pool = Pool::new(Limits {
        total: MAX_CONTROL_CONNECTIONS,
        per_source: MAX_CONTROL_CONNECTIONS,
    });
    loop {
        let Some(stream) = qdns_listen::accept_unix(&listener, &shutdown).await else {
            return;
        };
        let Some(mut ticket) = admit(&pool, qdns_listen::pool::LOCAL, "control socket") else {
            continue;
        };
        let ctx = ctx.clone();
        // Who is asking, named beside every change in the timeline (the socket's mode
        // and group decide who may ask at all).
        let peer = stream.peer_cred().ok().map(|cred| {
            let user = cred.uid();
            let name = qdns_listen::accounts::user_name(user).unwrap_or_else(|| format!("uid {user}"));
            match cred.pid() {
                Some(pid) => format!("{name} (pid {pid})"),
                None => name,
            }
        });
        tokio::spawn(async move {
            let (r, mut w) = stream.into_split();
            let mut lines = BufReader::with_capacity(CONTROL_BUFFER, r);
            let mut line = String::new();
            loop {
                line.clear();
                // Waiting for a request: the oldest such connection makes room for a
                // new one when all 64 places are taken.
                ticket.set_evictable(true);
                let mut limited = (&mut lines).take(MAX_REQUEST as u64);
                let read = tokio::select! {
                    () = ticket.evicted() => return,
                    read = tokio::time::timeout(CONTROL_IDLE, limited.read_line(&mut line)) => read,
                };
                match read {
                    Ok(Ok(0) | Err(_)) | Err(_) => return,
                    Ok(Ok(_)) => {}
                }
                ticket.set_evictable(false);
                // The requests a pipelining client has already sent are handled together
                // (their changes persisted and pushed once): those complete in the
                // buffer, so reading them does not wait.
                let mut batch = Vec::new();
                let mut complete = take_request(&line, &mut batch);
                while complete && batch.len() < MAX_BATCH && lines.buffer().contains(&b'\n') {
                    line.clear();
                    let mut limited = (&mut lines).take(MAX_REQUEST as u64);
                    if !matches!(limited.read_line(&mut line).await, Ok(n) if n > 0) {
                        break;
                    }
                    complete = take_request(&line, &mut batch);
                }
                let responses = handle_all(&ctx, batch, peer.as_deref()).await;
                let mut text = String::new();
                for response in responses {
                    text.push_str(&serde_json::to_string(&response).unwrap_or_else(|_| "{\"ok\":false}".to_owned()));
                    text.push('\n');
                }
                let written = tokio::time::timeout(CONTROL_IDLE, w.write_all(text.as_bytes())).await;
                // A line cut at the limit was refused whole, and the connection is closed
                // (the rest of it is not a request).
                if !matches!(written, Ok(Ok(()))) || !complete {
                    return;
                }
            }
        });
    }
}

/// Accepts signed reports from remote checkers (SPEC §4) through the bounded listener
/// (`report_listener`): an accepted report's observations go into the state under the
/// authenticated identity; a dropped frame or connection is counted by reason and
/// logged.
/// The report listener, its keys, this location's name and the sequences kept.
pub(crate) type Reports = (
    TcpListener,
    Arc<arc_swap::ArcSwap<report::Keys>>,
    String,
    report_listener::Sequences,
);

pub(crate) async fn accept_reports(
    (listener, keys, location, sequences): Reports,
    ctx: Ctx,
    shutdown: CancellationToken,
) {
    let sink = move |verdict: Result<report::Report, report::Reject>, peer: String, octets: u64| {
        let ctx = ctx.clone();
        async move {
            let mut state = ctx.state.lock().await;
            match verdict {
                Ok(report) => {
                    state.log.reports.accept(octets);
                    // A checker's clock may be off by up to MAX_SKEW_SECS, more than a
                    // short interval's freshness (3 × 5 s + 5 s): its timestamps move
                    // into this location's clock by the report's own `sent_at`, so
                    // whether a report is fresh does not depend on the checker's clock.
                    let now = crate::clock::now();
                    let offset =
                        i64::try_from(now).unwrap_or(i64::MAX) - i64::try_from(report.sent_at).unwrap_or(i64::MAX);
                    for mut observation in report.observations {
                        // Its age, on the checker's own clock, is what freshness uses.
                        let age = report.sent_at.saturating_sub(observation.at);
                        observation.at = observation.at.saturating_add_signed(offset).min(now);
                        // The authenticated identity, not what the body claims per item.
                        observation.checker.clone_from(&report.checker);
                        observation.region.clone_from(&report.region);
                        state.observe(observation, age);
                    }
                    ctx.push_health(&mut state);
                }
                Err(reject) => {
                    static LOG: qdns_listen::LogLimit = qdns_listen::LogLimit::new();
                    state.log.reports.reject(reject.label());
                    if LOG.allow() {
                        tracing::warn!(%peer, reason = reject.label(), "checker report dropped");
                    }
                }
            }
        }
    };
    report_listener::serve(listener, keys, location, sequences, sink, shutdown).await;
}
