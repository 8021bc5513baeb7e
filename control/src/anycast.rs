//! `qdnsctl anycast`: announce an edge's service prefix by BGP only while the edge is
//! ready, by enabling and disabling a BIRD 2 protocol over BIRD's control socket.
//!
//! Why a watchdog beside the edge, and why BIRD's socket:
//! - The edge cannot withdraw its own route when it dies: a process that was killed,
//!   hangs, or lost its sockets writes nothing. A separate, small process that *asks*
//!   the edge — `/ready` on its metrics listener, and a real DNS query to the service
//!   address — sees all of those, and withdraws.
//! - `enable`/`disable` of a `static` protocol holding the prefix is BIRD's own runtime
//!   switch: no configuration file is rewritten, no `birdc configure` can fail half-way,
//!   and the route's attributes stay in BIRD's configuration where the network team
//!   keeps them. The protocol should be configured `disabled yes`, so a BIRD that starts
//!   before the watchdog announces nothing.
//! - The state is re-asserted on every tick (an `enable` of an enabled protocol is a
//!   no-op answered `0010`), so a BIRD restart is corrected within one interval.
//! - Stopping the watchdog (SIGTERM, SIGINT) withdraws first: nothing watches the edge
//!   any more.
//!
//! A prefix is announced after `rise` ticks in a row found the edge ready, and withdrawn
//! after `fall` ticks in a row did not (so one lost probe does not flap the route).
use std::{
    net::SocketAddr,
    path::PathBuf,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::{TcpStream, UdpSocket, UnixStream},
    time::timeout,
};
use tokio_util::sync::CancellationToken;

/// Longest reply line read from BIRD, and most lines in one reply.
const BIRD_MAX_LINE: usize = 4096;
const BIRD_MAX_LINES: usize = 64;
/// Most octets of a `/ready` response read.
const READY_MAX_RESPONSE: usize = 4096;

/// Why the watchdog could not start or withdraw, why the edge is not ready, or why
/// BIRD did not switch the protocol.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnycastError {
    /// Neither `--ready` nor `--probe` was given.
    #[error("give --ready, --probe or both: with neither, nothing is watched")]
    NothingWatched,
    /// The protocol could not be disabled when the watchdog stopped.
    #[error("could not withdraw {protocol} on stopping: {source}")]
    NotWithdrawn {
        /// The BIRD protocol.
        protocol: String,
        /// Why BIRD did not switch it.
        #[source]
        source: Box<AnycastError>,
    },
    /// A `--ready` URL that is not `http://`.
    #[error("{url}: only http://ADDR:PORT/PATH is supported")]
    UrlScheme {
        /// The URL given.
        url: String,
    },
    /// A `--ready` URL whose authority is not an IP address and port.
    #[error("{url}: {authority} is not an IP address and port")]
    UrlAddress {
        /// The URL given.
        url: String,
        /// Its authority.
        authority: String,
    },
    /// A `--ready` URL whose path has spaces or control characters.
    #[error("{url}: the path has spaces or control characters")]
    UrlPath {
        /// The URL given.
        url: String,
    },
    /// BIRD did not answer within the timeout.
    #[error("BIRD did not answer in time")]
    BirdTimeout,
    /// BIRD's control socket cannot be reached.
    #[error("cannot connect to {}: {source}", .socket.display())]
    BirdConnect {
        /// The control socket.
        socket: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// BIRD's first reply was not its greeting.
    #[error("unexpected greeting {0:?}")]
    BirdGreeting(Vec<(u16, String)>),
    /// The command could not be written to BIRD.
    #[error("cannot write to BIRD: {0}")]
    BirdWrite(#[source] std::io::Error),
    /// BIRD's reply could not be read.
    #[error("reading BIRD's reply: {0}")]
    BirdRead(#[source] std::io::Error),
    /// BIRD closed the connection before its reply ended.
    #[error("BIRD closed the connection")]
    BirdClosed,
    /// BIRD's reply had more lines than are read.
    #[error("BIRD's reply ran past {} lines", BIRD_MAX_LINES)]
    BirdReplyTooLong,
    /// BIRD answered the command with codes that do not mean the wanted state.
    #[error("`{command} {protocol}` answered {}", bird_text(.reply))]
    BirdRefused {
        /// `enable` or `disable`.
        command: &'static str,
        /// The protocol.
        protocol: String,
        /// BIRD's reply: code and text of each line.
        reply: Vec<(u16, String)>,
    },
    /// The readiness URL did not answer within the timeout.
    #[error("{addr}{path}: no response within {timeout:?}")]
    ReadyTimeout {
        /// Where.
        addr: SocketAddr,
        /// The path.
        path: String,
        /// The limit.
        timeout: Duration,
    },
    /// The readiness URL's address refused or failed the connection.
    #[error("{addr}{path}: {source}")]
    ReadyConnect {
        /// Where.
        addr: SocketAddr,
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The request could not be sent or the response read.
    #[error("{addr}: {source}")]
    ReadyExchange {
        /// Where.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The readiness URL answered other than 200.
    #[error("{addr}{path} answered {status}: {body}")]
    NotReady {
        /// Where.
        addr: SocketAddr,
        /// The path.
        path: String,
        /// The HTTP status (as sent).
        status: String,
        /// The first line of the body.
        body: String,
    },
    /// The probe name is not a domain name.
    #[error("{0}")]
    ProbeName(String),
    /// No UDP socket for the probe.
    #[error("DNS probe socket: {0}")]
    ProbeSocket(#[source] std::io::Error),
    /// The probe could not be sent or its answer received.
    #[error("DNS probe of {addr}: {source}")]
    Probe {
        /// The service address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The probe got no answer within the timeout.
    #[error("DNS probe of {addr}: no answer within {timeout:?}")]
    ProbeTimeout {
        /// The service address.
        addr: SocketAddr,
        /// The limit.
        timeout: Duration,
    },
    /// The probe's answer was not an authoritative NOERROR with an answer.
    #[error("DNS probe of {addr}: {name} SOA answered rcode {rcode}, AA {aa}, {answers} answers")]
    ProbeAnswer {
        /// The service address.
        addr: SocketAddr,
        /// The name asked for.
        name: String,
        /// The response code.
        rcode: u8,
        /// Whether the answer was authoritative.
        aa: bool,
        /// How many answer records.
        answers: u16,
    },
}

/// A BIRD reply as one line: `CODE text / CODE text`.
fn bird_text(reply: &[(u16, String)]) -> String {
    reply
        .iter()
        .map(|(code, text)| format!("{code:04} {text}"))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// What to watch and what to switch.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The edge's readiness endpoint (`/ready` on its `--metrics` address), if checked.
    pub ready: Option<ReadyUrl>,
    /// A service address the edge answers on, probed with a SOA query, if probed.
    pub probe: Option<SocketAddr>,
    /// The zone apex asked for in the probe (the answer must be authoritative NOERROR).
    pub probe_name: String,
    /// BIRD's control socket.
    pub bird_socket: PathBuf,
    /// The BIRD protocol holding the prefix.
    pub protocol: String,
    /// Time between checks.
    pub interval: Duration,
    /// Limit on each check and each BIRD exchange.
    pub timeout: Duration,
    /// Good checks in a row before announcing.
    pub rise: u32,
    /// Bad checks in a row before withdrawing.
    pub fall: u32,
}

/// `http://ADDR:PORT/PATH` (an IP literal: the watchdog resolves nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyUrl {
    /// Where to connect.
    pub addr: SocketAddr,
    /// The path (`/ready`).
    pub path: String,
}

impl std::str::FromStr for ReadyUrl {
    type Err = AnycastError;

    fn from_str(text: &str) -> Result<ReadyUrl, AnycastError> {
        let rest = text
            .strip_prefix("http://")
            .ok_or_else(|| AnycastError::UrlScheme { url: text.to_owned() })?;
        let (authority, path) = rest
            .split_once('/')
            .map_or((rest, "/ready".to_owned()), |(a, p)| (a, format!("/{p}")));
        let addr = authority.parse().map_err(|_| AnycastError::UrlAddress {
            url: text.to_owned(),
            authority: authority.to_owned(),
        })?;
        if path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            return Err(AnycastError::UrlPath { url: text.to_owned() });
        }
        Ok(ReadyUrl { addr, path })
    }
}

/// Announce or withdraw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `enable PROTOCOL`.
    Announced,
    /// `disable PROTOCOL`.
    Withdrawn,
}

impl Route {
    fn command(self) -> &'static str {
        match self {
            Route::Announced => "enable",
            Route::Withdrawn => "disable",
        }
    }

    /// BIRD's reply codes that mean the protocol is now in this state.
    fn accepts(self, code: u16) -> bool {
        match self {
            Route::Announced => matches!(code, 10 | 11), // already enabled, enabled
            Route::Withdrawn => matches!(code, 8 | 9),   // already disabled, disabled
        }
    }
}

/// Rise/fall hysteresis: what the route should be after each check.
#[derive(Debug, Clone)]
pub struct Hysteresis {
    rise: u32,
    fall: u32,
    good: u32,
    bad: u32,
    route: Route,
}

impl Hysteresis {
    /// Starts withdrawn: nothing is announced before `rise` good checks.
    #[must_use]
    pub fn new(rise: u32, fall: u32) -> Hysteresis {
        Hysteresis {
            rise: rise.max(1),
            fall: fall.max(1),
            good: 0,
            bad: 0,
            route: Route::Withdrawn,
        }
    }

    /// Records one check; the route it leads to.
    pub fn observe(&mut self, ready: bool) -> Route {
        if ready {
            self.good = self.good.saturating_add(1);
            self.bad = 0;
            if self.good >= self.rise {
                self.route = Route::Announced;
            }
        } else {
            self.bad = self.bad.saturating_add(1);
            self.good = 0;
            if self.bad >= self.fall {
                self.route = Route::Withdrawn;
            }
        }
        self.route
    }
}

/// Runs until `shutdown`, then withdraws. Errors only on settings that cannot work.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> Result<(), AnycastError> {
    if settings.ready.is_none() && settings.probe.is_none() {
        return Err(AnycastError::NothingWatched);
    }
    let mut hysteresis = Hysteresis::new(settings.rise, settings.fall);
    let mut shown: Option<(Route, String)> = None;
    let mut bird_error: Option<String> = None;
    // Withdrawn until the edge proves itself.
    let _ = switch(&settings, Route::Withdrawn, &mut bird_error).await;
    let mut tick = tokio::time::interval(settings.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        let verdict = check(&settings).await;
        let route = hysteresis.observe(verdict.is_ok());
        let why = match &verdict {
            Ok(why) if route == Route::Withdrawn => format!(
                "{} of {} passing checks in a row so far: {why}",
                hysteresis.good, hysteresis.rise
            ),
            Ok(why) => why.clone(),
            Err(why) => why.to_string(),
        };
        if switch(&settings, route, &mut bird_error).await.is_ok() {
            let changed = shown.as_ref().is_none_or(|(r, _)| *r != route);
            if changed {
                match route {
                    Route::Announced => tracing::info!(protocol = %settings.protocol, %why, "announcing"),
                    Route::Withdrawn => tracing::warn!(protocol = %settings.protocol, %why, "withdrawn"),
                }
                shown = Some((route, why));
            }
        }
    }
    tracing::info!(protocol = %settings.protocol, "stopping: withdrawing");
    switch(&settings, Route::Withdrawn, &mut bird_error)
        .await
        .map_err(|source| AnycastError::NotWithdrawn {
            protocol: settings.protocol.clone(),
            source: Box::new(source),
        })
}

/// Asks BIRD to put the protocol in `route`'s state; logs a failure once until its
/// message (kept in `last_error`) changes. Ok when BIRD confirmed.
async fn switch(settings: &Settings, route: Route, last_error: &mut Option<String>) -> Result<(), AnycastError> {
    match timeout(settings.timeout, bird(settings, route)).await {
        Ok(Ok(())) => {
            if last_error.take().is_some() {
                tracing::info!(protocol = %settings.protocol, "BIRD reachable again");
            }
            Ok(())
        }
        Ok(Err(err)) => {
            let message = err.to_string();
            if last_error.as_deref() != Some(message.as_str()) {
                tracing::error!(socket = %settings.bird_socket.display(), %err, "BIRD did not switch the protocol");
                *last_error = Some(message);
            }
            Err(err)
        }
        Err(_) => {
            let err = AnycastError::BirdTimeout;
            let message = err.to_string();
            if last_error.as_deref() != Some(message.as_str()) {
                tracing::error!(socket = %settings.bird_socket.display(), %err);
                *last_error = Some(message);
            }
            Err(err)
        }
    }
}

/// One exchange with BIRD: greeting, `enable|disable PROTOCOL`, the reply.
async fn bird(settings: &Settings, route: Route) -> Result<(), AnycastError> {
    let stream = UnixStream::connect(&settings.bird_socket)
        .await
        .map_err(|source| AnycastError::BirdConnect {
            socket: settings.bird_socket.clone(),
            source,
        })?;
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let greeting = bird_reply(&mut read).await?;
    if greeting.first().map(|(code, _)| *code) != Some(1) {
        return Err(AnycastError::BirdGreeting(greeting));
    }
    write
        .write_all(format!("{} {}\n", route.command(), settings.protocol).as_bytes())
        .await
        .map_err(AnycastError::BirdWrite)?;
    let reply = bird_reply(&mut read).await?;
    if reply.iter().any(|(code, _)| route.accepts(*code)) {
        Ok(())
    } else {
        Err(AnycastError::BirdRefused {
            command: route.command(),
            protocol: settings.protocol.clone(),
            reply,
        })
    }
}

/// One reply of BIRD's CLI protocol: lines `CODE-text` (more follow), ` text` (the same
/// code continues) and a last `CODE text`; every line bounded.
async fn bird_reply<R: tokio::io::AsyncBufRead + Unpin>(read: &mut R) -> Result<Vec<(u16, String)>, AnycastError> {
    let mut lines = Vec::new();
    let mut line = Vec::new();
    for _ in 0..BIRD_MAX_LINES {
        line.clear();
        let n = (&mut *read)
            .take(BIRD_MAX_LINE as u64)
            .read_until(b'\n', &mut line)
            .await
            .map_err(AnycastError::BirdRead)?;
        if n == 0 {
            return Err(AnycastError::BirdClosed);
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_owned();
        match parse_bird_line(&text) {
            Some((code, last, rest)) => {
                lines.push((code, rest.to_owned()));
                if last {
                    return Ok(lines);
                }
            }
            None => {
                if let Some((_, body)) = lines.last_mut() {
                    body.push_str(text.trim_start());
                }
            }
        }
    }
    Err(AnycastError::BirdReplyTooLong)
}

/// `CODE-text` or `CODE text`: (code, last line, text).
fn parse_bird_line(text: &str) -> Option<(u16, bool, &str)> {
    let code = text.get(..4).filter(|c| c.bytes().all(|b| b.is_ascii_digit()))?;
    let last = match text.as_bytes().get(4) {
        Some(b' ') | None => true,
        Some(b'-') => false,
        Some(_) => return None,
    };
    Some((code.parse().ok()?, last, text.get(5..).unwrap_or("")))
}

/// Ready or not, and why.
async fn check(settings: &Settings) -> Result<String, AnycastError> {
    let mut why = Vec::new();
    if let Some(url) = &settings.ready {
        let answer = timeout(settings.timeout, ready(url))
            .await
            .map_err(|_| AnycastError::ReadyTimeout {
                addr: url.addr,
                path: url.path.clone(),
                timeout: settings.timeout,
            })??;
        why.push(answer);
    }
    if let Some(addr) = settings.probe {
        timeout(settings.timeout, probe(addr, &settings.probe_name))
            .await
            .map_err(|_| AnycastError::ProbeTimeout {
                addr,
                timeout: settings.timeout,
            })??;
        why.push(format!("{addr} answers {} SOA", settings.probe_name));
    }
    Ok(why.join("; "))
}

/// `GET` the readiness URL: 200 is ready; the body's first line says why either way.
async fn ready(url: &ReadyUrl) -> Result<String, AnycastError> {
    let mut stream = TcpStream::connect(url.addr)
        .await
        .map_err(|source| AnycastError::ReadyConnect {
            addr: url.addr,
            path: url.path.clone(),
            source,
        })?;
    let exchange = |source| AnycastError::ReadyExchange { addr: url.addr, source };
    stream
        .write_all(format!("GET {} HTTP/1.0\r\nHost: {}\r\n\r\n", url.path, url.addr).as_bytes())
        .await
        .map_err(exchange)?;
    let mut response = Vec::new();
    (&mut stream)
        .take(READY_MAX_RESPONSE as u64)
        .read_to_end(&mut response)
        .await
        .map_err(exchange)?;
    let text = String::from_utf8_lossy(&response);
    let status = text.split_whitespace().nth(1).unwrap_or("").to_owned();
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned();
    if status == "200" {
        Ok(body)
    } else {
        Err(AnycastError::NotReady {
            addr: url.addr,
            path: url.path.clone(),
            status,
            body,
        })
    }
}

/// Asks `addr` for `name` SOA over UDP; an authoritative NOERROR answer to this query
/// is a pass.
async fn probe(addr: SocketAddr, name: &str) -> Result<(), AnycastError> {
    let wire = crate::explain::owner_wire(name).map_err(AnycastError::ProbeName)?;
    let id = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0x5153, |d| d.subsec_nanos() as u16);
    let mut query = Vec::with_capacity(12 + wire.len() + 4);
    query.extend(id.to_be_bytes());
    query.extend([0, 0, 0, 1, 0, 0, 0, 0, 0, 0]); // no RD; one question
    query.extend(&wire);
    query.extend([0, 6, 0, 1]); // SOA IN
    let bind: SocketAddr = if addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let socket = UdpSocket::bind(bind).await.map_err(AnycastError::ProbeSocket)?;
    let failed = |source| AnycastError::Probe { addr, source };
    socket.connect(addr).await.map_err(failed)?;
    socket.send(&query).await.map_err(failed)?;
    let mut reply = [0u8; 4096];
    loop {
        let n = socket.recv(&mut reply).await.map_err(failed)?;
        let reply = &reply[..n];
        if n < 12 || reply[..2] != id.to_be_bytes() || reply[2] & 0x80 == 0 {
            continue; // not the answer to this query
        }
        let (aa, rcode) = (reply[2] & 0x04 != 0, reply[3] & 0x0f);
        let answers = u16::from_be_bytes([reply[6], reply[7]]);
        return if aa && rcode == 0 && answers > 0 {
            Ok(())
        } else {
            Err(AnycastError::ProbeAnswer {
                addr,
                name: name.to_owned(),
                rcode,
                aa,
                answers,
            })
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bird_reply_lines() {
        assert_eq!(
            parse_bird_line("0001 BIRD 2.0.12 ready."),
            Some((1, true, "BIRD 2.0.12 ready."))
        );
        assert_eq!(
            parse_bird_line("0011-qdns: enabled"),
            Some((11, false, "qdns: enabled"))
        );
        assert_eq!(parse_bird_line("0000 "), Some((0, true, "")));
        assert_eq!(parse_bird_line("0000"), Some((0, true, "")));
        assert_eq!(parse_bird_line(" continued"), None);
        assert_eq!(parse_bird_line("12x4 nonsense"), None);
        assert_eq!(parse_bird_line("1234xnonsense"), None);
    }

    #[tokio::test]
    async fn a_reply_ends_at_its_last_line_and_is_bounded() {
        let mut input: &[u8] = b"0009-qdns: disabled\n more\n0000 \nnext";
        let reply = bird_reply(&mut input).await.unwrap();
        assert_eq!(reply, vec![(9, "qdns: disabledmore".to_owned()), (0, String::new())]);
        assert!(Route::Withdrawn.accepts(reply[0].0));
        assert!(!Route::Announced.accepts(reply[0].0));
        let endless = "0013-status\n".repeat(100);
        assert!(bird_reply(&mut endless.as_bytes())
            .await
            .unwrap_err()
            .to_string()
            .contains("64 lines"));
        let cut: &[u8] = b"0011-qdns: enabled\n";
        assert!(bird_reply(&mut &cut[..])
            .await
            .unwrap_err()
            .to_string()
            .contains("closed"));
    }

    #[test]
    fn rise_and_fall() {
        let mut h = Hysteresis::new(2, 3);
        assert_eq!(h.observe(true), Route::Withdrawn, "one good check is not enough");
        assert_eq!(h.observe(true), Route::Announced);
        assert_eq!(h.observe(false), Route::Announced);
        assert_eq!(h.observe(false), Route::Announced);
        assert_eq!(h.observe(true), Route::Announced, "a good check resets the count");
        for _ in 0..2 {
            assert_eq!(h.observe(false), Route::Announced);
        }
        assert_eq!(h.observe(false), Route::Withdrawn);
        assert_eq!(h.observe(true), Route::Withdrawn);
    }

    #[test]
    fn ready_urls() {
        let url: ReadyUrl = "http://127.0.0.1:9153/ready".parse().unwrap();
        assert_eq!(url.addr, "127.0.0.1:9153".parse().unwrap());
        assert_eq!(url.path, "/ready");
        let bare: ReadyUrl = "http://[::1]:9153".parse().unwrap();
        assert_eq!(bare.path, "/ready");
        assert!("https://127.0.0.1:1/ready".parse::<ReadyUrl>().is_err());
        assert!("http://edge.example:9153/ready".parse::<ReadyUrl>().is_err());
        assert!("http://127.0.0.1:1/re ady".parse::<ReadyUrl>().is_err());
    }
}
