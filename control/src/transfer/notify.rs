//! NOTIFY (RFC 1996) to a zone's secondaries when its serial moves: over UDP, signed
//! with the zone's `transfer_tsig` key, retried until answered — [`ATTEMPTS`] tries,
//! the wait doubling from [`FIRST_WAIT`] — and given up early when a newer serial
//! takes over (its own NOTIFY follows).
use std::{net::SocketAddr, sync::Arc, time::Duration};

use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use super::{
    tsig::{self, Chain},
    wire::{self, opcode},
    Outcome, Served, Transfers,
};

/// Tries per secondary and serial.
pub const ATTEMPTS: u32 = 5;
/// Wait for an answer to the first try; doubled for each after.
pub const FIRST_WAIT: Duration = Duration::from_secs(1);

/// Notifies every secondary of `served` (one task each).
pub fn spawn(transfers: &Arc<Transfers>, served: &Arc<Served>, shutdown: &CancellationToken) {
    for &target in &served.settings.notify {
        let (transfers, served, shutdown) = (Arc::clone(transfers), Arc::clone(served), shutdown.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = notify_one(&transfers, &served, target) => {}
            }
        });
    }
}

async fn notify_one(transfers: &Transfers, served: &Served, target: SocketAddr) {
    let zone = qdns_zone::name::to_text(&served.origin);
    let bind: SocketAddr = if target.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let Ok(socket) = UdpSocket::bind(bind).await else {
        tracing::warn!(%zone, %target, "cannot open a socket to notify");
        transfers.stats.count(Outcome::NotifyFailed);
        return;
    };
    let key = served
        .settings
        .tsig
        .as_deref()
        .and_then(|name| transfers.keys().named(name).cloned());
    let mut wait = FIRST_WAIT;
    for attempt in 1..=ATTEMPTS {
        // A newer serial took over: its own NOTIFY is on its way.
        if transfers
            .zone(&served.origin)
            .is_some_and(|now| now.serial != served.serial)
        {
            return;
        }
        let id: u16 = rand_id();
        let mut message = wire::notify(id, &served.origin, served.soa.first().map_or(&[][..], Vec::as_slice));
        let mac = key
            .as_ref()
            .map(|k| tsig::sign(&mut message, k, Chain::Request, crate::clock::now(), 0));
        transfers.stats.count(Outcome::NotifySent);
        if socket.send_to(&message, target).await.is_ok()
            && acked(&socket, target, id, wait, key.as_ref().zip(mac.as_deref())).await
        {
            transfers.stats.count(Outcome::NotifyAcked);
            tracing::debug!(%zone, %target, serial = served.serial, attempt, "notify answered");
            return;
        }
        wait = wait.saturating_mul(2);
    }
    transfers.stats.count(Outcome::NotifyFailed);
    tracing::warn!(%zone, %target, serial = served.serial, "notify not answered after {ATTEMPTS} tries; the secondary learns the serial at its next refresh");
}

/// True when `target` answers NOTIFY `id` within `wait` (its TSIG verifying when we
/// signed).
async fn acked(
    socket: &UdpSocket,
    target: SocketAddr,
    id: u16,
    wait: Duration,
    signed: Option<(&tsig::Key, &[u8])>,
) -> bool {
    let mut buf = vec![0u8; 4096];
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let got = tokio::time::timeout_at(deadline, socket.recv_from(&mut buf)).await;
        let Ok(Ok((len, from))) = got else { return false };
        let Some(answer) = buf.get(..len) else { return false };
        if from != target {
            continue;
        }
        let Ok((response, rcode)) = wire::read_message(answer, true) else {
            continue;
        };
        if response.id != id || response.opcode != opcode::NOTIFY {
            continue;
        }
        if let Some((key, mac)) = signed {
            let verified = response
                .tsig
                .as_ref()
                .is_some_and(|(t, at)| tsig::verify_chained(key, mac, &[], answer, *at, t, true));
            if !verified {
                // Say what the secondary answered: an unsigned NOTAUTH is what Knot sends
                // when its ACL lacks our key (not something on the path).
                tracing::warn!(
                    %target,
                    answered = rcode_name(rcode),
                    tsig = tsig_state(response.tsig.as_ref().map(|(t, _)| t)),
                    "the secondary's NOTIFY answer does not verify with key {}; ignored (an unsigned NOTAUTH or a BADKEY/BADSIG: the secondary lacks this key or holds another secret)",
                    key.name
                );
                continue;
            }
        }
        if rcode != wire::rcode::NOERROR {
            tracing::warn!(%target, answered = rcode_name(rcode), "the secondary refused the NOTIFY");
        }
        return rcode == wire::rcode::NOERROR;
    }
}

/// An RCODE's name (its number where it has none here).
fn rcode_name(rcode: u8) -> String {
    match rcode {
        wire::rcode::NOERROR => "NOERROR".into(),
        wire::rcode::FORMERR => "FORMERR".into(),
        2 => "SERVFAIL".into(),
        3 => "NXDOMAIN".into(),
        wire::rcode::NOTIMP => "NOTIMP".into(),
        wire::rcode::REFUSED => "REFUSED".into(),
        wire::rcode::NOTAUTH => "NOTAUTH".into(),
        other => format!("RCODE {other}"),
    }
}

/// What the answer's TSIG said: none, or its error (RFC 8945: 16 BADSIG, 17 BADKEY,
/// 18 BADTIME, 22 BADTRUNC).
fn tsig_state(tsig: Option<&tsig::Tsig>) -> &'static str {
    match tsig.map(|t| t.error) {
        None => "unsigned",
        Some(0) => "signed, not verifying",
        Some(16) => "BADSIG",
        Some(17) => "BADKEY",
        Some(18) => "BADTIME",
        Some(22) => "BADTRUNC",
        Some(_) => "another TSIG error",
    }
}

/// A message ID no one on the path can guess.
pub(super) fn rand_id() -> u16 {
    let mut id = [0u8; 2];
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        return nanos as u16;
    }
    u16::from_be_bytes(id)
}
