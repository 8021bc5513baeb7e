//! DNS over TCP (RFC 1035 §4.2.2, RFC 7766): two-octet length framing, pipelined queries
//! answered in order on each connection, an idle timeout, and caps on connections in
//! all and per source address.
use std::{sync::Arc, time::Duration};

use arc_swap::ArcSwap;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
    task::JoinSet,
};
use tokio_util::sync::CancellationToken;

use super::slots::BySource;
use crate::{engine::MAX_MESSAGE, stats::WorkerStats, Engine, Transport};

/// TCP limits (RFC 7766 §6.2.3 asks servers to bound both).
#[derive(Clone, Copy, Debug)]
pub struct TcpLimits {
    /// Close a connection idle for this long.
    pub idle_timeout: Duration,
    /// Connections served at once; more wait in the accept queue.
    pub max_connections: usize,
    /// Connections from one address at once; more are closed at once (counted as
    /// dropped), so one source cannot take every slot.
    pub max_per_source: usize,
}

/// Accepts connections on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    engine: Arc<ArcSwap<Engine>>,
    stats: Arc<WorkerStats>,
    limits: TcpLimits,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let by_source = BySource::default();
    let mut connections = JoinSet::new();
    loop {
        let acquired = tokio::select! {
            () = shutdown.cancelled() => break,
            permit = Arc::clone(&permits).acquire_owned() => permit,
        };
        let Ok(permit) = acquired else { break };
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::debug!(%err, "tcp accept failed");
                continue;
            }
        };
        let Some(slot) = by_source.take(peer.ip(), limits.max_per_source) else {
            stats.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!(%peer, "tcp: source at its connection cap; closed");
            continue;
        };
        let engine = Arc::clone(&engine);
        let stats = Arc::clone(&stats);
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = connection(stream, &engine, &stats, limits.idle_timeout) => {}
            }
            drop(slot);
            drop(permit);
        });
        while connections.try_join_next().is_some() {}
    }
    connections.shutdown().await;
}

/// Serves one connection: reads framed queries, writes framed responses in order.
async fn connection(stream: TcpStream, engine: &ArcSwap<Engine>, stats: &WorkerStats, idle: Duration) {
    let _ = stream.set_nodelay(true);
    let (read, write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut writer = BufWriter::new(write);
    let mut query = vec![0u8; MAX_MESSAGE];
    let mut response = vec![0u8; MAX_MESSAGE + 2];
    loop {
        // The idle timeout covers waiting for a query and reading it whole.
        let read = tokio::time::timeout(idle, async {
            let len = usize::from(reader.read_u16().await?);
            let buf = query.get_mut(..len).ok_or(std::io::ErrorKind::InvalidData)?;
            reader.read_exact(buf).await?;
            Ok::<usize, std::io::Error>(len)
        })
        .await;
        let Ok(Ok(len)) = read else { break };
        let engine = engine.load();
        let (framed, body) = response.split_at_mut(2);
        let outcome = engine.respond(query.get(..len).unwrap_or_default(), body, Transport::Tcp);
        stats.count(outcome);
        let Some(outcome) = outcome else { continue };
        framed.copy_from_slice(&(outcome.len as u16).to_be_bytes());
        if writer
            .write_all(response.get(..outcome.len + 2).unwrap_or_default())
            .await
            .is_err()
        {
            break;
        }
        // Flush once no further pipelined query is already buffered.
        if reader.buffer().is_empty() && writer.flush().await.is_err() {
            break;
        }
    }
    let _ = writer.flush().await;
}
