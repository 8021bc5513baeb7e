//! Building the response (RFC 1034 §4.3.2, RFC 1035 §4.1, RFC 2308 negative answers,
//! RFC 6604 CNAME chains, RFC 8482 ANY, RFC 6891 EDNS, RFC 2181 §9 truncation).
use std::{cell::Cell, net::IpAddr};

use qdns_zone::{client::client_prefix, dnssec::AnswerKey};

use super::{
    dnssec::{self, Signed},
    lookup::Found,
    policy::{records, MemberAnswer},
    Engine, NodeId, SetRef, ZoneData,
};
use crate::cookies::CookieEcho;
use crate::wire::{
    builder::NameRef,
    edns::{ede_option, nsid_option_header, opt_record, Edns, EDE_LEN, EDE_NOT_AUTHORITATIVE, EDE_NOT_READY, OPT_LEN},
    header::{self, HEADER_LEN},
    parse_query, rtype, Builder, Full, Query, Rcode, Reject,
};

/// Longest CNAME chain followed inside a zone before answering with what we have.
pub const MAX_CNAME_CHAIN: usize = 8;
/// Additional-section targets remembered per response (a set of 30 MX gets all its
/// targets' addresses, as knotd gives them, when they fit).
const MAX_TARGETS: usize = 32;
/// Largest DNS message (TCP, RFC 1035 §4.2.2).
pub const MAX_MESSAGE: usize = 65_535;
/// Largest UDP response without EDNS (RFC 1035 §2.3.4).
pub const CLASSIC_UDP: usize = 512;

/// How the query arrived; decides the response size limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Datagram: 512 octets, or the EDNS payload size capped by our maximum.
    Udp,
    /// Stream: up to 65,535 octets.
    Tcp,
}

/// What was sent back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Octets of the response.
    pub len: usize,
    /// Its response code.
    pub rcode: Rcode,
    /// True when TC was set.
    pub truncated: bool,
    /// The query's QTYPE (0 when the question could not be read).
    pub qtype: u16,
    /// The policy members the answer came from (the first counted policy set
    /// written), for the answer counters.
    pub members: Option<crate::answers::AnsweredMembers>,
    /// The ECS SCOPE PREFIX-LENGTH echoed (0 without ECS, or when the answer does not
    /// depend on the client).
    pub scope: u8,
    /// The COOKIE option sent (RFC 7873), with whether the query's server cookie was
    /// valid (the rate limiter lets such clients through).
    pub cookie: Option<CookieEcho>,
}

/// How a query is answered besides its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asked {
    /// How it arrived.
    pub transport: Transport,
    /// The random draw for weighted and multivalue picks.
    pub draw: u32,
    /// The packet's source address: the client of client-aware sets when the query
    /// carries no ECS (or ECS with SOURCE 0). `None`: the `*` answer.
    pub source: Option<IpAddr>,
}

/// Sections written so far.
#[derive(Clone, Copy, Default)]
struct Counts {
    answer: u16,
    authority: u16,
    additional: u16,
}

/// Result of resolving the question.
struct Resolution {
    rcode: Rcode,
    authoritative: bool,
    counts: Counts,
    /// An Extended DNS Error's INFO-CODE for the OPT record (RFC 8914).
    ede: Option<u16>,
}

/// The names whose addresses go in the additional section.
struct Targets {
    /// (where the name is in the message, its node); positions fit 16 bits (≤ 65,535).
    list: [(u16, NodeId); MAX_TARGETS],
    len: usize,
}

impl Targets {
    fn new() -> Targets {
        Targets {
            list: [(0, 0); MAX_TARGETS],
            len: 0,
        }
    }

    fn push(&mut self, at: usize, node: NodeId) {
        let (Some(slot), Ok(at)) = (self.list.get_mut(self.len), u16::try_from(at)) else {
            return;
        };
        *slot = (at, node);
        self.len += 1;
    }

    fn iter(&self) -> impl Iterator<Item = (usize, NodeId)> + '_ {
        self.list
            .iter()
            .take(self.len)
            .map(|&(at, node)| (usize::from(at), node))
    }
}

impl Engine {
    /// Answers the query in `msg` into `out`; `None` when it must be dropped (too short
    /// to answer, or not a query). Allocation-free.
    pub fn respond(&self, msg: &[u8], out: &mut [u8], transport: Transport) -> Option<Outcome> {
        self.respond_with_draw(msg, out, transport, next_draw())
    }

    /// [`Engine::respond`] with the random draw given (the XDP program's
    /// `bpf_get_prandom_u32`), so both paths can be compared for the same draw.
    pub fn respond_with_draw(&self, msg: &[u8], out: &mut [u8], transport: Transport, draw: u32) -> Option<Outcome> {
        self.respond_with(
            msg,
            out,
            Asked {
                transport,
                draw,
                source: None,
            },
        )
    }

    /// [`Engine::respond`] for a query from `source` (what the servers call: the
    /// client-aware sets decide by it when the query has no ECS).
    pub fn respond_to(&self, msg: &[u8], out: &mut [u8], transport: Transport, source: IpAddr) -> Option<Outcome> {
        self.respond_with(
            msg,
            out,
            Asked {
                transport,
                draw: next_draw(),
                source: Some(source),
            },
        )
    }

    /// Answers as `asked` under the engine's health.
    pub fn respond_with(&self, msg: &[u8], out: &mut [u8], asked: Asked) -> Option<Outcome> {
        let health = self.health.load();
        self.respond_under(msg, out, asked, &health)
    }

    /// [`Engine::respond_with_draw`] under the health `bitmap` given rather than the
    /// engine's: the XDP table compiler asks it for each outcome of a signed policy set.
    pub(crate) fn respond_under(&self, msg: &[u8], out: &mut [u8], asked: Asked, bitmap: &[u64]) -> Option<Outcome> {
        let Asked {
            transport,
            draw,
            source,
        } = asked;
        let mut query = Query::EMPTY;
        match query.read(msg) {
            Ok(()) => {}
            Err(Reject::Drop) => return None,
            Err(Reject::Respond {
                rcode,
                question_end,
                edns,
            }) => {
                return self.reject(msg, out, (transport, source), rcode, question_end, edns);
            }
        }
        let edns = query.edns.as_ref();
        if edns.is_some_and(|e| e.bad_cookie) && self.cookies.is_some() {
            // RFC 7873 §5.2.2: a COOKIE option of a forbidden length.
            return self.reject(
                msg,
                out,
                (transport, source),
                Rcode::FormErr,
                query.question_end,
                query.edns,
            );
        }
        let limit = self.size_limit(transport, edns);
        let mut b = Builder::new(out, limit);
        let question = msg.get(HEADER_LEN..query.question_end)?;
        let base = response_flags(query.header.flags);
        b.put(&query.header.id.to_be_bytes()).ok()?;
        b.put(&[0; 10]).ok()?;
        b.put(question).ok()?;
        b.set_u16(4, 1);
        let opt = self.opt(edns, source);
        if let Some(edns) = edns {
            if edns.version > 0 {
                return finish(b, base, Rcode::BadVers, Counts::default(), &opt, 0, query.qtype);
            }
        }
        if !self.ready {
            // No snapshot yet (RFC 8914 §4.15): a resolver asks another server.
            let opt = Opt {
                ede: Some(EDE_NOT_READY),
                ..opt
            };
            return finish(b, base, Rcode::ServFail, Counts::default(), &opt, 0, query.qtype);
        }
        if edns.is_some() {
            b.reserve(opt.len());
        }
        let members = std::cell::Cell::new(None);
        let ecs = edns.and_then(|e| e.ecs);
        let scope = Cell::new(0);
        let ctx = Ctx {
            bitmap,
            draw,
            question: NameRef::literal(HEADER_LEN, query.qname.as_wire()),
            members: &members,
            sign: false,
            client: match ecs {
                Some(ecs) if ecs.source > 0 => Some(client_prefix(Some((ecs.ip(), ecs.source)), ecs.ip())),
                _ => source,
            },
            scope: &scope,
        };
        let resolved = self.resolve(&query, &mut b, &ctx);
        let fitted = resolved.is_ok();
        let (flags, rcode, counts, ede) = if let Ok(r) = resolved {
            (
                base | if r.authoritative { header::AA } else { 0 },
                r.rcode,
                r.counts,
                r.ede,
            )
        } else {
            // Did not fit: header, question and OPT only, TC set (RFC 2181 §9). AA still
            // says whether we are the authority for the name (RFC 1035 §4.1.1):
            // truncation does not change that.
            b.truncate(query.question_end);
            let aa = if self.is_authoritative_for(&query) {
                header::AA
            } else {
                0
            };
            (base | header::TC | aa, Rcode::NoError, Counts::default(), None)
        };
        b.release(opt.len());
        // An error's EDE (only on answers without records: the room reserved for the
        // OPT record is ample).
        let opt = Opt { ede, ..opt };
        // A truncated response carries no member's records.
        let members = if fitted { members.get() } else { None };
        let scope = echoed_scope(ecs, scope.get());
        let mut outcome = finish(b, flags, rcode, counts, &opt, scope, query.qtype)?;
        outcome.members = members;
        Some(outcome)
    }

    /// Rewrites `out`, holding the response [`Engine::respond`] made to `msg`, into its
    /// slipped form for the rate limiter (`qdns_abi::rrl`): the same header with TC=1
    /// and no records, the question, our OPT (with the same cookie) — what the XDP
    /// stage makes of the same answer. `None` when `msg` is not a query it could have
    /// answered (then drop it).
    pub fn slip(&self, msg: &[u8], out: &mut [u8], response: Outcome) -> Option<Outcome> {
        let query = parse_query(msg).ok()?;
        let flags = u16::from_be_bytes([*out.get(2)?, *out.get(3)?]) & !header::RCODE_MASK | header::TC;
        let mut b = Builder::new(out, self.size_limit(Transport::Udp, query.edns.as_ref()));
        // The header and question are already in place: keep them.
        b.advance(query.question_end);
        let opt = Opt {
            cookie: response.cookie,
            ..self.opt(query.edns.as_ref(), None)
        };
        finish(
            b,
            flags,
            response.rcode,
            Counts::default(),
            &opt,
            response.scope,
            query.qtype,
        )
    }

    /// Our OPT record for a query's `edns` from `source`: none without one; NSID
    /// (RFC 5001 §2.3) when asked for and configured; a COOKIE (RFC 7873 §5.2) when the
    /// query has one, cookies are on and the client's address is known.
    fn opt<'a>(&'a self, edns: Option<&'a Edns>, source: Option<IpAddr>) -> Opt<'a> {
        let cookie = match (edns.and_then(|e| e.cookie), &self.cookies, source) {
            (Some(option), Some(jar), Some(client)) => Some(CookieEcho::new(&option, jar.answer(&option, client))),
            _ => None,
        };
        Opt {
            edns,
            payload: self.max_udp_payload,
            nsid: self.nsid.as_deref().filter(|_| edns.is_some_and(|e| e.nsid)),
            cookie,
            ede: None,
        }
    }

    fn size_limit(&self, transport: Transport, edns: Option<&Edns>) -> usize {
        match (transport, edns) {
            (Transport::Tcp, _) => MAX_MESSAGE,
            (Transport::Udp, None) => CLASSIC_UDP,
            (Transport::Udp, Some(edns)) => usize::from(edns.udp_payload.min(self.max_udp_payload)).max(CLASSIC_UDP),
        }
    }

    /// FORMERR / NOTIMP for queries we cannot answer normally.
    fn reject(
        &self,
        msg: &[u8],
        out: &mut [u8],
        (transport, source): (Transport, Option<IpAddr>),
        rcode: Rcode,
        question_end: usize,
        edns: Option<Edns>,
    ) -> Option<Outcome> {
        let header = header::Header::read(msg)?;
        let mut b = Builder::new(out, self.size_limit(transport, edns.as_ref()));
        b.put(&header.id.to_be_bytes()).ok()?;
        b.put(&[0; 10]).ok()?;
        if question_end > HEADER_LEN {
            b.put(msg.get(HEADER_LEN..question_end)?).ok()?;
            b.set_u16(4, 1);
        }
        let flags = response_flags(header.flags) | (header.flags & header::OPCODE_MASK);
        let qtype = if question_end > HEADER_LEN {
            msg.get(question_end - 4..question_end - 2)
                .map_or(0, |t| u16::from_be_bytes([t[0], t[1]]))
        } else {
            0
        };
        finish(
            b,
            flags,
            rcode,
            Counts::default(),
            &self.opt(edns.as_ref(), source),
            0,
            qtype,
        )
    }

    /// True when the answer for the question comes from our authority: a zone holds the
    /// name and it is not at or below a cut (the referral's AA is clear).
    fn is_authoritative_for(&self, query: &Query) -> bool {
        if !rtype::answers_class(query.qclass) {
            return false;
        }
        self.zone_for(&query.qname)
            .is_some_and(|zone| !matches!(zone.find(query.qname.as_wire(), query.qtype), Found::Referral(_)))
    }

    /// RFC 1034 §4.3.2 from step 2 on.
    #[expect(
        clippy::too_many_lines,
        reason = "RFC 1034 §4.3.2 step by step, each step with its RFC 4035 §3.1 signing beside it"
    )]
    fn resolve(&self, query: &Query, b: &mut Builder<'_>, ctx: &Ctx<'_>) -> Result<Resolution, Full> {
        let refused = Resolution {
            rcode: Rcode::Refused,
            authoritative: false,
            counts: Counts::default(),
            ede: None,
        };
        if !rtype::answers_class(query.qclass) {
            return Ok(refused);
        }
        match query.qtype {
            rtype::AXFR | rtype::IXFR => return Ok(refused),
            rtype::MAILA | rtype::MAILB => {
                return Ok(Resolution {
                    rcode: Rcode::NotImp,
                    ..refused
                })
            }
            _ => {}
        }
        let Some(zone) = self.zone_for_type(&query.qname, query.qtype) else {
            // RFC 8914 §4.21 (as knotd answers): not a name of ours.
            return Ok(Resolution {
                ede: Some(EDE_NOT_AUTHORITATIVE),
                ..refused
            });
        };
        let mut counts = Counts::default();
        let mut current = ctx.question;
        let mut targets = Targets::new();
        // DO=1 for a signed zone: RRSIGs beside every set, NSEC proofs in authority.
        let signed = zone
            .signed
            .as_deref()
            .filter(|_| query.edns.as_ref().is_some_and(|e| e.dnssec_ok));
        // Names answered from wildcards: their NSEC proofs go in authority at the end.
        let mut proofs = Proofs::default();
        // What RDATA names are compressed against: the question, or for an answer
        // synthesised from a wildcard its closest encloser (see below).
        let mut here = Ctx {
            question: ctx.question,
            sign: signed.is_some(),
            ..*ctx
        };
        // The nodes the chain has answered from: a CNAME back to one of them is a loop,
        // answered with the records so far (RFC 1034 §3.6.2, RFC 2181 §5).
        let mut visited: [NodeId; MAX_CNAME_CHAIN + 1] = [NodeId::MAX; MAX_CNAME_CHAIN + 1];
        for chain in 0..=MAX_CNAME_CHAIN {
            let found = zone.find(current.wire, query.qtype);
            let id = match found {
                Found::Referral(cut) if chain == 0 => return referral(zone, cut, current, b, signed),
                // A chain into a delegation: step 3 restarted at the target goes on to
                // 3b, the referral — the cut's NS in authority, glue in additional —
                // after the CNAMEs, which we answer with authority (RFC 1034 §4.3.2).
                Found::Referral(cut) => {
                    if let Some(signed) = signed {
                        counts.authority += proofs.put(zone, signed, b, ctx.question)?;
                    }
                    let delegation = referral(zone, cut, current, b, signed)?;
                    counts.authority += delegation.counts.authority;
                    counts.additional += delegation.counts.additional;
                    break;
                }
                Found::NxDomain => {
                    counts.authority += put_negative(zone, current, b, signed)?;
                    if let Some(signed) = signed {
                        // RFC 4035 §3.1.3.2: the name's absence, and the wildcard's.
                        proofs.push(signed.cover(zone, current.wire));
                        if let Some(encloser) = zone.closest_encloser(current.wire) {
                            let mut star = [0u8; 257];
                            if let Some(len) = dnssec::wildcard_of(zone.names.name(encloser), &mut star) {
                                proofs.push(signed.cover(zone, star.get(..len).unwrap_or_default()));
                            }
                        }
                        counts.authority += proofs.put(zone, signed, b, ctx.question)?;
                    }
                    return Ok(Resolution {
                        rcode: Rcode::NxDomain,
                        authoritative: true,
                        counts,
                        ede: None,
                    });
                }
                Found::Node(id) => id,
                // Synthesis (RFC 4592 §3.3.1): RDATA names are compressed against the
                // closest encloser only — the labels the wildcard stands for are the
                // query's own — so the answers for every name it covers differ only by
                // where the encloser sits in the question, and the XDP program relocates
                // one copy (as for referrals).
                Found::Wildcard(id) => {
                    // RFC 4035 §3.1.3.3: the name itself does not exist.
                    if let Some(signed) = signed {
                        proofs.push(signed.cover(zone, current.wire));
                    }
                    if let (0, Some(star)) = (chain, zone.node(id)) {
                        let encloser = star.name.len().saturating_sub(2);
                        here.question = ctx.question.suffix(ctx.question.wire.len().saturating_sub(encloser));
                    }
                    id
                }
            };
            if visited.contains(&id) {
                break;
            }
            if let Some(slot) = visited.get_mut(chain) {
                *slot = id;
            }
            let Some(node) = zone.node(id) else { break };
            // RRSIG asked for at a name of a signed zone: the signatures there, as BIND
            // and NSD answer it (whatever DO says).
            if query.qtype == rtype::RRSIG && chain == 0 && !matches!(found, Found::Wildcard(_)) {
                if let Some(all) = zone.signed.as_deref() {
                    let written = put_signatures(all, b, current, id, node.each_set())?;
                    if written > 0 {
                        counts.answer += written;
                        break;
                    }
                }
            }
            let wanted = if query.qtype == rtype::ANY {
                // RFC 8482 §4.1: one RRset is enough.
                node.first_set()
            } else {
                node.rrset(query.qtype)
            };
            if let Some(set) = wanted {
                let written = put_set(zone, &here, b, current, set, &mut targets, 0)?;
                counts.answer += written.count;
                if let Some(signed) = signed {
                    counts.answer += signed.put_rrsig(b, current, id, set.rtype, written.key)?;
                    counts.authority += proofs.put(zone, signed, b, ctx.question)?;
                }
                counts.additional += put_additional(zone, &targets, b, false, here.question)?;
                break;
            }
            // RRSIG and NSEC stand beside a CNAME (RFC 2181 §10.1, RFC 4035 §2.5): a
            // query for them is not chased.
            let cname = node.rrset(rtype::CNAME).filter(|_| !stands_beside_cname(query.qtype));
            let Some(cname) = cname else {
                counts.authority += put_negative(zone, current, b, signed)?;
                if let Some(signed) = signed {
                    // NODATA (RFC 4035 §3.1.3.1): the NSEC at the name (or covering an
                    // empty non-terminal); from a wildcard, the wildcard's NSEC too.
                    proofs.push(if node.sets.is_empty() {
                        signed.cover(zone, node.name)
                    } else {
                        Some(id)
                    });
                    counts.authority += proofs.put(zone, signed, b, ctx.question)?;
                }
                break;
            };
            let written = put_set(zone, &here, b, current, cname, &mut targets, 0)?;
            counts.answer += written.count;
            if let Some(signed) = signed {
                counts.answer += signed.put_rrsig(b, current, id, rtype::CNAME, written.key)?;
            }
            // The chain goes on from the (first) CNAME's target, already in the message.
            let Some(target) = written.first_rdata else { break };
            if !qdns_zone::name::is_at_or_below(target.wire, &zone.apex) {
                break;
            }
            current = target;
        }
        Ok(Resolution {
            rcode: Rcode::NoError,
            authoritative: true,
            counts,
            ede: None,
        })
    }
}

/// The RRSIGs of every plain set in `sets` at `node` (a policy set's signatures depend on
/// the answer it gives, so they come with that answer only); how many.
fn put_signatures<'z>(
    signed: &dnssec::Signed,
    b: &mut Builder<'_>,
    owner: NameRef<'_>,
    node: NodeId,
    sets: impl Iterator<Item = SetRef<'z>>,
) -> Result<u16, Full> {
    let mut written = 0;
    for set in sets.filter(|set| set.policy.is_none()) {
        written += signed.put_rrsig(b, owner, node, set.rtype, dnssec::key_of(set))?;
    }
    Ok(written)
}

/// Types that may own data beside a CNAME, so a query for them at a CNAME owner is
/// answered there (NODATA when absent) instead of following the alias.
pub(super) fn stands_beside_cname(qtype: u16) -> bool {
    qtype == rtype::RRSIG || qtype == rtype::NSEC
}

/// A referral: the cut's NS set in authority, glue in additional, AA clear.
/// RDATA names are compressed against the cut's name only (not the whole question), so
/// the referral's bytes differ between names below the cut by the offset of the cut in
/// the question alone: the XDP program relocates one precomputed copy.
fn referral(
    zone: &ZoneData,
    cut: NodeId,
    current: NameRef<'_>,
    b: &mut Builder<'_>,
    signed: Option<&Signed>,
) -> Result<Resolution, Full> {
    let mut counts = Counts::default();
    let Some(node) = zone.node(cut) else {
        return Ok(Resolution {
            rcode: Rcode::ServFail,
            authoritative: false,
            counts,
            ede: None,
        });
    };
    let owner = current.suffix(current.wire.len().saturating_sub(node.name.len()));
    let mut targets = Targets::new();
    if let Some(ns) = node.rrset(rtype::NS) {
        counts.authority += put_rrset(b, owner, ns, &mut targets, owner)?.0;
    }
    if let Some(signed) = signed {
        // RFC 4035 §3.1.4: the signed DS, or the NSEC proving there is none.
        if let Some(ds) = node.rrset(rtype::DS) {
            counts.authority += put_rrset(b, owner, ds, &mut Targets::new(), owner)?.0;
            counts.authority += signed.put_rrsig(b, owner, cut, rtype::DS, dnssec::key_of(ds))?;
        } else {
            counts.authority += signed.put_nsec(zone, b, cut, owner)?;
        }
    }
    // Glue is required for in-domain servers: if it does not fit, TC (RFC 9471 §3).
    counts.additional += put_additional(zone, &targets, b, true, owner)?;
    Ok(Resolution {
        rcode: Rcode::NoError,
        authoritative: false,
        counts,
        ede: None,
    })
}

/// The zone's SOA in authority, owner pointing at the apex inside `current`; its RRSIG
/// when signing.
fn put_negative(
    zone: &ZoneData,
    current: NameRef<'_>,
    b: &mut Builder<'_>,
    signed: Option<&Signed>,
) -> Result<u16, Full> {
    let apex = current.suffix(current.wire.len().saturating_sub(zone.apex.len()));
    b.put_name(apex)?;
    b.put(&zone.negative_soa)?;
    match signed {
        Some(signed) => Ok(1 + signed.put_soa_rrsig(b, apex)?),
        None => Ok(1),
    }
}

/// NSEC records an answer must carry in authority (each once).
#[derive(Default)]
struct Proofs {
    nodes: [NodeId; MAX_CNAME_CHAIN + 3],
    len: usize,
    /// How many of `nodes` are written.
    written: usize,
}

impl Proofs {
    fn push(&mut self, node: Option<NodeId>) {
        let Some(node) = node else { return };
        if self.nodes.get(..self.len).is_some_and(|n| n.contains(&node)) {
            return;
        }
        if let Some(slot) = self.nodes.get_mut(self.len) {
            *slot = node;
            self.len += 1;
        }
    }

    /// Writes the proofs not yet written.
    fn put(
        &mut self,
        zone: &ZoneData,
        signed: &Signed,
        b: &mut Builder<'_>,
        question: NameRef<'_>,
    ) -> Result<u16, Full> {
        let mut count = 0;
        while self.written < self.len {
            let node = self.nodes.get(self.written).copied().unwrap_or(NodeId::MAX);
            self.written += 1;
            count += signed.put_nsec(zone, b, node, question)?;
        }
        Ok(count)
    }
}

/// What the query path reads besides the zones: the health bitmap, the random draw and
/// where the question name is (RDATA names are compressed against it).
struct Ctx<'h> {
    bitmap: &'h [u64],
    draw: u32,
    question: NameRef<'h>,
    /// The first counted policy set written, and the members it chose (one cell for
    /// the question's contexts).
    members: &'h std::cell::Cell<Option<crate::answers::AnsweredMembers>>,
    /// Signing: keep the [`AnswerKey`] of what is written.
    sign: bool,
    /// The client address client-aware sets decide by (`None`: their `*` answer).
    client: Option<IpAddr>,
    /// The longest scope of the client-aware decisions written (the answer holds for
    /// the intersection of their prefixes around the client: the longest).
    scope: &'h Cell<u8>,
}

/// Longest alias chain followed (the zone loader rejects loops).
const MAX_ALIAS_DEPTH: u32 = 8;

/// Records written for one set.
struct Written<'z> {
    count: u16,
    /// The first record's RDATA and where it sits in the message (CNAME chasing).
    first_rdata: Option<NameRef<'z>>,
    /// The answer's key, when signing (its RRSIG is found by it).
    key: AnswerKey,
}

/// Writes `set` owned by `owner`: all records of a plain set, or the members its policy
/// picks (following aliases to the target set's own pick).
fn put_set<'z>(
    zone: &'z ZoneData,
    ctx: &Ctx<'_>,
    b: &mut Builder<'_>,
    owner: NameRef<'_>,
    set: SetRef<'z>,
    targets: &mut Targets,
    depth: u32,
) -> Result<Written<'z>, Full> {
    let Some(policy) = set.policy else {
        let (count, first_rdata) = put_rrset(b, owner, set, targets, ctx.question)?;
        let key = if ctx.sign {
            dnssec::key_of(set)
        } else {
            AnswerKey::default()
        };
        return Ok(Written {
            count,
            first_rdata,
            key,
        });
    };
    let picked = policy.pick(ctx.bitmap, ctx.draw.rotate_left(depth * 11), ctx.client);
    ctx.scope.set(ctx.scope.get().max(picked.scope));
    if ctx.members.get().is_none() && policy.counter() != qdns_abi::answer::NO_ANSWER_COUNTER {
        ctx.members.set(Some(crate::answers::AnsweredMembers {
            counter: policy.counter(),
            mask: picked.mask,
        }));
    }
    let mut written = Written {
        count: 0,
        first_rdata: None,
        key: AnswerKey::default(),
    };
    let mut owner = owner;
    // The chosen members in index order, by their bits (a walk over all 64 indexes
    // was a third of this function's time for a one-member answer).
    let mut rest = picked.mask;
    while rest != 0 {
        let index = rest.trailing_zeros() as usize;
        rest &= rest - 1;
        match policy.member(index) {
            Some(MemberAnswer::Records { normal, degraded }) => {
                let blob: &'z [u8] = if picked.degraded { degraded } else { normal };
                // Member records go out as stored (the XDP program copies the same
                // bytes): RDATA names uncompressed.
                for (_, record) in records(blob) {
                    owner = b.put_name(owner)?;
                    let record_at = b.len();
                    b.put(record)?;
                    if written.first_rdata.is_none() {
                        written.first_rdata = literal_rdata(record_at, record);
                    }
                    if ctx.sign {
                        written.key.add_record(record);
                    }
                    written.count += 1;
                }
            }
            Some(&MemberAnswer::Alias(node)) if depth < MAX_ALIAS_DEPTH => {
                let Some(target) = zone.node(node).and_then(|n| n.rrset(set.rtype)) else {
                    continue;
                };
                let inner = put_set(zone, ctx, b, owner, target, targets, depth + 1)?;
                written.count += inner.count;
                written.key.merge(inner.key);
                if written.first_rdata.is_none() {
                    written.first_rdata = inner.first_rdata;
                }
            }
            _ => {}
        }
    }
    Ok(written)
}

/// The RDATA of `record`, written as stored at `record_at`, as a literal name.
fn literal_rdata(record_at: usize, record: &[u8]) -> Option<NameRef<'_>> {
    let rdlen = usize::from(u16::from_be_bytes([*record.get(8)?, *record.get(9)?]));
    Some(NameRef::literal(record_at + 10, record.get(10..10 + rdlen)?))
}

/// Where the one name of a type's RDATA starts, for the types whose RDATA names may be
/// compressed (RFC 1035 §3.3; RFC 3597 §4 forbids it for every later type).
fn compressible_name_at(rtype: u16) -> Option<usize> {
    match rtype {
        rtype::NS | rtype::CNAME | rtype::PTR => Some(0),
        rtype::MX => Some(2),
        _ => None,
    }
}

thread_local! {
    /// Per-thread xorshift state for the policy draws (seeded once per thread).
    static DRAW: Cell<u32> = const { Cell::new(0) };
}

/// The next random draw of this thread.
fn next_draw() -> u32 {
    DRAW.with(|state| {
        let mut x = state.get();
        if x == 0 {
            // Seeded from the clock and this thread's slot address: no allocation.
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            x = (nanos ^ (std::ptr::from_ref(state) as usize as u32).rotate_left(16)) | 1;
        }
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        state.set(x);
        x
    })
}

/// Writes every record of `set` owned by `owner`, RDATA names compressed against the
/// question; remembers additional-section targets. Returns the count and where the
/// first record's RDATA name is (CNAME chasing).
fn put_rrset<'z>(
    b: &mut Builder<'_>,
    mut owner: NameRef<'_>,
    set: SetRef<'z>,
    targets: &mut Targets,
    question: NameRef<'_>,
) -> Result<(u16, Option<NameRef<'z>>), Full> {
    let name_at = compressible_name_at(set.rtype);
    let mut first = None;
    for (at, record) in set.each_record() {
        owner = b.put_name(owner)?;
        let record_at = b.len();
        let name = match (name_at, record.get(..8), record.get(10..)) {
            (Some(prefix), Some(fixed), Some(rdata)) if rdata.len() > prefix => {
                b.put(fixed)?;
                let rdlen_at = b.len();
                b.put_u16(0)?;
                b.put(rdata.get(..prefix).unwrap_or_default())?;
                let name = b.put_rdata_name(rdata.get(prefix..).unwrap_or_default(), question)?;
                b.set_u16(rdlen_at, (b.len() - rdlen_at - 2) as u16);
                Some(name)
            }
            _ => {
                b.put(record)?;
                literal_rdata(record_at, record)
            }
        };
        if first.is_none() {
            first = name;
        }
        for target in set.targets {
            let offset = target.offset as usize;
            if offset >= at && offset < at + record.len() {
                targets.push(record_at + offset - at, target.node);
            }
        }
    }
    Ok((set.count, first))
}

/// A and AAAA of each target. Optional data that does not fit is left out whole set by
/// whole set (later, smaller sets may still go in); `required` data (glue) that does
/// not fit makes the answer truncated.
fn put_additional(
    zone: &ZoneData,
    targets: &Targets,
    b: &mut Builder<'_>,
    required: bool,
    question: NameRef<'_>,
) -> Result<u16, Full> {
    let mut added = 0;
    for (at, id) in targets.iter() {
        let Some(node) = zone.node(id) else { continue };
        let owner = NameRef::literal(at, node.name);
        for rr_type in [rtype::A, rtype::AAAA] {
            let Some(set) = node.rrset(rr_type) else {
                continue;
            };
            let mark = b.len();
            match put_rrset(b, owner, set, &mut Targets::new(), question) {
                Ok((count, _)) => added += count,
                // A smaller set further on may still fit (as knotd fills it).
                Err(Full) if !required => b.truncate(mark),
                Err(Full) => return Err(Full),
            }
        }
    }
    Ok(added)
}

/// The SCOPE PREFIX-LENGTH echoed for the query's Client Subnet `ecs` when the answer
/// was decided at `scope` bits. RFC 7871 §7.1.2: SOURCE 0 asked that no client address
/// be used: scope 0. A SOURCE over the cap was decided by its first /24 or /56 only, so
/// the echoed scope (which the resolver applies around the address it sent) says no
/// more (a SCOPE over a SOURCE within the cap is RFC 7871 §7.2.1's "more bits would
/// tell": the resolver caches at SOURCE).
#[inline]
fn echoed_scope(ecs: Option<crate::wire::edns::ClientSubnet>, scope: u8) -> u8 {
    match ecs {
        Some(e) if e.source > 0 => {
            let cap = qdns_zone::client::ecs_cap(e.family);
            if e.source > cap {
                scope.min(cap)
            } else {
                scope
            }
        }
        _ => 0,
    }
}

/// QR set; RD and CD copied from the query.
fn response_flags(query_flags: u16) -> u16 {
    header::QR | (query_flags & (header::RD | header::CD))
}

/// The OPT record a response carries.
#[derive(Clone, Copy)]
struct Opt<'a> {
    /// The query's (borrowed: an `Edns` is about 70 octets, and each copy of it on the
    /// answer path cost a store-forwarding stall); none, none in the response.
    edns: Option<&'a Edns>,
    /// The UDP size we advertise.
    payload: u16,
    /// Our NSID, when the query asked for it.
    nsid: Option<&'a [u8]>,
    /// The COOKIE option, when the query had one.
    cookie: Option<CookieEcho>,
    /// An Extended DNS Error INFO-CODE (RFC 8914), last of the options.
    ede: Option<u16>,
}

impl Opt<'_> {
    /// Octets it takes.
    fn len(&self) -> usize {
        let Some(edns) = self.edns else { return 0 };
        OPT_LEN
            + self.nsid.map_or(0, |id| 4 + id.len())
            + edns.ecs.map_or(0, |ecs| ecs.option_len())
            + self.cookie.map_or(0, |_| qdns_abi::cookie::ECHO_LEN)
            + self.ede.map_or(0, |_| EDE_LEN)
    }
}

/// Writes the OPT record (a Client Subnet option echoed with SCOPE PREFIX-LENGTH `scope`,
/// RFC 7871 §7.2.1: 0 when the answer does not depend on the client), the flags, RCODE
/// and section counts.
///
/// The `Opt` is borrowed and the outcome made whole here, QTYPE included: moving these
/// cookie-carrying structs by value between functions cost the answer path two
/// store-forwarding stalls (a quarter of `respond_under`'s own time); inlined, so the
/// builder and the outcome are not moved through the call either.
#[expect(
    clippy::inline_always,
    reason = "measured (answer bench, alternated runs): inlined, 10-20 ns less per answer than left to the compiler"
)]
#[inline(always)]
fn finish(
    mut b: Builder<'_>,
    flags: u16,
    rcode: Rcode,
    counts: Counts,
    opt: &Opt<'_>,
    scope: u8,
    qtype: u16,
) -> Option<Outcome> {
    let mut additional = counts.additional;
    if let Some(edns) = opt.edns {
        let mut record = opt_record(opt.payload, rcode.extended_bits(), edns.dnssec_ok);
        let rdlen = (opt.len() - OPT_LEN) as u16;
        record[9..11].copy_from_slice(&rdlen.to_be_bytes());
        b.put(&record).ok()?;
        if let Some(id) = opt.nsid {
            b.put(&nsid_option_header(id)).ok()?;
            b.put(id).ok()?;
        }
        if let Some(ecs) = edns.ecs {
            b.put(&ecs.echo(scope)[..ecs.option_len()]).ok()?;
        }
        if let Some(cookie) = opt.cookie {
            b.put(&cookie.octets()).ok()?;
        }
        if let Some(code) = opt.ede {
            b.put(&ede_option(code)).ok()?;
        }
        additional += 1;
    }
    b.set_u16(2, flags | rcode.header_bits());
    b.set_u16(6, counts.answer);
    b.set_u16(8, counts.authority);
    b.set_u16(10, additional);
    Some(Outcome {
        len: b.len(),
        rcode,
        truncated: flags & header::TC != 0,
        qtype,
        members: None,
        scope,
        cookie: opt.cookie,
    })
}
