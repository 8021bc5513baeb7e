//! `/metrics` (and the pages beside it: control's `/status`, the edge's `/ready`) over
//! HTTP/1.1 for both daemons, bounded before a byte is parsed:
//! [`MAX_METRICS_CONNECTIONS`] in all and [`MAX_METRICS_PER_SOURCE`] per address (a
//! [`Pool`] in which every connection is evictable: under a flood the oldest goes, so a
//! scraper that connects gets its scrape), [`METRICS_HEADER_TIMEOUT`] for each request
//! head of at most [`METRICS_MAX_HEAD`] octets, [`METRICS_CONNECTION_LIFETIME`] per
//! connection.
use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{server::conn::http1, service::service_fn, Method, Response};
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

/// A `GET` (or `HEAD`) request: its path and query string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Get {
    /// The path (`/metrics`).
    pub path: String,
    /// The query string after `?`, if any (not decoded).
    pub query: Option<String>,
    /// Who asks (a page may answer some things to this host only).
    pub peer: std::net::IpAddr,
}

impl Get {
    /// True when the request comes from this host's loopback (an IPv4-mapped one too).
    #[must_use]
    pub fn from_loopback(&self) -> bool {
        self.peer.to_canonical().is_loopback()
    }
}

impl Get {
    /// The value of `key` in the query string (`+` and `%XX` decoded; a malformed
    /// escape is kept as written).
    #[must_use]
    pub fn param(&self, key: &str) -> Option<String> {
        self.query.as_deref()?.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == key).then(|| percent_decode(v))
        })
    }
}

/// `+` as a space and `%XX` as its octet; the result read as UTF-8 (lossily).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(octet) => {
                        out.push(octet);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A response: status, content type and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// HTTP status.
    pub status: u16,
    /// `content-type`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl Page {
    /// `OpenMetrics` text.
    #[must_use]
    pub fn metrics(body: String) -> Page {
        Page {
            status: 200,
            content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
            body,
        }
    }

    /// An HTML document.
    #[must_use]
    pub fn html(body: String) -> Page {
        Page {
            status: 200,
            content_type: "text/html; charset=utf-8",
            body,
        }
    }

    /// Plain text with `status`.
    #[must_use]
    pub fn text(status: u16, body: impl Into<String>) -> Page {
        Page {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }
}

/// Serves `/metrics` with the text `render` produces at each scrape (`OpenMetrics`
/// content type), and 404 elsewhere, until `shutdown`.
pub async fn serve_text<F, Fut>(listener: TcpListener, render: F, shutdown: CancellationToken)
where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = String> + Send + 'static,
{
    serve_pages(
        listener,
        move |get: Get| {
            let render = render.clone();
            async move {
                if get.path == "/metrics" {
                    Page::metrics(render().await)
                } else {
                    Page::text(404, "see /metrics\n")
                }
            }
        },
        shutdown,
    )
    .await;
}

/// Serves what `route` makes of each `GET` or `HEAD` (other methods: 405) until
/// `shutdown`, under the limits above.
pub async fn serve_pages<F, Fut>(listener: TcpListener, route: F, shutdown: CancellationToken)
where
    F: Fn(Get) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Page> + Send + 'static,
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
        let route = route.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let route = route.clone();
                async move {
                    let page = if matches!(*request.method(), Method::GET | Method::HEAD) {
                        route(Get {
                            path: request.uri().path().to_owned(),
                            query: request.uri().query().map(str::to_owned),
                            peer: peer.ip(),
                        })
                        .await
                    } else {
                        Page::text(405, "GET only\n")
                    };
                    let response = Response::builder()
                        .status(page.status)
                        .header("content-type", page.content_type)
                        .header("cache-control", "no-store")
                        .body(Full::new(Bytes::from(page.body)));
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

#[cfg(test)]
mod tests {
    use super::Get;

    #[test]
    fn query_parameters_are_decoded() {
        let get = Get {
            path: "/status".into(),
            query: Some("name=www.example.com.&type=A&q=a+b%2Fc&bad=%zz&last=%4".into()),
            peer: std::net::Ipv4Addr::LOCALHOST.into(),
        };
        assert_eq!(get.param("name").as_deref(), Some("www.example.com."));
        assert_eq!(get.param("type").as_deref(), Some("A"));
        assert_eq!(get.param("q").as_deref(), Some("a b/c"));
        assert_eq!(get.param("bad").as_deref(), Some("%zz"));
        assert_eq!(get.param("last").as_deref(), Some("%4"));
        assert_eq!(get.param("none"), None);
        assert_eq!(
            Get {
                path: "/".into(),
                query: None,
                peer: std::net::Ipv4Addr::LOCALHOST.into(),
            }
            .param("name"),
            None
        );
    }
}
