//! DNS over TCP (RFC 1035 §4.2.2, RFC 7766): two-octet length framing, pipelined queries
//! answered in order on each connection, an idle timeout (on reads and on writes to a
//! client that stops reading), and caps on connections in all and per source address.
//! When every place is taken, a new connection takes that of the oldest connection
//! waiting for (or part-way through) a query, which is closed (RFC 7766 §6.2.3 lets a
//! server close idle connections under pressure); one being answered is never cut.
use std::{sync::Arc, time::Duration};

use arc_swap::ArcSwap;
use qdns_listen::{Limits, Pool, Ticket};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter},
    net::{TcpListener, TcpStream},
    task::JoinSet,
};
use tokio_util::sync::CancellationToken;

use crate::{engine::MAX_MESSAGE, stats::WorkerStats, Engine, Transport};

/// TCP limits (RFC 7766 §6.2.3 asks servers to bound both).
#[derive(Clone, Copy, Debug)]
pub struct TcpLimits {
    /// Close a connection idle for this long.
    pub idle_timeout: Duration,
    /// Connections served at once; past it a new connection replaces the oldest idle
    /// one, or is closed at once (counted as dropped) when none is idle.
    pub max_connections: usize,
    /// Connections from one source at once; more are closed at once (counted as
    /// dropped), so one source cannot take every slot.
    pub max_per_source: usize,
    /// The prefix lengths one source covers: IPv4, IPv6.
    pub source_prefixes: (u8, u8),
}

/// Accepts connections on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    engine: Arc<ArcSwap<Engine>>,
    stats: Arc<WorkerStats>,
    limits: TcpLimits,
    tap: Option<Arc<crate::dnstap::Tap>>,
    shutdown: CancellationToken,
) {
    let pool = Pool::new(Limits {
        total: limits.max_connections,
        per_source: limits.max_per_source,
    })
    .with_source_prefixes(limits.source_prefixes.0, limits.source_prefixes.1);
    let mut connections = JoinSet::new();
    loop {
        let Some((stream, peer)) = qdns_listen::accept_tcp(&listener, &shutdown).await else {
            break;
        };
        let admitted = pool.admit(peer.ip());
        stats
            .evicted
            .store(pool.evictions(), std::sync::atomic::Ordering::Relaxed);
        let ticket = match admitted {
            Ok(ticket) => ticket,
            Err(refusal) => {
                stats.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::debug!(%peer, reason = refusal.label(), "tcp: connection refused");
                continue;
            }
        };
        let engine = Arc::clone(&engine);
        let stats = Arc::clone(&stats);
        let shutdown = shutdown.clone();
        let tap = tap.clone();
        connections.spawn(async move {
            let mut ticket = ticket;
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = connection(stream, peer, &engine, &stats, limits.idle_timeout, &mut ticket, tap.as_deref()) => {}
            }
        });
        while connections.try_join_next().is_some() {}
    }
    connections.shutdown().await;
}

/// Serves one connection: reads framed queries, writes framed responses in order.
async fn connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    engine: &ArcSwap<Engine>,
    stats: &WorkerStats,
    idle: Duration,
    ticket: &mut Ticket,
    tap: Option<&crate::dnstap::Tap>,
) {
    let client = peer.ip();
    let local = stream
        .local_addr()
        .unwrap_or_else(|_| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
    let _ = stream.set_nodelay(true);
    let (read, write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut writer = BufWriter::new(write);
    // Buffers grow with what the client sends: a connection that never sends a query
    // costs only its reader's and writer's 8 KiB.
    let mut query: Vec<u8> = Vec::new();
    let mut response: Vec<u8> = Vec::new();
    loop {
        // The idle timeout covers waiting for a query and reading it whole; meanwhile
        // the connection may be evicted for a newcomer.
        ticket.set_evictable(true);
        let read = tokio::select! {
            () = ticket.evicted() => break,
            read = tokio::time::timeout(idle, async {
                let len = usize::from(reader.read_u16().await?);
                if query.len() < len {
                    query.resize(len, 0);
                }
                let buf = query.get_mut(..len).ok_or(std::io::ErrorKind::InvalidData)?;
                reader.read_exact(buf).await?;
                Ok::<usize, std::io::Error>(len)
            }) => read,
        };
        let Ok(Ok(len)) = read else { break };
        let received = tap.map(|_| std::time::SystemTime::now());
        ticket.set_evictable(false);
        if response.is_empty() {
            response.resize(MAX_MESSAGE + 2, 0);
        }
        let engine = engine.load();
        let (framed, body) = response.split_at_mut(2);
        let outcome = engine.respond_to(query.get(..len).unwrap_or_default(), body, Transport::Tcp, client);
        stats.count(outcome);
        let Some(outcome) = outcome else { continue };
        framed.copy_from_slice(&(outcome.len as u16).to_be_bytes());
        if let (Some(tap), Some(received)) = (tap, received) {
            tap.log(crate::dnstap::Event {
                query: query.get(..len).unwrap_or_default().into(),
                response: body.get(..outcome.len).unwrap_or_default().into(),
                client: peer,
                server: local,
                transport: Transport::Tcp,
                received,
                answered: std::time::SystemTime::now(),
                members: outcome.members,
            });
        }
        // Flush once no further pipelined query is already buffered. A client that
        // stops reading gets the idle timeout here too.
        let flush = reader.buffer().is_empty();
        let written = tokio::time::timeout(idle, async {
            writer
                .write_all(response.get(..outcome.len + 2).unwrap_or_default())
                .await?;
            if flush {
                writer.flush().await?;
            }
            Ok::<(), std::io::Error>(())
        })
        .await;
        if !matches!(written, Ok(Ok(()))) {
            return;
        }
    }
    let _ = tokio::time::timeout(idle, writer.flush()).await;
}
