//! Serving snapshots to edges (SPEC §1 `--edge-socket`, Unix path or `tcp://`): a full
//! snapshot on connect, then every health delta and every reload as they happen. Edges
//! acknowledge what they applied; `status` shows it.
use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use qdns_zone::sync::{self, ToControl, ToEdge};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    sync::{broadcast, Mutex},
};
use tokio_util::sync::CancellationToken;

use crate::state::{now, EdgeInfo, State};

/// An encoded frame for every edge.
pub type Frame = Arc<Vec<u8>>;

/// Largest message an edge sends control (its XDP report is a few KiB).
pub const MAX_FROM_EDGE: usize = 1 << 20;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Serves one edge connection until it closes or `shutdown`.
pub async fn serve_edge<R, W>(
    mut reader: R,
    mut writer: W,
    state: Arc<Mutex<State>>,
    updates: broadcast::Sender<Frame>,
    shutdown: CancellationToken,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin,
{
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    // Subscribe and take the snapshot under one lock, so no delta falls between them.
    let (full, mut rx) = {
        let guard = state.lock().await;
        let rx = updates.subscribe();
        match sync::encode(&ToEdge::Snapshot {
            snapshot: Box::new((*guard.snapshot).clone()),
            seq: guard.seq,
        }) {
            Ok(frame) => (frame, rx),
            Err(err) => {
                tracing::error!(%err, "cannot encode the snapshot");
                return;
            }
        }
    };
    if writer.write_all(&full).await.is_err() || writer.flush().await.is_err() {
        return;
    }
    // Acknowledgements come back on the read half.
    let acks_state = Arc::clone(&state);
    let mut reader_task = tokio::spawn(async move {
        loop {
            let mut prefix = [0u8; 4];
            if reader.read_exact(&mut prefix).await.is_err() {
                break;
            }
            // An edge's messages are small (hello, acknowledgements, XDP counters): a
            // larger length ends the connection before anything is allocated, and the
            // buffer grows only with octets that arrive.
            let Ok(len) = sync::frame_len(prefix) else { break };
            if len > MAX_FROM_EDGE {
                tracing::warn!(len, "edge frame over {MAX_FROM_EDGE} octets: closing");
                break;
            }
            let mut body = Vec::new();
            match (&mut reader).take(len as u64).read_to_end(&mut body).await {
                Ok(n) if n == len => {}
                _ => break,
            }
            let Ok(msg) = sync::decode::<ToControl>(&body) else {
                break;
            };
            let mut guard = acks_state.lock().await;
            match msg {
                ToControl::Hello { edge, serving } => {
                    guard.event("edge", format!("edge {edge} connected (serving {serving:?})"));
                    guard.edges.insert(
                        id,
                        EdgeInfo {
                            name: edge,
                            snapshot: serving,
                            seq: 0,
                            connected_at: now(),
                            xdp: None,
                        },
                    );
                }
                ToControl::Applied { snapshot, seq } => {
                    if let Some(info) = guard.edges.get_mut(&id) {
                        info.snapshot = Some(snapshot);
                        info.seq = seq;
                    }
                }
                ToControl::Xdp(report) => {
                    if let Some(info) = guard.edges.get_mut(&id) {
                        info.xdp = Some(report);
                    }
                }
            }
        }
    });
    loop {
        let frame = tokio::select! {
            () = shutdown.cancelled() => break,
            _ = &mut reader_task => break, // the edge went away
            frame = rx.recv() => frame,
        };
        match frame {
            Ok(frame) => {
                if writer.write_all(&frame).await.is_err() || writer.flush().await.is_err() {
                    break;
                }
            }
            // Fell behind: close; the edge reconnects and gets a full snapshot.
            Err(broadcast::error::RecvError::Lagged(_) | broadcast::error::RecvError::Closed) => break,
        }
    }
    reader_task.abort();
    let mut guard = state.lock().await;
    if let Some(info) = guard.edges.remove(&id) {
        guard.event("edge", format!("edge {} disconnected", info.name));
    }
}
