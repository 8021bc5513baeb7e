//! Serving snapshots to edges (SPEC §1 `--edge-socket`: a Unix path, `tls://` or
//! `tcp://`): after the edge's hello, a full snapshot, then every health delta and every
//! reload as they happen. Edges acknowledge what they applied; `status` shows it.
use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use qdns_link::protocol::{self, ToControl};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    sync::{broadcast, Mutex},
};
use tokio_util::sync::CancellationToken;

use crate::{clock::now, edge_registry::EdgeInfo, state::State};

pub use crate::edge_registry::{Frame, HealthUpdate, SnapshotUpdate, Update};

/// Largest message an edge sends control (its XDP report is a few KiB).
pub const MAX_FROM_EDGE: usize = 1 << 20;

/// Most connections at once that name one edge: enough for a reconnect while control
/// has not yet noticed the old connection is dead, not enough for the holder of one
/// edge's certificate to take every place.
pub const MAX_PER_EDGE: usize = 4;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Longest wait for an edge's hello after it connects.
pub const HELLO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What the transport proved about the peer.
#[derive(Debug, Clone)]
pub enum Peer {
    /// A Unix socket (file permissions): whatever it names itself.
    Unchecked,
    /// Plain `tcp://` (`--insecure-plaintext-link`): whatever it names itself, and
    /// anyone who can connect could be it, so it gets no cookie secret — with the
    /// location's secret a spoofer's queries would pass the rate limiter. Edges on such
    /// a link answer cookies with secrets of their own (valid at that edge only).
    Plaintext,
    /// A tls:// edge whose certificate the handshake verified: its hello must name
    /// what the certificate names, and the link ends when the revocation list (read
    /// through the socket's TLS files) revokes it.
    Certified(
        rustls::pki_types::CertificateDer<'static>,
        Arc<qdns_link::tls::ServerTls>,
    ),
}

/// How often a linked edge's certificate is checked against the revocation list.
pub const REVOCATION_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads one message of at most [`MAX_FROM_EDGE`] octets (the buffer grows only with
/// octets that arrive), in the schema its frame says; `None` on a close, an oversized
/// length or an undecodable body.
async fn read_message<R: AsyncRead + Unpin>(reader: &mut R) -> Option<ToControl> {
    protocol::decode_to_control(&read_body(reader).await?).ok()
}

/// The edge's first message, with the hello's extension when the message is a hello
/// that has one.
async fn read_hello<R: AsyncRead + Unpin>(reader: &mut R) -> Option<(ToControl, Option<protocol::HelloExtension>)> {
    protocol::decode_hello(&read_body(reader).await?).ok()
}

/// One frame's body of at most [`MAX_FROM_EDGE`] octets.
async fn read_body<R: AsyncRead + Unpin>(reader: &mut R) -> Option<Vec<u8>> {
    let mut prefix = [0u8; 4];
    reader.read_exact(&mut prefix).await.ok()?;
    let len = protocol::frame_len(prefix).ok()?;
    if len > MAX_FROM_EDGE {
        tracing::warn!(len, "edge frame over {MAX_FROM_EDGE} octets: closing");
        return None;
    }
    let mut body = Vec::new();
    match (&mut *reader).take(len as u64).read_to_end(&mut body).await {
        Ok(n) if n == len => Some(body),
        _ => None,
    }
}

/// The link schema an edge's frames go in, by its hello: the newest it reads (this
/// control's, when the edge is newer), or the one before numbering for an edge that
/// names none — during an upgrade an older edge gets what a control of its schema sent.
fn schema_of(extension: Option<&protocol::HelloExtension>) -> u16 {
    extension
        .map(|e| e.schema)
        .filter(|&schema| schema > qdns_link::schema::UNNUMBERED)
        .map_or(qdns_link::schema::UNNUMBERED, |schema| {
            schema.min(qdns_link::schema::SCHEMA)
        })
}

/// A connection's timers: the revocation check, and the keepalive ticks (every
/// `keepalive`, the first one taken).
async fn link_timers(keepalive: Option<std::time::Duration>) -> (tokio::time::Interval, tokio::time::Interval) {
    let mut revocation = tokio::time::interval(REVOCATION_CHECK);
    revocation.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut ticks = tokio::time::interval(keepalive.unwrap_or(std::time::Duration::from_secs(3600)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    (revocation, ticks)
}

/// The keepalive interval an edge's hello asks for (capped), if any.
fn keepalive_of(extension: Option<&protocol::HelloExtension>) -> Option<std::time::Duration> {
    extension
        .map(|e| e.keepalive_secs.min(MAX_KEEPALIVE_SECS))
        .filter(|&secs| secs > 0)
        .map(|secs| std::time::Duration::from_secs(u64::from(secs)))
}

/// Longest keepalive interval an edge may ask for.
pub const MAX_KEEPALIVE_SECS: u16 = 60;

/// How long an edge may be silent, after a full snapshot was written to it, before a
/// keepalive link is dropped: it compiles the snapshot before it speaks again.
pub const SNAPSHOT_GRACE: std::time::Duration = std::time::Duration::from_secs(120);

/// Milliseconds on a clock shared by a connection's two tasks.
fn millis_since(origin: std::time::Instant) -> u64 {
    u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Longest a frame may take to reach an edge: one that stops reading is dropped (it
/// reconnects and gets a full snapshot) instead of holding its task and frame.
pub const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Writes and flushes `frame` (made in this control's schema) within [`WRITE_TIMEOUT`],
/// as an edge that reads `schema` reads it; false when that fails.
async fn write_frame<W: AsyncWrite + Unpin>(writer: &mut W, schema: u16, frame: &[u8]) -> bool {
    let Ok(frame) = protocol::in_schema(frame, schema) else {
        tracing::warn!(
            schema,
            "a frame this control made does not go in the edge's link schema: closing"
        );
        return false;
    };
    let written = tokio::time::timeout(WRITE_TIMEOUT, async {
        writer.write_all(&frame).await?;
        writer.flush().await
    })
    .await;
    matches!(written, Ok(Ok(())))
}

/// Counts and logs a connection refused before its snapshot.
async fn refuse(state: &Mutex<State>, reason: &'static str, detail: &str) {
    static LOG: qdns_listen::LogLimit = qdns_listen::LogLimit::new();
    if LOG.allow() {
        tracing::warn!(reason, detail, "edge connection refused");
    }
    count_refusal(state, reason).await;
}

/// Counts an edge connection refused for `reason` (`qdns_edge_links_refused_total`).
pub async fn count_refusal(state: &Mutex<State>, reason: &'static str) {
    state.lock().await.served.edges.refuse(reason);
}

/// What a connection sends first: the snapshot (whole, or as a delta from what the edge
/// serves) and the (version, health delta) it holds.
struct Opening {
    frame: Frame,
    sent: (u64, u64),
    /// The link schema the edge's frames go in ([`schema_of`]).
    schema: u16,
}

/// Registers connection `id` as edge `edge` and returns the snapshot frame to send
/// first and the subscription to what follows it; `None` (counted, logged) when the
/// edge already has [`MAX_PER_EDGE`] connections or the snapshot cannot be encoded.
/// Under the state's lock: counting and adding cannot interleave, and no delta falls
/// between the snapshot and the subscription.
fn enlist(
    state: &mut State,
    id: u64,
    edge: String,
    serving: Option<u64>,
    extension: Option<&protocol::HelloExtension>,
    updates: &broadcast::Sender<Update>,
) -> Option<(Opening, broadcast::Receiver<Update>)> {
    static LOG: qdns_listen::LogLimit = qdns_listen::LogLimit::new();
    if state.served.edges.named(&edge) >= MAX_PER_EDGE {
        state.served.edges.refuse("per_edge");
        if LOG.allow() {
            tracing::warn!(%edge, "edge connection refused: it already has {MAX_PER_EDGE}");
        }
        return None;
    }
    let rx = updates.subscribe();
    let serving_text = match serving {
        Some(version) => format!("serving snapshot {version}"),
        None => "serving nothing yet".to_owned(),
    };
    state.event("edge", format!("edge {edge} connected ({serving_text})"));
    state.served.edges.connect(
        id,
        EdgeInfo {
            name: edge,
            snapshot: serving,
            seq: 0,
            connected_at: now(),
            xdp: None,
        },
    );
    let sent = (state.served.snapshot.version, state.served.seq);
    let opening = match resumed(state, serving, extension) {
        Some(frame) => Ok(frame),
        None => state
            .served
            .edges
            .snapshot_frame(&state.served.snapshot, state.served.seq),
    };
    match opening {
        Ok(frame) => Some((
            Opening {
                frame,
                sent,
                schema: schema_of(extension),
            },
            rx,
        )),
        Err(err) => {
            tracing::error!(%err, "cannot encode the snapshot");
            state.served.edges.disconnect(id);
            None
        }
    }
}

/// The delta that brings an edge serving `serving` (the zones its hello lists) to the
/// state's snapshot, when it takes deltas and keeps enough of its zones that the delta
/// is smaller than the snapshot: after a control restart or a reconnect, edges that
/// serve the zones already get a few octets, not every zone again.
fn resumed(state: &mut State, serving: Option<u64>, extension: Option<&protocol::HelloExtension>) -> Option<Frame> {
    let extension = extension.filter(|e| e.deltas && !e.zones.is_empty())?;
    let serving = serving?;
    let digests = state.served.edges.zone_digests(&state.served.snapshot);
    // None: most of it goes whole anyway; the full frame, encoded once for every edge.
    let delta = qdns_link::delta::resume(
        serving,
        &extension.zones,
        &state.served.snapshot,
        &digests,
        state.served.seq,
    )?;
    protocol::encode(&protocol::ToEdge::Delta(Box::new(delta)))
        .ok()
        .map(Arc::new)
}

/// The edge's hello (name, version served, extension), read within [`HELLO_TIMEOUT`] and
/// checked against its certificate on tls://; `None` (counted) for anything else.
async fn greet<R: AsyncRead + Unpin>(
    reader: &mut R,
    peer: &Peer,
    ticket: &mut qdns_listen::Ticket,
    state: &Mutex<State>,
    shutdown: &CancellationToken,
) -> Option<(String, Option<u64>, Option<protocol::HelloExtension>)> {
    let hello = tokio::select! {
        () = shutdown.cancelled() => return None,
        () = ticket.evicted() => {
            refuse(state, "evicted", "closed before its hello to make room").await;
            return None;
        }
        hello = tokio::time::timeout(HELLO_TIMEOUT, read_hello(reader)) => hello,
    };
    let (edge, serving, extension) = match hello {
        Ok(Some((ToControl::Hello { edge, serving }, extension))) => (edge, serving, extension),
        Ok(Some(_)) => {
            refuse(state, "no_hello", "first message was not a hello").await;
            return None;
        }
        Ok(None) => {
            refuse(
                state,
                "no_hello",
                "closed or sent an unreadable message before its hello",
            )
            .await;
            return None;
        }
        Err(_) => {
            refuse(state, "timeout", "no hello within the timeout").await;
            return None;
        }
    };
    if let Peer::Certified(cert, _) = peer {
        if !qdns_link::tls::certifies(cert, &edge) {
            let detail = format!("hello names edge {edge:?} but its certificate does not");
            refuse(state, "wrong_name", &detail).await;
            return None;
        }
    }
    Some((edge, serving, extension))
}

/// True (logged, and an event) when the edge's certificate is revoked now.
async fn revoked(peer: &Peer, state: &Mutex<State>, id: u64) -> bool {
    let Peer::Certified(cert, tls) = peer else {
        return false;
    };
    if !tls.revokes(cert) {
        return false;
    }
    let mut guard = state.lock().await;
    let name = guard
        .served
        .edges
        .get_mut(id)
        .map(|info| info.name.clone())
        .unwrap_or_default();
    guard.event("edge", format!("edge {name}'s certificate is revoked: link dropped"));
    drop(guard);
    tracing::warn!(edge = %name, "edge certificate revoked: link dropped");
    true
}

/// What an edge connection is fed besides its snapshot.
pub struct Feeds {
    /// Snapshots and health deltas, as broadcast.
    pub updates: broadcast::Sender<Update>,
    /// The location's cookie secrets.
    pub cookies: tokio::sync::watch::Receiver<crate::cookies::Secrets>,
}

/// The frame carrying the secrets `cookies` holds now (marked seen).
fn cookie_frame(cookies: &mut tokio::sync::watch::Receiver<crate::cookies::Secrets>) -> Vec<u8> {
    let message = cookies.borrow_and_update().message();
    protocol::encode(&message).unwrap_or_default()
}

/// Serves one edge connection until it closes or `shutdown`. The edge speaks first: a
/// hello (within [`HELLO_TIMEOUT`]) naming it, checked against its certificate on
/// tls://; only then does it get the snapshot. A peer that says nothing, or something
/// else, gets nothing.
pub async fn serve_edge<R, W>(
    mut reader: R,
    mut writer: W,
    peer: Peer,
    mut ticket: qdns_listen::Ticket,
    state: Arc<Mutex<State>>,
    feeds: Feeds,
    shutdown: CancellationToken,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin,
{
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let Some((edge, serving, extension)) = greet(&mut reader, &peer, &mut ticket, &state, &shutdown).await else {
        return;
    };
    // An edge that named itself (and on tls:// proved it) keeps its place.
    ticket.set_evictable(false);
    // Subscribe and take the snapshot under one lock, so no delta falls between them.
    let enlisted = enlist(
        &mut *state.lock().await,
        id,
        edge,
        serving,
        extension.as_ref(),
        &feeds.updates,
    );
    let Some((opening, mut rx)) = enlisted else { return };
    let (mut sent, takes_deltas) = (opening.sent, extension.as_ref().is_some_and(|e| e.deltas));
    // Keepalives, when asked for: one now (the edge learns this control speaks them),
    // then every interval; an edge silent for KEEPALIVE_MISSES intervals is dropped.
    let keepalive = keepalive_of(extension.as_ref());
    let keepalive_frame = protocol::encode(&protocol::ToEdge::Keepalive).unwrap_or_default();
    // The cookie secrets, to an edge that takes them: now, and at each rotation.
    let takes_cookies = extension.as_ref().is_some_and(|e| e.cookies) && !matches!(peer, Peer::Plaintext);
    let mut cookies = feeds.cookies;
    let first_cookies = takes_cookies.then(|| cookie_frame(&mut cookies));
    let first_frames = [
        Some(&opening.frame[..]),
        keepalive.map(|_| &keepalive_frame[..]),
        first_cookies.as_deref(),
    ];
    for frame in first_frames.into_iter().flatten() {
        if !write_frame(&mut writer, opening.schema, frame).await {
            state.lock().await.served.edges.disconnect(id);
            return;
        }
    }
    // Until when (ms on `origin`) the edge may be silent because it compiles a snapshot.
    let origin = std::time::Instant::now();
    let grace_until = Arc::new(AtomicU64::new(millis_since(origin) + ms(SNAPSHOT_GRACE)));
    // Acknowledgements come back on the read half.
    let mut reader_task = tokio::spawn(read_acks(
        reader,
        Arc::clone(&state),
        id,
        keepalive,
        origin,
        Arc::clone(&grace_until),
    ));
    let (mut revocation, mut ticks) = link_timers(keepalive).await;
    let mut silent = None;
    // An update taken off the queue while folding health deltas, handled next.
    let mut pending: Option<Update> = None;
    loop {
        let frame = if let Some(update) = pending.take() {
            Ok(update)
        } else {
            tokio::select! {
            () = shutdown.cancelled() => break,
            // The edge went away, or went silent.
            ended = &mut reader_task => {
                silent = ended.ok().flatten();
                break;
            }
            _ = revocation.tick() => {
                if revoked(&peer, &state, id).await {
                    break;
                }
                continue;
            }
            changed = cookies.changed(), if takes_cookies => {
                if changed.is_err() || !write_frame(&mut writer, opening.schema, &cookie_frame(&mut cookies)).await {
                    break;
                }
                continue;
            }
            _ = ticks.tick(), if keepalive.is_some() => {
                // Sent once the state answers: a control whose state is stuck goes
                // silent, and its edges notice.
                drop(state.lock().await);
                if !write_frame(&mut writer, opening.schema, &keepalive_frame).await {
                    break;
                }
                continue;
            }
            frame = rx.recv() => frame,
            }
        };
        let frame = match frame {
            Ok(Update::Health(first)) => match health_frame(first, &mut rx, &mut pending, &mut sent, takes_deltas) {
                Ok(Some(frame)) => frame,
                Ok(None) => continue,
                Err(()) => break,
            },
            Ok(Update::Snapshot(update)) => match snapshot_frame(update, &mut sent, takes_deltas, &state).await {
                Some(Next::Snapshot(frame)) => {
                    // The edge compiles it before it speaks again.
                    grace_until.store(millis_since(origin) + ms(SNAPSHOT_GRACE), Ordering::Relaxed);
                    frame
                }
                Some(Next::Close) => break,
                None => continue,
            },
            // Fell behind: close; the edge reconnects and gets a full snapshot.
            Err(broadcast::error::RecvError::Lagged(_) | broadcast::error::RecvError::Closed) => break,
        };
        if !write_frame(&mut writer, opening.schema, &frame).await {
            break;
        }
    }
    reader_task.abort();
    unlist(&state, id, silent).await;
}

/// Connection `id` ended (after `silent`, when it went silent): off the list, and an
/// event.
async fn unlist(state: &Mutex<State>, id: u64, silent: Option<std::time::Duration>) {
    let mut guard = state.lock().await;
    if let Some(info) = guard.served.edges.disconnect(id) {
        match silent {
            Some(quiet) => {
                tracing::warn!(edge = %info.name, "edge silent for {quiet:?}: link dropped");
                guard.event(
                    "edge",
                    format!("edge {} silent for {} s: link dropped", info.name, quiet.as_secs()),
                );
            }
            None => guard.event("edge", format!("edge {} disconnected", info.name)),
        }
    }
}

/// The frame an update makes for one edge.
enum Next {
    Snapshot(Frame),
    /// The snapshot cannot be encoded: the link ends (the edge keeps what it serves).
    Close,
}

/// The frame for health delta `first` to an edge that was sent `sent` (moved to what
/// the frame holds); none when `sent` holds it already. For an edge that takes deltas
/// (`fold`), the health deltas queued right behind it for the same version are taken
/// too and folded into one `HealthSince` frame: a burst of changes costs a slow link
/// one frame, and the edge is current after it. An update of another kind taken off the
/// queue goes to `pending`. `Err` when the queue overflowed (the edge resumes on
/// reconnect).
fn health_frame(
    first: HealthUpdate,
    rx: &mut broadcast::Receiver<Update>,
    pending: &mut Option<Update>,
    sent: &mut (u64, u64),
    fold: bool,
) -> Result<Option<Frame>, ()> {
    let mut run = vec![first];
    if fold {
        loop {
            match rx.try_recv() {
                Ok(Update::Health(next)) if next.version == run[0].version => run.push(next),
                Ok(other) => {
                    *pending = Some(other);
                    break;
                }
                Err(broadcast::error::TryRecvError::Lagged(_)) => return Err(()),
                Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed) => break,
            }
        }
    }
    run.retain(|h| (h.version, h.seq) > *sent);
    let (Some(head), Some(last)) = (run.first(), run.last()) else {
        return Ok(None);
    };
    if run.len() == 1 || sent.0 != head.version || sent.1 + 1 != head.seq {
        *sent = (head.version, head.seq);
        return Ok(Some(Arc::clone(&head.frame)));
    }
    let mut words = std::collections::BTreeMap::new();
    for health in &run {
        words.extend(health.words.iter().copied());
    }
    let folded = protocol::ToEdge::HealthSince {
        since: sent.1,
        delta: protocol::HealthDelta {
            snapshot: last.version,
            seq: last.seq,
            words: words.into_iter().collect(),
        },
    };
    *sent = (last.version, last.seq);
    protocol::encode(&folded)
        .map(|frame| Some(Arc::new(frame)))
        .map_err(|_| ())
}

/// The frame a new snapshot version makes for an edge that was sent snapshot version and
/// health delta `sent` (moved to what this frame holds): none when what was sent holds
/// it already; the delta when the edge takes deltas and was sent its base, else whole
/// (the current snapshot, which may be later than the update: later updates it holds
/// are then skipped).
async fn snapshot_frame(
    update: SnapshotUpdate,
    sent: &mut (u64, u64),
    takes_deltas: bool,
    state: &Mutex<State>,
) -> Option<Next> {
    let SnapshotUpdate {
        base,
        version,
        seq,
        delta,
    } = update;
    if (version, seq) <= *sent {
        return None;
    }
    if let Some(delta) = delta.filter(|_| takes_deltas && sent.0 == base) {
        *sent = (version, seq);
        return Some(Next::Snapshot(delta));
    }
    let mut guard = state.lock().await;
    let state = &mut *guard;
    match state
        .served
        .edges
        .snapshot_frame(&state.served.snapshot, state.served.seq)
    {
        Ok(frame) => {
            *sent = (state.served.snapshot.version, state.served.seq);
            Some(Next::Snapshot(frame))
        }
        Err(err) => {
            tracing::error!(%err, "cannot encode the snapshot");
            Some(Next::Close)
        }
    }
}

/// Reads edge `id`'s acknowledgements and reports into the state until it closes, says
/// something it may not, or — with `keepalive` — is silent for `KEEPALIVE_MISSES`
/// intervals outside a snapshot's grace (`grace_until`, ms on `origin`): then how long.
async fn read_acks<R: AsyncRead + Unpin>(
    mut reader: R,
    state: Arc<Mutex<State>>,
    id: u64,
    keepalive: Option<std::time::Duration>,
    origin: std::time::Instant,
    grace_until: Arc<AtomicU64>,
) -> Option<std::time::Duration> {
    loop {
        let msg = match keepalive {
            None => read_message(&mut reader).await,
            Some(every) => {
                let silent_for = every * protocol::KEEPALIVE_MISSES;
                match tokio::time::timeout(silent_for, read_message(&mut reader)).await {
                    Ok(msg) => msg,
                    Err(_) if millis_since(origin) < grace_until.load(Ordering::Relaxed) => continue,
                    Err(_) => return Some(silent_for),
                }
            }
        };
        let msg = msg?;
        let mut guard = state.lock().await;
        let info = guard.served.edges.get_mut(id)?;
        match msg {
            // Said once, before the snapshot.
            ToControl::Hello { .. } => return None,
            ToControl::Applied { snapshot, seq } => {
                info.snapshot = Some(snapshot);
                info.seq = seq;
                // It compiled what it was sent: silence counts again.
                grace_until.store(0, Ordering::Relaxed);
            }
            ToControl::Xdp(report) => info.xdp = Some(report),
            ToControl::Keepalive => {}
        }
    }
}

fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use qdns_link::protocol::{self, ToEdge};
    use tokio::sync::broadcast;

    use super::{health_frame, HealthUpdate, Update};

    fn health(version: u64, seq: u64, words: Vec<(u32, u64)>) -> HealthUpdate {
        let frame = protocol::encode(&ToEdge::Health(protocol::HealthDelta {
            snapshot: version,
            seq,
            words: words.clone(),
        }))
        .unwrap();
        HealthUpdate {
            version,
            seq,
            frame: Arc::new(frame),
            words: Arc::new(words),
        }
    }

    fn decoded(frame: &[u8]) -> ToEdge {
        protocol::decode_to_edge(&frame[4..]).unwrap().1
    }

    #[test]
    fn queued_health_deltas_fold_into_one_frame_for_an_edge_that_takes_deltas() {
        let (tx, mut rx) = broadcast::channel(16);
        for (seq, word) in [(4, (0, 1)), (5, (1, 2)), (6, (0, 3))] {
            tx.send(Update::Health(health(7, seq, vec![word]))).unwrap();
        }
        tx.send(Update::Snapshot(super::SnapshotUpdate {
            base: 7,
            version: 8,
            seq: 0,
            delta: None,
        }))
        .unwrap();
        let (mut pending, mut sent) = (None, (7, 2));
        let first = health(7, 3, vec![(2, 9)]);
        let frame = health_frame(first, &mut rx, &mut pending, &mut sent, true)
            .unwrap()
            .unwrap();
        let ToEdge::HealthSince { since, delta } = decoded(&frame) else {
            panic!("a folded frame")
        };
        assert_eq!((since, delta.snapshot, delta.seq), (2, 7, 6));
        assert_eq!(delta.words, [(0, 3), (1, 2), (2, 9)], "each word's latest value");
        assert_eq!(sent, (7, 6));
        assert!(
            matches!(
                pending,
                Some(Update::Snapshot(super::SnapshotUpdate { version: 8, .. }))
            ),
            "kept for next"
        );
    }

    #[test]
    fn an_old_edge_gets_each_delta_and_nothing_it_holds_already() {
        let (tx, mut rx) = broadcast::channel(16);
        tx.send(Update::Health(health(7, 4, vec![(0, 1)]))).unwrap();
        let (mut pending, mut sent) = (None, (7, 2));
        let frame = health_frame(health(7, 3, vec![(0, 2)]), &mut rx, &mut pending, &mut sent, false)
            .unwrap()
            .unwrap();
        assert!(matches!(decoded(&frame), ToEdge::Health(d) if d.seq == 3));
        assert_eq!(sent, (7, 3));
        // Already held (a whole snapshot taken at seq 5): skipped.
        sent = (7, 5);
        let again = health_frame(health(7, 4, vec![(0, 1)]), &mut rx, &mut pending, &mut sent, true).unwrap();
        assert!(again.is_none());
    }
}
