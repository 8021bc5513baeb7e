//! The checker-report listener (`--checker-listen`): reads signed reports from remote
//! checkers with every read bounded before the sender is authenticated.
//!
//! - Connections: at most [`MAX_CONNECTIONS`] in all and [`MAX_PER_SOURCE`] from one
//!   address (a [`qdns_listen::Pool`]). One over the per-source cap is closed at once
//!   and counted (`connection_limit`); when every place is taken, the oldest connection
//!   that has not yet delivered an authentic report is closed to make room (`evicted`),
//!   so idle or slow strangers cannot lock the real checkers out; a checker that has
//!   proven itself keeps its connection.
//! - A connection may sit idle between reports for [`IDLE_TIMEOUT`]; once a frame's
//!   first octet has arrived, the whole frame must follow within [`FRAME_TIMEOUT`]
//!   (`timeout`), so a slow sender cannot hold a slot or a buffer.
//! - A frame's length is checked against [`report::MAX_REPORT`] before anything is
//!   read (`too_large`); the checker id (at most 64 octets) is read next and a stranger
//!   is refused before its body (`unknown_checker`); the body is read into a buffer that
//!   grows only with the octets that actually arrive, and the MAC is checked before a
//!   byte of it is parsed (`report::verify`).
//!
//! A rejected frame closes the connection unless it was authentic and only stale,
//! replayed or for another location (the checker then simply sends newer ones).
use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use qdns_listen::{Limits, Pool};
use tokio::{
    io::{AsyncRead, AsyncReadExt},
    net::TcpListener,
};
use tokio_util::sync::CancellationToken;

use crate::report::{self, Reject, Signed, MAC_LEN, MAX_ID};

/// Most report connections open at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Most report connections from one address.
pub const MAX_PER_SOURCE: usize = 8;
/// How long a connection may wait between reports (checkers send every 0.5 s when
/// they have observations).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a frame may take to arrive once it has begun.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the kept sequences could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SequencesError {
    /// The sequences file exists but cannot be read.
    #[error("{}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The sequences file is damaged.
    #[error("{}: {source}", .path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        #[source]
        source: serde_json::Error,
    },
}

/// The last sequence accepted from each checker, kept in a file (written before the
/// report is acted on) so a restarted location still refuses a report it accepted.
#[derive(Debug, Default)]
pub struct Sequences {
    last: HashMap<String, u64>,
    file: Option<PathBuf>,
}

impl Sequences {
    /// The sequences kept in `file` (none yet when it does not exist).
    pub fn load(file: PathBuf) -> Result<Sequences, SequencesError> {
        let last = match std::fs::read(&file) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(last) => last,
                Err(source) => return Err(SequencesError::Parse { path: file, source }),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashMap::new(),
            Err(source) => return Err(SequencesError::Read { path: file, source }),
        };
        Ok(Sequences { last, file: Some(file) })
    }

    /// Writes the file whole (a temporary file renamed over it).
    fn save(&self) -> std::io::Result<()> {
        let Some(file) = &self.file else { return Ok(()) };
        let text = serde_json::to_vec(&self.last).map_err(std::io::Error::other)?;
        let temporary = file.with_extension("json.tmp");
        std::fs::write(&temporary, text)?;
        std::fs::rename(&temporary, file)
    }
}

/// Accepts report connections for `location` until `shutdown`, verifying each frame
/// against `keys` and `sequences` and handing the outcome — the authenticated report,
/// or why a frame or connection was dropped — the peer's address and the frame's
/// octets to `sink`.
pub async fn serve<F, Fut>(
    listener: TcpListener,
    keys: Arc<arc_swap::ArcSwap<report::Keys>>,
    location: String,
    sequences: Sequences,
    sink: F,
    shutdown: CancellationToken,
) where
    F: Fn(Result<report::Report, Reject>, String, u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let last_seq = Arc::new(Mutex::new(sequences));
    let location: Arc<str> = location.into();
    let pool = Pool::new(Limits {
        total: MAX_CONNECTIONS,
        per_source: MAX_PER_SOURCE,
    });
    loop {
        let Some((mut stream, peer)) = qdns_listen::accept_tcp(&listener, &shutdown).await else {
            return;
        };
        let Ok(mut ticket) = pool.admit(peer.ip()) else {
            sink(Err(Reject::ConnectionLimit), peer.to_string(), 0).await;
            drop(stream);
            continue;
        };
        let (keys, sink, last_seq, shutdown, location) = (
            Arc::clone(&keys),
            sink.clone(),
            Arc::clone(&last_seq),
            shutdown.clone(),
            Arc::clone(&location),
        );
        tokio::spawn(async move {
            let peer = peer.to_string();
            loop {
                // The list in force for this frame (the deployment's may change).
                let known = keys.load_full();
                let frame = tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = ticket.evicted() => {
                        sink(Err(Reject::Evicted), peer.clone(), 0).await;
                        return;
                    }
                    frame = read_frame(&mut stream, &known) => frame,
                };
                let mut octets = 0;
                let verdict = match frame {
                    Ok(None) => return,
                    Ok(Some(signed)) => match last_seq.lock() {
                        Ok(mut seqs) => {
                            octets = (4 + 1 + signed.checker.len() + MAC_LEN + signed.body.len()) as u64;
                            let verdict =
                                report::verify(&signed, &known, &location, &mut seqs.last, crate::clock::now());
                            if verdict.is_ok() {
                                if let Err(err) = seqs.save() {
                                    static LOG: qdns_listen::LogLimit = qdns_listen::LogLimit::new();
                                    if LOG.allow() {
                                        tracing::warn!(%err, "checker sequences not kept: a restart would forget them");
                                    }
                                }
                            }
                            verdict
                        }
                        Err(_) => return,
                    },
                    Err(reject) => Err(reject),
                };
                if verdict.is_ok() {
                    // Proven: never evicted for a newcomer.
                    ticket.set_evictable(false);
                }
                let close = matches!(
                    verdict,
                    Err(Reject::Malformed
                        | Reject::TooLarge
                        | Reject::Timeout
                        | Reject::UnknownChecker
                        | Reject::BadSignature)
                );
                sink(verdict, peer.clone(), octets).await;
                if close {
                    return;
                }
            }
        });
    }
}

/// One frame, or `None` when the sender closed (or stayed idle past [`IDLE_TIMEOUT`])
/// between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(stream: &mut R, keys: &report::Keys) -> Result<Option<Signed>, Reject> {
    let mut first = [0u8; 1];
    match tokio::time::timeout(IDLE_TIMEOUT, stream.read_exact(&mut first)).await {
        Ok(Ok(_)) => {}
        Ok(Err(_)) | Err(_) => return Ok(None),
    }
    match tokio::time::timeout(FRAME_TIMEOUT, read_rest(stream, first[0], keys)).await {
        Ok(result) => result.map(Some),
        Err(_) => Err(Reject::Timeout),
    }
}

async fn read_rest<R: AsyncRead + Unpin>(stream: &mut R, first: u8, keys: &report::Keys) -> Result<Signed, Reject> {
    let mut length = [first, 0, 0, 0];
    stream
        .read_exact(&mut length[1..])
        .await
        .map_err(|_| Reject::Malformed)?;
    let rest = u32::from_be_bytes(length) as usize;
    if rest > report::MAX_REPORT {
        return Err(Reject::TooLarge);
    }
    let id_len = usize::from(stream.read_u8().await.map_err(|_| Reject::Malformed)?);
    if id_len == 0 || id_len > MAX_ID || rest < 1 + id_len + MAC_LEN {
        return Err(Reject::Malformed);
    }
    let mut id = vec![0u8; id_len];
    stream.read_exact(&mut id).await.map_err(|_| Reject::Malformed)?;
    let checker = String::from_utf8(id).map_err(|_| Reject::Malformed)?;
    if !keys.knows(&checker) {
        return Err(Reject::UnknownChecker);
    }
    let mut mac = vec![0u8; MAC_LEN];
    stream.read_exact(&mut mac).await.map_err(|_| Reject::Malformed)?;
    let body_len = rest - 1 - id_len - MAC_LEN;
    // Grows with what arrives, not with what the length claims.
    let mut body = Vec::new();
    let read = (&mut *stream)
        .take(body_len as u64)
        .read_to_end(&mut body)
        .await
        .map_err(|_| Reject::Malformed)?;
    if read != body_len {
        return Err(Reject::Malformed);
    }
    Ok(Signed { checker, body, mac })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> report::Keys {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        let key = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [7u8; 32]);
        qdns_testkit::write_secret(
            &path,
            format!("[[checker]]\nid = \"c1\"\nregion = \"eu\"\nkey = \"{key}\"\n"),
        );
        report::Keys::load(&path).unwrap()
    }

    fn signed() -> Signed {
        let report = report::Report {
            checker: "c1".to_owned(),
            region: "eu".to_owned(),
            location: "fra".to_owned(),
            seq: 1,
            sent_at: 1000,
            observations: Vec::new(),
        };
        report::sign(&report, &[7u8; 32]).unwrap()
    }

    async fn read(bytes: &[u8]) -> Result<Option<Signed>, Reject> {
        let mut reader = bytes;
        read_frame(&mut reader, &keys()).await
    }

    #[tokio::test]
    async fn reads_a_frame_and_refuses_strangers_and_giants_before_their_bodies() {
        let frame = signed().frame().unwrap();
        assert_eq!(read(&frame).await, Ok(Some(signed())));
        assert_eq!(read(&[]).await, Ok(None));
        // A 16 MiB length: refused on the length alone.
        assert_eq!(read(&[1, 0, 0, 0, 2, b'c', b'1']).await, Err(Reject::TooLarge));
        // An unknown id: refused before the MAC and body are read (none follow here).
        assert_eq!(read(&[0, 0, 0, 40, 2, b'z', b'z']).await, Err(Reject::UnknownChecker));
        // Shorter than its fixed part, an empty id, a cut-off body.
        assert_eq!(read(&[0, 0, 0, 4, 2, b'c', b'1', 0]).await, Err(Reject::Malformed));
        assert_eq!(read(&[0, 0, 0, 40, 0]).await, Err(Reject::Malformed));
        assert_eq!(read(&frame[..frame.len() - 1]).await, Err(Reject::Malformed));
    }

    #[tokio::test(start_paused = true)]
    async fn a_frame_that_stalls_times_out() {
        let (mut client, mut server) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut client, &[0, 0, 0, 40])
            .await
            .unwrap();
        assert_eq!(read_frame(&mut server, &keys()).await, Err(Reject::Timeout));
        drop(client);
    }

    #[test]
    fn sequences_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("checker-seq.json");
        let mut first = Sequences::load(file.clone()).unwrap();
        let signed = signed();
        assert!(report::verify(&signed, &keys(), "fra", &mut first.last, 1000).is_ok());
        first.save().unwrap();
        let mut again = Sequences::load(file.clone()).unwrap();
        assert_eq!(
            report::verify(&signed, &keys(), "fra", &mut again.last, 1000),
            Err(Reject::Replayed)
        );
        std::fs::write(&file, "{").unwrap();
        assert!(Sequences::load(file)
            .unwrap_err()
            .to_string()
            .contains("checker-seq.json"));
    }
}
