//! `/metrics` over HTTP/1.1 for both daemons, bounded before a byte is parsed:
//! [`MAX_METRICS_CONNECTIONS`] in all and [`MAX_METRICS_PER_SOURCE`] per address (a
//! [`Pool`] in which every connection is evictable: under a flood the oldest goes, so a
//! scraper that connects gets its scrape), [`METRICS_HEADER_TIMEOUT`] for each request
//! head of at most [`METRICS_MAX_HEAD`] octets, [`METRICS_CONNECTION_LIFETIME`] per
//! connection.
use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{server::conn::http1, service::service_fn, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::pool::{Limits, Pool};

/// Most metrics connections at once: scrapers are few.
pub const MAX_METRICS_CONNECTIONS: usize = 64;
/// Most metrics connections from one address.
pub const MAX_METRICS_PER_SOURCE: usize = 16;
/// Longest wait for a request's headers (on a kept-alive connection too: an idle
/// connection is closed after this).
pub const METRICS_HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Longest a metrics connection lives (a scraper reconnects).
pub const METRICS_CONNECTION_LIFETIME: std::time::Duration = std::time::Duration::from_secs(300);
/// Largest request head read (octets).
pub const METRICS_MAX_HEAD: usize = 16 * 1024;

/// Serves `/metrics` with the text `render` produces at each scrape (`OpenMetrics`
/// content type), and 404 elsewhere, until `shutdown`.
pub async fn serve_text<F, Fut>(listener: TcpListener, render: F, shutdown: CancellationToken)
where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = String> + Send + 'static,
{
    let pool = Pool::new(Limits {
        total: MAX_METRICS_CONNECTIONS,
        per_source: MAX_METRICS_PER_SOURCE,
    });
    loop {
        let Some((stream, peer)) = crate::accept_tcp(&listener, &shutdown).await else {
            return;
        };
        let ticket = match pool.admit(peer.ip()) {
            Ok(ticket) => ticket,
            Err(refusal) => {
                tracing::debug!(%peer, reason = refusal.label(), "metrics: connection refused");
                continue;
            }
        };
        let render = render.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let render = render.clone();
                async move {
                    let response = if request.uri().path() == "/metrics" {
                        Response::builder()
                            .header(
                                "content-type",
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )
                            .body(Full::new(Bytes::from(render().await)))
                    } else {
                        Response::builder()
                            .status(404)
                            .body(Full::new(Bytes::from_static(b"see /metrics\n")))
                    };
                    Ok::<_, Infallible>(response.unwrap_or_else(|_| Response::new(Full::new(Bytes::new()))))
                }
            });
            let connection = http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(METRICS_HEADER_TIMEOUT)
                .max_buf_size(METRICS_MAX_HEAD)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = ticket.evicted() => {}
                _ = tokio::time::timeout(METRICS_CONNECTION_LIFETIME, connection) => {}
            }
        });
    }
}
