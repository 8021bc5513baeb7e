//! The transfer listener (`--transfer-listen`): AXFR and IXFR over TCP, SOA queries
//! (and IXFR's "ask over TCP" SOA) over UDP and TCP, each checked against the zone's
//! `transfer_allow` and `transfer_tsig`.
//!
//! Bounded before anything is authenticated: a TCP connection from an address no
//! served zone's `transfer_allow` takes (nor a primary's) never holds one of the
//! places of those it does: it gets one of [`OUTSIDERS`] places of its own, one
//! request read within [`OUTSIDER_READ_TIMEOUT`], its refusal, and is closed. The
//! others share [`MAX_CONNECTIONS`] places, at most [`PER_SOURCE`] from one address
//! (`qdns_listen`'s pool: a connection waiting for a request is evictable, the oldest
//! such making room for a new one; one answering is not), each request read within
//! [`READ_TIMEOUT`] (a TCP message is at most 65,535 octets by its length field),
//! at most [`REQUESTS_PER_CONNECTION`] requests a connection; a whole zone goes out one
//! message at a time, each written within [`WRITE_TIMEOUT`], the whole answer within
//! [`ANSWER_DEADLINE`].
use std::{net::IpAddr, sync::Arc, time::Duration};

use qdns_listen::pool::{Limits, Pool, Ticket};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream, UdpSocket},
};
use tokio_util::sync::CancellationToken;

use super::{
    serial_after,
    tsig::{self, Chain, Key},
    wire::{self, opcode, rcode, rtype, Request},
    Diff, Outcome, Served, Transfers,
};

/// Most transfer connections at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Most transfer connections at once from one address (an IPv6 /64).
pub const PER_SOURCE: usize = 8;
/// Connections at once from addresses no zone allows (they get their refusal), two
/// from one address.
pub const OUTSIDERS: usize = 8;
/// Time for such a connection's one request.
pub const OUTSIDER_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Time to write one whole answer (a zone of a million records goes out in well under
/// a minute on loopback; a peer reading slower than this holds a place no longer).
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(300);
/// Time to read one request.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time to write one message of an answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Requests answered on one connection before it is closed.
pub const REQUESTS_PER_CONNECTION: usize = 64;

/// The records an answer carries, in order, and where it has got to.
struct Records {
    parts: Vec<Part>,
    part: usize,
    at: usize,
}

enum Part {
    Owned(Vec<Vec<u8>>),
    Shared(Arc<Vec<Box<[u8]>>>),
    Diff(Arc<Diff>, bool),
}

impl Part {
    fn get(&self, i: usize) -> Option<&[u8]> {
        match self {
            Part::Owned(v) => v.get(i).map(Vec::as_slice),
            Part::Shared(v) => v.get(i).map(|r| &r[..]),
            // A change: the old SOA, what went, the new SOA, what came (RFC 1995 §4);
            // the SOAs' RRSIGs go and come with them.
            Part::Diff(d, removed) => {
                let (soa, list) = if *removed {
                    (&d.old_soa, &d.removed)
                } else {
                    (&d.new_soa, &d.added)
                };
                match soa.get(i) {
                    Some(r) => Some(r.as_slice()),
                    None => list.get(i - soa.len()).map(|r| &r[..]),
                }
            }
        }
    }
}

impl Records {
    fn next(&mut self) -> Option<&[u8]> {
        loop {
            let part = self.parts.get(self.part)?;
            if part.get(self.at).is_some() {
                self.at += 1;
                return self.parts.get(self.part).and_then(|p| p.get(self.at - 1));
            }
            self.part += 1;
            self.at = 0;
        }
    }

    fn peek_len(&self) -> Option<usize> {
        let mut part = self.part;
        let mut at = self.at;
        loop {
            let p = self.parts.get(part)?;
            if let Some(r) = p.get(at) {
                return Some(r.len());
            }
            part += 1;
            at = 0;
        }
    }
}

/// An answer: its messages made one at a time.
pub struct Answer {
    request: Request,
    rcode: u8,
    records: Records,
    /// Records for the first message's authority section (a NODATA answer's SOA).
    authority: Vec<Vec<u8>>,
    /// TC set: the client asks again over TCP (no records).
    truncated: bool,
    key: Option<Key>,
    /// The MAC the next message chains to (the request's first).
    prior: Option<Vec<u8>>,
    /// A TSIG error to answer unsigned with (bad key or MAC).
    unsigned_error: Option<u16>,
    signed_error: u16,
    started: bool,
    now: u64,
    limit: usize,
}

impl Answer {
    fn new(request: Request, rcode: u8, parts: Vec<Part>, now: u64, limit: usize) -> Answer {
        Answer {
            request,
            rcode,
            records: Records { parts, part: 0, at: 0 },
            authority: Vec::new(),
            truncated: false,
            key: None,
            prior: None,
            unsigned_error: None,
            signed_error: 0,
            started: false,
            now,
            limit,
        }
    }

    /// The next message, or `None` when all are out.
    pub fn next_message(&mut self) -> Option<Vec<u8>> {
        if self.started && self.records.peek_len().is_none() {
            return None;
        }
        let mut message = wire::answer_head(&self.request, self.rcode);
        if self.truncated {
            message[2] |= 0x02;
        }
        if self.started || self.request.qname_sent.is_empty() {
            // Later messages carry no question (RFC 5936 §2.2.1 allows either), nor
            // does the answer to a request that could not be read.
            message.truncate(12);
            message[4..6].copy_from_slice(&0u16.to_be_bytes());
        }
        while let Some(len) = self.records.peek_len() {
            let count = u16::from_be_bytes([message[6], message[7]]);
            if count > 0 && message.len() + len > self.limit {
                break;
            }
            if let Some(record) = self.records.next() {
                wire::push_answer(&mut message, record);
            }
        }
        for record in std::mem::take(&mut self.authority) {
            wire::push_authority(&mut message, &record);
        }
        let first = !self.started;
        if first && self.request.edns {
            // The first message of the answer to an EDNS request has an OPT record
            // (RFC 6891 §6.1.1, RFC 5936 §2.2.5); a refusal says why, as one reason for
            // all (RFC 8914 §4.19, Prohibited: a zone not served is refused as one served
            // to others, so that no one learns which zones are served, issue 53 §8).
            let ede = (self.rcode == rcode::REFUSED).then_some(wire::EDE_PROHIBITED);
            wire::push_opt(&mut message, ede, self.request.dnssec_ok);
        }
        self.started = true;
        if let (Some(error), Some((tsig, _))) = (self.unsigned_error, &self.request.tsig) {
            tsig::append_unsigned(&mut message, tsig, self.now, error);
        } else if let Some(key) = &self.key {
            let prior = self.prior.take().unwrap_or_default();
            let chain = if first {
                Chain::First(&prior)
            } else {
                Chain::Next(&prior)
            };
            self.prior = Some(tsig::sign(&mut message, key, chain, self.now, self.signed_error));
        }
        Some(message)
    }
}

/// FORMERR, unsigned and without a question, to a request that does not read; `None`
/// when it has no ID either.
fn unreadable(message: &[u8], now: u64, limit: usize) -> Option<(Answer, Outcome)> {
    let id = message.get(..2)?;
    let bare = Request {
        id: u16::from_be_bytes([id[0], id[1]]),
        opcode: message.get(2).map_or(0, |f| (f >> 3) & 0xf),
        qname: Vec::new(),
        qname_sent: Vec::new(),
        qtype: 0,
        qclass: 0,
        serial: None,
        tsig: None,
        edns: false,
        dnssec_ok: false,
    };
    Some((
        Answer::new(bare, rcode::FORMERR, Vec::new(), now, limit),
        Outcome::Malformed,
    ))
}

/// The answer to `message` from `peer` (`tcp`: over TCP), and what it counts as;
/// `None`: not answered (too short to answer).
pub fn respond(transfers: &Transfers, peer: IpAddr, message: &[u8], tcp: bool, now: u64) -> Option<(Answer, Outcome)> {
    let limit = if tcp { wire::MESSAGE_TARGET } else { 1232 };
    let Ok(request) = wire::read_request(message) else {
        return unreadable(message, now, limit);
    };
    let refuse =
        |request: Request, code: u8, outcome: Outcome| (Answer::new(request, code, Vec::new(), now, limit), outcome);
    // TSIG first: a signed refusal tells a peer with the right key why.
    let key = match verify(transfers, message, &request, now) {
        Ok(key) => key,
        Err((why, known)) => {
            let outcome = if request.opcode == opcode::NOTIFY {
                Outcome::NotifyInRefused
            } else {
                Outcome::RefusedTsig
            };
            let mac = request.tsig.as_ref().map(|(t, _)| t.mac.clone());
            let (mut answer, outcome) = refuse(request, rcode::NOTAUTH, outcome);
            match known {
                Some(k) => {
                    answer.key = Some(k);
                    answer.prior = mac;
                    answer.signed_error = why.code();
                }
                None => answer.unsigned_error = Some(why.code()),
            }
            return Some((answer, outcome));
        }
    };
    let signed = |mut answer: Answer| {
        if let (Some(k), Some((tsig, _))) = (&key, &answer.request.tsig) {
            answer.prior = Some(tsig.mac.clone());
            answer.key = Some(k.clone());
        }
        answer
    };
    if request.opcode == opcode::NOTIFY {
        // A NOTIFY for a zone taken from a primary (RFC 1996 §3.10: from its primary).
        let accepted = super::inbound::accept_notify(transfers, &request.qname, peer, key.as_ref());
        let (code, outcome) = if accepted {
            (rcode::NOERROR, Outcome::NotifyIn)
        } else {
            (rcode::REFUSED, Outcome::NotifyInRefused)
        };
        let (answer, outcome) = refuse(request, code, outcome);
        return Some((signed(answer), outcome));
    }
    if request.opcode != opcode::QUERY {
        let (answer, outcome) = refuse(request, rcode::NOTIMP, Outcome::RefusedOther);
        return Some((signed(answer), outcome));
    }
    if let Some(answer) = update_zone_soa(transfers, &request, (tcp, key.is_some()), now, limit) {
        return Some((signed(answer), Outcome::Soa));
    }
    // A zone not served is refused as one served but not to this peer is: NOTAUTH here
    // would tell anyone which zones are served (issue 53 §8).
    let Some(zone) = transfers.zone(&request.qname) else {
        let (answer, outcome) = refuse(request, rcode::REFUSED, Outcome::RefusedOther);
        return Some((signed(answer), outcome));
    };
    let wanted = zone.settings.tsig.as_deref();
    if !zone.settings.allows(peer) {
        let (answer, outcome) = refuse(request, rcode::REFUSED, Outcome::RefusedAcl);
        return Some((signed(answer), outcome));
    }
    if wanted.is_some() && key.as_ref().map(|k| k.name.as_str()) != wanted {
        let (answer, outcome) = refuse(request, rcode::REFUSED, Outcome::RefusedTsig);
        return Some((signed(answer), outcome));
    }
    if request.qclass != 1 {
        let (answer, outcome) = refuse(request, rcode::REFUSED, Outcome::RefusedOther);
        return Some((signed(answer), outcome));
    }
    let (parts, outcome) = match (request.qtype, tcp) {
        (rtype::SOA, _) => (vec![Part::Owned(zone.soa.clone())], Outcome::Soa),
        (rtype::AXFR, true) => (whole(&zone), Outcome::Axfr),
        (rtype::IXFR, _) => match request.serial {
            None => {
                let (answer, outcome) = refuse(request, rcode::FORMERR, Outcome::Malformed);
                return Some((signed(answer), outcome));
            }
            Some(theirs) => ixfr(&zone, theirs, tcp),
        },
        _ => {
            let (answer, outcome) = refuse(request, rcode::REFUSED, Outcome::RefusedOther);
            return Some((signed(answer), outcome));
        }
    };
    Some((signed(Answer::new(request, rcode::NOERROR, parts, now, limit)), outcome))
}

/// The answer to a SOA query about a zone open to dynamic update, which anyone gets,
/// signed or not (`signed`: the request verified with a key): UPDATE clients find the
/// zone to update so, each name up from the one they change (certbot signed, lego
/// unsigned) until the answer is the zone's SOA. Below the apex the answer is "no SOA
/// here" (NODATA, the SOA in authority; names are not looked up) and the client goes up
/// a label. Unsigned over UDP the answer is TC without records, so the listener is no
/// amplifier for spoofed sources (the SOA and its signatures are ten times the query):
/// the client asks again over TCP (lego does). `None`: not such a query.
fn update_zone_soa(
    transfers: &Transfers,
    request: &Request,
    (tcp, signed): (bool, bool),
    now: u64,
    limit: usize,
) -> Option<Answer> {
    if request.qtype != rtype::SOA || request.qclass != 1 {
        return None;
    }
    let zone = transfers
        .enclosing(&request.qname)
        .filter(|z| !z.settings.update.is_empty())?;
    let mut answer = Answer::new(request.clone(), rcode::NOERROR, Vec::new(), now, limit);
    if !tcp && !signed {
        answer.truncated = true;
    } else if zone.origin == request.qname {
        answer = Answer::new(
            request.clone(),
            rcode::NOERROR,
            vec![Part::Owned(zone.soa.clone())],
            now,
            limit,
        );
    } else {
        answer.authority.clone_from(&zone.soa);
    }
    Some(answer)
}

/// How a one-message answer of [`short_answer`] is signed.
pub enum Signing {
    /// Unsigned (an unsigned request).
    None,
    /// With the key the request verified with, chained to its MAC.
    Key(Key),
    /// The request's TSIG did not verify: the TSIG error, signed when the key is known
    /// (RFC 8945 §5.3.2), else unsigned.
    Refused(tsig::Rejected, Option<Key>),
}

/// The one-message answer to `request` with `rcode` and no records (UPDATE's answer),
/// signed as `signing` says.
#[must_use]
pub fn short_answer(request: Request, rcode: u8, signing: Signing, now: u64) -> Vec<u8> {
    let mac = request.tsig.as_ref().map(|(t, _)| t.mac.clone());
    let mut answer = Answer::new(request, rcode, Vec::new(), now, wire::MESSAGE_TARGET);
    match signing {
        Signing::None => {}
        Signing::Key(key) => {
            answer.key = Some(key);
            answer.prior = mac;
        }
        Signing::Refused(why, Some(key)) => {
            answer.key = Some(key);
            answer.prior = mac;
            answer.signed_error = why.code();
        }
        Signing::Refused(why, None) => answer.unsigned_error = Some(why.code()),
    }
    answer.next_message().unwrap_or_default()
}

/// The key a signed request verifies with; `None` for an unsigned one.
///
/// # Errors
/// Why its TSIG does not verify, and the key when it is known.
pub fn verify(
    transfers: &Transfers,
    message: &[u8],
    request: &Request,
    now: u64,
) -> Result<Option<Key>, (tsig::Rejected, Option<Key>)> {
    let Some((t, at)) = &request.tsig else {
        return Ok(None);
    };
    let keys = transfers.keys();
    tsig::verify_request(&keys, message, *at, t, now)
        .map(|k| Some(k.clone()))
        .map_err(|(why, known)| (why, known.cloned()))
}

/// SOA, every record, SOA (RFC 5936 §2.2).
fn whole(zone: &Served) -> Vec<Part> {
    let soa = zone.soa.first().cloned().unwrap_or_default();
    vec![
        Part::Owned(zone.soa.clone()),
        Part::Shared(Arc::clone(&zone.records)),
        Part::Owned(vec![soa]),
    ]
}

/// IXFR from `theirs` (RFC 1995 §4): the current SOA when they are current (or over
/// UDP, "ask over TCP"), the changes when the journal reaches back, else the zone.
fn ixfr(zone: &Served, theirs: u32, tcp: bool) -> (Vec<Part>, Outcome) {
    let soa = zone.soa.first().cloned().unwrap_or_default();
    if !serial_after(zone.serial, theirs) || !tcp {
        return (vec![Part::Owned(vec![soa])], Outcome::Soa);
    }
    match zone.changes_since(theirs) {
        Some(chain) => {
            let mut parts = vec![Part::Owned(vec![soa.clone()])];
            for diff in chain {
                parts.push(Part::Diff(Arc::clone(&diff), true));
                parts.push(Part::Diff(diff, false));
            }
            parts.push(Part::Owned(vec![soa]));
            (parts, Outcome::Ixfr)
        }
        None => (whole(zone), Outcome::IxfrWhole),
    }
}

/// Serves TCP transfers until `shutdown`.
pub async fn accept_tcp(listener: TcpListener, transfers: Arc<Transfers>, shutdown: CancellationToken) {
    let allowed = Pool::new(Limits {
        total: MAX_CONNECTIONS,
        per_source: PER_SOURCE,
    });
    let outsiders = Pool::new(Limits {
        total: OUTSIDERS,
        per_source: 2,
    });
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, peer)) = accepted else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        // The ACL before a place: an address nothing here answers never takes one of
        // the places of those it does.
        let budget = if transfers.may_ask(peer.ip()) {
            Budget {
                pool: &allowed,
                requests: REQUESTS_PER_CONNECTION,
                read_timeout: READ_TIMEOUT,
            }
        } else {
            Budget {
                pool: &outsiders,
                requests: 1,
                read_timeout: OUTSIDER_READ_TIMEOUT,
            }
        };
        let Ok(ticket) = budget.pool.admit(peer.ip()) else {
            transfers.stats.count(Outcome::Dropped);
            continue;
        };
        let (requests, read_timeout) = (budget.requests, budget.read_timeout);
        let transfers = Arc::clone(&transfers);
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let mut ticket = ticket;
            let from = Peer {
                transfers: &transfers,
                address: peer.ip(),
                requests,
                read_timeout,
            };
            from.connection(stream, &mut ticket, &shutdown).await;
        });
    }
}

/// Which places a connection takes, and what it may ask.
struct Budget<'a> {
    pool: &'a Pool,
    requests: usize,
    read_timeout: Duration,
}

/// One TCP connection's peer and allowance.
struct Peer<'a> {
    transfers: &'a Transfers,
    address: IpAddr,
    requests: usize,
    read_timeout: Duration,
}

impl Peer<'_> {
    async fn connection(&self, mut stream: TcpStream, ticket: &mut Ticket, shutdown: &CancellationToken) {
        let transfers = self.transfers;
        for _ in 0..self.requests {
            // Waiting for a request: evictable (the oldest such makes room for a newcomer).
            ticket.set_evictable(true);
            let Some(message) = (tokio::select! {
                () = shutdown.cancelled() => None,
                () = ticket.evicted() => {
                    transfers.stats.count(Outcome::Dropped);
                    None
                }
                read = read_request(&mut stream, transfers, self.read_timeout) => read,
            }) else {
                return;
            };
            ticket.set_evictable(false);
            if crate::update::is_update(&message) {
                // Carried out by the update task (one at a time); no answer (the queue
                // full, or none in time): the connection ends and the client retries.
                let Some(out) = crate::update::ask(transfers, self.address, message).await else {
                    return;
                };
                let framed = u16::try_from(out.len()).map(|len| [&len.to_be_bytes()[..], &out].concat());
                let Ok(framed) = framed else { return };
                if !matches!(
                    tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(&framed)).await,
                    Ok(Ok(()))
                ) {
                    transfers.stats.count(Outcome::Dropped);
                    return;
                }
                continue;
            }
            let Some((answer, outcome)) = respond(transfers, self.address, &message, true, crate::clock::now()) else {
                transfers.stats.count(Outcome::Malformed);
                return;
            };
            transfers.stats.count(outcome);
            let written = tokio::select! {
                () = shutdown.cancelled() => return,
                written = tokio::time::timeout(ANSWER_DEADLINE, write_answer(&mut stream, answer)) => written,
            };
            if !matches!(written, Ok(true)) {
                transfers.stats.count(Outcome::Dropped);
                return;
            }
            if outcome == Outcome::Malformed {
                return;
            }
        }
    }
}

/// One length-prefixed request, each part within `timeout`; `None` (counted) when it
/// does not come.
async fn read_request(stream: &mut TcpStream, transfers: &Transfers, timeout: Duration) -> Option<Vec<u8>> {
    let mut len = [0u8; 2];
    match tokio::time::timeout(timeout, stream.read_exact(&mut len)).await {
        Ok(Ok(_)) => {}
        Ok(Err(_)) => return None,
        Err(_) => {
            transfers.stats.count(Outcome::Dropped);
            return None;
        }
    }
    let mut message = vec![0u8; usize::from(u16::from_be_bytes(len))];
    if matches!(
        tokio::time::timeout(timeout, stream.read_exact(&mut message)).await,
        Ok(Ok(_))
    ) {
        Some(message)
    } else {
        transfers.stats.count(Outcome::Dropped);
        None
    }
}

/// Writes `answer` message by message, each within [`WRITE_TIMEOUT`]; false when the
/// peer stops reading.
async fn write_answer(stream: &mut TcpStream, mut answer: Answer) -> bool {
    while let Some(out) = answer.next_message() {
        let Ok(len) = u16::try_from(out.len()) else {
            return false;
        };
        let mut framed = Vec::with_capacity(out.len() + 2);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(&out);
        if !matches!(
            tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(&framed)).await,
            Ok(Ok(()))
        ) {
            return false;
        }
    }
    true
}

/// UPDATEs over UDP waiting for their answers at once, at most: one more is dropped
/// (counted `busy`; the client retries).
pub const UDP_UPDATES_IN_FLIGHT: usize = 32;

/// Serves SOA queries (and IXFR's SOA) and UPDATE over UDP until `shutdown`.
pub async fn serve_udp(socket: UdpSocket, transfers: Arc<Transfers>, shutdown: CancellationToken) {
    let socket = Arc::new(socket);
    let in_flight = Arc::new(tokio::sync::Semaphore::new(UDP_UPDATES_IN_FLIGHT));
    let mut buf = vec![0u8; 65_535];
    loop {
        let received = tokio::select! {
            () = shutdown.cancelled() => return,
            got = socket.recv_from(&mut buf) => got,
        };
        let Ok((len, peer)) = received else { continue };
        let Some(message) = buf.get(..len) else { continue };
        if crate::update::is_update(message) {
            // Answered by the update task while SOA queries go on here.
            let Ok(permit) = Arc::clone(&in_flight).try_acquire_owned() else {
                transfers.update_stats.count(crate::update::Outcome::Busy);
                continue;
            };
            let (socket, transfers, message) = (Arc::clone(&socket), Arc::clone(&transfers), message.to_vec());
            tokio::spawn(async move {
                if let Some(out) = crate::update::ask(&transfers, peer.ip(), message).await {
                    let _ = socket.send_to(&out, peer).await;
                }
                drop(permit);
            });
            continue;
        }
        let Some((mut answer, outcome)) = respond(&transfers, peer.ip(), message, false, crate::clock::now()) else {
            transfers.stats.count(Outcome::Malformed);
            continue;
        };
        transfers.stats.count(outcome);
        if let Some(out) = answer.next_message() {
            let _ = socket.send_to(&out, peer).await;
        }
    }
}
