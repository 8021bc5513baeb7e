//! Compiling an [`Engine`] into the XDP answer tables (layouts in `qdns_abi::answer`).
//!
//! Plain answers are not rebuilt here: each is the engine's own response to a
//! synthesised lowercase query with EDNS (so at most our own UDP limit), cut after the
//! question — so the fast path sends exactly what user space would. The program holds
//! each answer to the client's limit and passes it when over (user space then sets TC
//! or trims optional records). An entry is made only when the response does not depend
//! on DO, equals the no-EDNS response wherever that fits 512 octets, and fits the table
//! (tails over 128 octets go to the large table); otherwise the name and type get a
//! `PASS` entry with its reason, so the node entry cannot answer NODATA in its place.
//! Policy sets keep their members' record bytes and a decision per health combination,
//! computed with the `qdns-abi` selection functions. Referrals: see [`Compiler::referral`].
use qdns_abi::{
    answer::{
        fold, sum_words, AnswerKey, AnswerValue, LongName, PolicyKey, PolicyValue, DO_SALT, KIND_CLIENT, KIND_NODE,
        KIND_PASS, KIND_PLAIN, KIND_POLICY, KIND_REFERRAL, LARGE_TAIL_MAX, NAME_MAX, NODE_NODATA, NODE_NXDOMAIN,
        NODE_WILDCARD, PLAIN_ANY_QNAME, PLAIN_LARGE, QTYPE_ANY, QTYPE_NODE, REASON_CLIENT_AWARE, REASON_LARGE,
        REASON_OTHER, REASON_REFERRAL, RESPONSE_MAX, SIGNED, TAIL_MAX, WIRE_NAME_MAX,
    },
    name::{name_hash, words_of, FRONT_WORDS, LONG_WORDS, NAME_WORDS},
};

use crate::{
    engine::{
        export::{NodeView, PolicyView},
        Engine, Transport,
    },
    wire::edns::{opt_record, OPT_LEN},
};

mod client;
mod policy;
mod tails;

use client::ClientTables;
use policy::{policy_value, unfit_reason, SignedSet};
pub use tails::Tail;
use tails::{large_id, large_tail, relocatable, share_large_tails, split_medium_tails, Relocatable};

/// The entries of one generation.
#[derive(Default)]
pub struct Table {
    /// Answer table entries.
    pub answers: Vec<(AnswerKey, AnswerValue)>,
    /// Policy table entries.
    pub policies: Vec<(PolicyKey, PolicyValue)>,
    /// Large tails (answers over 128 octets after the question).
    pub large: Vec<(PolicyKey, Tail)>,
    /// Medium tails: the large tails of plain answers of at most 512 octets, moved
    /// here once the table is complete (`split_medium_tails`).
    pub medium: Vec<(PolicyKey, Tail)>,
    /// The front words of names over 64 octets: entry `i` has id `i + 1` (id 0 is the
    /// all-zero front of every shorter name).
    pub long_names: Vec<LongName>,
    /// Client-aware sets, their blocks and class chains (their chains are policy
    /// entries).
    pub client: ClientTables,
}

/// How many entries of each kind a table holds (for logs and `qdnsctl status`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TableStats {
    /// Precomputed answers.
    pub plain: usize,
    /// Policy sets (client-aware sets: one per chain).
    pub policy: usize,
    /// Client-aware sets.
    pub client: usize,
    /// Their address blocks.
    pub client_blocks: usize,
    /// Block tables of one family searched through a first-level index.
    pub client_indexed: usize,
    /// Node entries (NODATA / NXDOMAIN).
    pub nodes: usize,
    /// Names and types left to user space.
    pub pass: usize,
    /// Names over 64 octets (answered by the long-name stage).
    pub long_names: usize,
    /// Large tails (over 512 octets, or with pointers to relocate).
    pub large: usize,
    /// Medium tails (129 to 512 octets).
    pub medium: usize,
    /// Names at or below a zone cut answered with a relocated referral.
    pub referral: usize,
    /// Entries left without a slot in a crowded bucket (their queries go to user
    /// space; see `qdns_abi::slots`).
    pub crowded: usize,
    /// Octets of the generation's arrays (records, slot buckets, policy sets, large
    /// tails), as the kernel allocates them.
    pub bytes: usize,
}

const QR_AA: u16 = 0x8400;
const HEADER_LEN: usize = 12;

impl Table {
    /// Counts by kind.
    #[must_use]
    pub fn stats(&self) -> TableStats {
        let mut stats = TableStats {
            policy: self.policies.len(),
            large: self.large.len(),
            medium: self.medium.len(),
            long_names: self.long_names.len(),
            client: self.client.sets.len(),
            client_blocks: self.client.blocks.len(),
            client_indexed: self.client.index.len() / qdns_abi::client::INDEX_ENTRIES as usize,
            ..TableStats::default()
        };
        for (_, value) in &self.answers {
            match value.kind {
                KIND_PLAIN => stats.plain += 1,
                KIND_NODE if value.node_flags != 0 => stats.nodes += 1,
                KIND_REFERRAL => stats.referral += 1,
                KIND_POLICY | KIND_CLIENT => {}
                _ => stats.pass += 1,
            }
        }
        stats
    }
}

/// The table of `engine` for `generation`.
#[must_use]
pub fn compile(engine: &Engine, generation: u32, max_message: usize) -> Table {
    let mut c = Compiler {
        engine,
        scratch: vec![0u8; crate::engine::MAX_MESSAGE],
        large: Vec::new(),
        generation,
        limits: Limits { max_message },
    };
    let mut table = Table::default();
    let nodes: Vec<NodeView<'_>> = engine.export();
    // The zone cuts (NS below an apex: below_cut with an NS set) and each one's
    // relocatable referral, built once and shared by every node at or below it.
    let mut referrals: std::collections::HashMap<&[u8], AnswerValue> = std::collections::HashMap::new();
    for node in nodes
        .iter()
        .filter(|n| n.below_cut && n.sets.iter().any(|(t, _)| *t == 2))
    {
        referrals.insert(node.name, c.referral(node.name));
    }
    for node in &nodes {
        node_entries(&mut c, &mut table, node, &referrals);
    }
    table.large = c.large;
    pass_collisions(&mut table.answers);
    share_large_tails(&mut table, generation);
    split_medium_tails(&mut table, generation);
    table
}

/// What each entry of one table is compiled with: the engine asked, a message buffer,
/// the tails over 128 octets made so far, the generation and the links' limit.
struct Compiler<'e> {
    engine: &'e Engine,
    scratch: Vec<u8>,
    large: Vec<(PolicyKey, Tail)>,
    generation: u32,
    limits: Limits,
}

/// A client-aware set's entry: `KIND_CLIENT` naming its rules and chains when the tables
/// hold them whole, else a pass (`pass_client_aware`); in a signed zone, its DO=1
/// entries per chain and outcome (none when they do not fit: those queries pass,
/// `pass_signed`).
fn client_entry(
    c: &mut Compiler<'_>,
    (client, policies): (&mut ClientTables, &mut Vec<(PolicyKey, PolicyValue)>),
    policy: &PolicyView<'_>,
    name: &[u8],
    rtype: u16,
    signed: bool,
) -> (AnswerValue, Vec<(AnswerKey, AnswerValue)>) {
    let first_chain = policies.len();
    let Some(id) = client.add(policies, c.generation, policy, name.len()) else {
        return (pass_because(KIND_PASS, REASON_CLIENT_AWARE), Vec::new());
    };
    let variants = if signed {
        let chains: Vec<(&PolicyValue, Option<std::net::IpAddr>)> = policies[first_chain..]
            .iter()
            .map(|(_, chain)| chain)
            .zip(client.representatives(id))
            .collect();
        c.signed_client(name, rtype, id, &chains)
    } else {
        Vec::new()
    };
    let mut v = pass(KIND_CLIENT);
    v.policy = id;
    (v, variants)
}

/// A policy set's entry (`KIND_POLICY` naming its decisions, or a pass when they do not
/// fit) and, in a signed zone, its DO=1 entries per outcome.
fn policy_entries(
    c: &mut Compiler<'_>,
    policies: &mut Vec<(PolicyKey, PolicyValue)>,
    policy: &PolicyView<'_>,
    name: &[u8],
    rtype: u16,
    signed: bool,
) -> (AnswerValue, Vec<(AnswerKey, AnswerValue)>) {
    let generation = c.generation;
    let id = policies.len() as u32;
    let Some(p) = policy_value(policy, name.len()) else {
        return (pass_because(KIND_PASS, unfit_reason(policy.kind)), Vec::new());
    };
    let variants = if signed {
        c.signed_policy(&SignedSet {
            name,
            rtype,
            value: &p,
            id,
        })
    } else {
        Vec::new()
    };
    policies.push((PolicyKey { generation, id }, p));
    let mut v = pass(KIND_POLICY);
    v.policy = id;
    (v, variants)
}

/// The entries of one exported node: its sets (plain, policy), the chains at a CNAME
/// owner, ANY, a signed zone's DO=1 variants, and the node entry (NODATA, NXDOMAIN and
/// wildcards below it, or the referral at and below a cut).
fn node_entries(
    c: &mut Compiler<'_>,
    table: &mut Table,
    node: &NodeView<'_>,
    referrals: &std::collections::HashMap<&[u8], AnswerValue>,
) {
    let generation = c.generation;
    let Some((node_key, words)) = key(generation, QTYPE_NODE, node.name) else {
        return;
    };
    let long_name = long_name_id(&mut table.long_names, &words);
    let signed = node.signed;
    let mut push = |key: AnswerKey, mut value: AnswerValue| {
        value.name = words.window;
        value.long_name = long_name;
        if signed {
            value.node_flags |= SIGNED;
        }
        table.answers.push((key, value));
    };
    if node.below_cut {
        // The cut itself answers DS with authority (RFC 4035 §3.1.4.1).
        if let (Some(_), Some((ds_key, _))) = (referrals.get(node.name), key(generation, 43, node.name)) {
            push(ds_key, c.plain(node.name, 43));
        }
        let cut = label_suffixes(node.name).find_map(|suffix| referrals.get(suffix));
        push(
            node_key,
            cut.copied().unwrap_or_else(|| pass_because(KIND_NODE, REASON_REFERRAL)),
        );
        return;
    }
    // A hosted zone's apex whose parent is hosted too: DS is the parent's to answer
    // (RFC 4035 §3.1.4.1), and the export holds only the child's node: user space.
    let hosted_child = node.name.len() == node.apex_len && c.engine.has_parent_delegation(node.name);
    if let Some((ds_key, _)) = key(generation, 43, node.name).filter(|_| hosted_child) {
        push(ds_key, pass(KIND_PASS));
    }
    // The types whose answer here is static: a signed zone's get a DO=1 variant.
    let mut static_types: Vec<u16> = Vec::new();
    for (rtype, policy) in &node.sets {
        if is_special(*rtype) {
            continue;
        }
        let Some((set_key, _)) = key(generation, *rtype, node.name) else {
            continue;
        };
        let value = match policy {
            None => {
                static_types.push(*rtype);
                c.plain(node.name, *rtype)
            }
            Some(policy) => {
                let (value, variants) = if policy.kind.is_client_aware() {
                    client_entry(
                        c,
                        (&mut table.client, &mut table.policies),
                        policy,
                        node.name,
                        *rtype,
                        signed,
                    )
                } else {
                    policy_entries(c, &mut table.policies, policy, node.name, *rtype, signed)
                };
                for (key, variant) in variants {
                    push(key, variant);
                }
                value
            }
        };
        push(set_key, value);
    }
    // At a CNAME owner: the chain's answer for the common types, when no policy is on
    // it (other types find the node entry, which does not answer for them).
    for &rtype in &node.static_chases {
        static_types.push(rtype);
        if let Some((chase_key, _)) = key(generation, rtype, node.name) {
            push(chase_key, c.plain(node.name, rtype));
        }
    }
    // ANY (RFC 8482 §4.1: one set): every node with sets has the entry, so the node
    // entry never answers NODATA for it.
    if node.static_any {
        static_types.push(QTYPE_ANY);
    }
    if !node.sets.is_empty() {
        if let Some((any_key, _)) = key(generation, QTYPE_ANY, node.name) {
            let value = node.static_any.then(|| c.plain(node.name, QTYPE_ANY));
            push(any_key, value.unwrap_or_else(|| pass(KIND_PASS)));
        }
    }
    let nodata = node_value(node);
    if signed {
        // Not NSEC, which only zone walkers ask: its signed answer would take a tail
        // entry at every name (docs/BENCHMARKS.md: 337 vs 114 MiB for 100,000 names).
        for rtype in static_types.into_iter().filter(|&t| t != NSEC) {
            if let Some((key, value)) = c.signed_variant(node.name, rtype) {
                push(key, value);
            }
        }
        if nodata.node_flags & NODE_NODATA != 0 {
            if let Some(value) = c.signed_nodata(node) {
                let key = AnswerKey {
                    hash: node_key.hash ^ DO_SALT,
                    ..node_key
                };
                push(key, value);
            }
        }
    }
    push(node_key, nodata);
}

impl Compiler<'_> {
    /// A signed zone's DO=1 NODATA at `node` — the SOA, the NSEC showing the types the
    /// name has (or covering an empty non-terminal), their RRSIGs — which is the same for
    /// every type the name lacks: the node entry's DO=1 variant. `None` when it does not
    /// fit the tables (then such queries pass, `pass_signed`).
    fn signed_nodata(&mut self, node: &NodeView<'_>) -> Option<AnswerValue> {
        // A private-use type (RFC 6895 §3.1) the name does not have stands for them all.
        let absent = (0xff00..=0xfffe_u16).find(|t| node.sets.iter().all(|(rtype, _)| rtype != t))?;
        let value = self.plain_with(node.name, absent, Variant::Signed(None));
        (value.kind == KIND_PLAIN && value.ancount == 0 && value.nscount > 0).then_some(value)
    }
}

/// The NSEC type (RFC 4034 §4).
const NSEC: u16 = 47;

impl Compiler<'_> {
    /// A signed zone's DO=1 answer for `name` and `rtype` — the records with their RRSIGs,
    /// as the engine writes them — under the key the program looks up for DO=1 (the name's
    /// hash with `DO_SALT`); `None` when it is not a plain answer the tables can hold.
    fn signed_variant(&mut self, name: &[u8], rtype: u16) -> Option<(AnswerKey, AnswerValue)> {
        let (key, _) = key(self.generation, rtype, name)?;
        let value = self.plain_with(name, rtype, Variant::Signed(None));
        (value.kind == KIND_PLAIN).then_some((
            AnswerKey {
                hash: key.hash ^ DO_SALT,
                ..key
            },
            value,
        ))
    }
}

/// The long-name id of a name (its front words added to `long_names`, shared by its
/// records), or 0 for a name of at most 64 octets.
fn long_name_id(long_names: &mut Vec<LongName>, words: &NameWords) -> u32 {
    match words.front {
        Some(front) => {
            long_names.push(front);
            long_names.len() as u32
        }
        None => 0,
    }
}

/// Keys that two names share (their hashes collide) get one `PASS` entry with no name:
/// queries for either name go to user space (the program finds the name differs and
/// passes). With a 64-bit hash this is for correctness, not expected in practice.
fn pass_collisions(answers: &mut Vec<(AnswerKey, AnswerValue)>) {
    let mut seen = std::collections::HashSet::with_capacity(answers.len());
    let collided: std::collections::HashSet<AnswerKey> = answers
        .iter()
        .filter(|(key, _)| !seen.insert(*key))
        .map(|(key, _)| *key)
        .collect();
    if collided.is_empty() {
        return;
    }
    tracing::warn!(
        keys = collided.len(),
        "XDP table: name hashes collide; those names are answered by user space"
    );
    answers.retain(|(key, _)| !collided.contains(key));
    answers.extend(collided.into_iter().map(|key| (key, pass(KIND_PASS))));
}

/// Types the program never looks up (it passes those queries).
fn is_special(rtype: u16) -> bool {
    rtype == 0 || rtype == 41 || (128..QTYPE_ANY).contains(&rtype)
}

/// A name's words as the tables hold them (see `qdns_abi::name`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameWords {
    /// The record's words: the name's last 64 octets, right-aligned.
    pub window: [u64; NAME_WORDS],
    /// The words in front of them, for a name over 64 octets.
    pub front: Option<LongName>,
}

/// The key of `name` (lowercase wire, at most 255 octets) and its words; `None` when
/// longer than a wire name can be.
#[must_use]
pub fn key(generation: u32, qtype: u16, name: &[u8]) -> Option<(AnswerKey, NameWords)> {
    if name.len() > WIRE_NAME_MAX {
        return None;
    }
    let words = words_of::<LONG_WORDS>(name)?;
    let key = AnswerKey {
        generation,
        qtype,
        pad: 0,
        // The same hash as the answer path's eight words: the front ones are zero then.
        hash: name_hash(&words),
    };
    let mut window = [0; NAME_WORDS];
    window.copy_from_slice(&words[FRONT_WORDS..]);
    let front = (name.len() > NAME_MAX).then(|| {
        let mut front = LongName {
            front: [0; FRONT_WORDS],
        };
        front.front.copy_from_slice(&words[..FRONT_WORDS]);
        front
    });
    Some((key, NameWords { window, front }))
}

fn pass_because(kind: u8, reason: u8) -> AnswerValue {
    AnswerValue { reason, ..pass(kind) }
}

/// An entry of `kind` with nothing else set (a PASS entry, or a base to fill in).
pub(super) fn pass(kind: u8) -> AnswerValue {
    AnswerValue {
        name: [0; NAME_WORDS],
        kind,
        node_flags: 0,
        apex_len: 0,
        reason: 0,
        flags: 0,
        ancount: 0,
        nscount: 0,
        arcount: 0,
        tail_len: 0,
        tail_sum: 0,
        policy: 0,
        long_name: 0,
        tail: [0; TAIL_MAX],
    }
}

fn with_tail(mut value: AnswerValue, tail: &[u8]) -> Option<AnswerValue> {
    value.tail.get_mut(..tail.len())?.copy_from_slice(tail);
    value.tail_len = u16::try_from(tail.len()).ok()?;
    value.tail_sum = fold(sum_words(tail, 0));
    Some(value)
}

/// How the synthesised query carries EDNS.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Edns {
    /// No OPT record.
    None,
    /// OPT with DO=0.
    Plain,
    /// OPT with DO=1.
    DnssecOk,
}

/// A query for `name`/`rtype` as the program would see it (lowercase, RD=0).
fn query(name: &[u8], rtype: u16, edns: Edns) -> Vec<u8> {
    let mut msg = vec![0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, u8::from(edns != Edns::None)];
    msg.extend_from_slice(name);
    msg.extend_from_slice(&rtype.to_be_bytes());
    msg.extend_from_slice(&1u16.to_be_bytes());
    if edns != Edns::None {
        msg.extend_from_slice(&opt_record(4096, 0, edns == Edns::DnssecOk));
    }
    msg
}

impl Compiler<'_> {
    /// The engine's answer as an entry: plain when it is the same for every client that
    /// can take it and fits the table (tails over [`TAIL_MAX`] go to `large`), else a pass
    /// entry saying why.
    fn plain(&mut self, name: &[u8], rtype: u16) -> AnswerValue {
        self.plain_with(name, rtype, Variant::Plain)
    }
}

/// Which answer an entry holds.
#[derive(Clone, Copy)]
enum Variant<'h> {
    /// The answer to every client that can take it (in a signed zone: to DO=0 ones).
    Plain,
    /// A signed zone's DO=1 answer: for a policy set, under the health, weighted draw
    /// and client that give one outcome; else under the engine's own health.
    Signed(Option<Under<'h>>),
}

/// What gives one outcome of a policy set: a health bitmap, the weighted draw and (for
/// a client-aware set) a client whose block chooses the chain.
#[derive(Clone, Copy)]
struct Under<'h> {
    bitmap: &'h [u64],
    draw: u32,
    client: Option<std::net::IpAddr>,
}

impl Compiler<'_> {
    /// [`Compiler::plain`] for the queries `variant` stands for.
    fn plain_with(&mut self, name: &[u8], rtype: u16, variant: Variant<'_>) -> AnswerValue {
        let other = || pass_because(KIND_PASS, REASON_OTHER);
        let signed = matches!(variant, Variant::Signed(_));
        let answer = match variant {
            Variant::Signed(under) => engine_answer_signed(self.engine, name, rtype, &mut self.scratch, under),
            Variant::Plain => engine_answer(self.engine, name, rtype, &mut self.scratch),
        };
        let message = match answer {
            Some(Answer::Fits(message)) => message,
            Some(Answer::Truncated) => return pass_because(KIND_PASS, REASON_LARGE),
            None => return other(),
        };
        let question_end = HEADER_LEN + name.len() + 4;
        let counts = |m: &[u8], i: usize| u16::from_be_bytes([m[4 + 2 * i], m[5 + 2 * i]]);
        let flags = u16::from_be_bytes([message[2], message[3]]);
        if flags & 0x000f != 0 {
            return other();
        }
        let Some(tail) = message.get(question_end..) else {
            return other();
        };
        let any_qname = owned_by_question(tail, counts(&message, 1) + counts(&message, 2) + counts(&message, 3));
        if !any_qname && name.starts_with(b"\x01*") && !signed {
            // A wildcard's answer that names other owners: relocated for each question.
            return self.wildcard_relocated(name, rtype).unwrap_or_else(other);
        }
        // A wildcard's entry answers longer names than its own.
        let growth = if any_qname {
            NAME_MAX.saturating_sub(name.len())
        } else {
            0
        };
        if tail.len() > LARGE_TAIL_MAX || !self.limits.fits(message.len(), growth) {
            return pass_because(KIND_PASS, REASON_LARGE);
        }
        let mut value = pass(KIND_PLAIN);
        value.flags = flags;
        value.ancount = counts(&message, 1);
        value.nscount = counts(&message, 2);
        value.arcount = counts(&message, 3);
        if any_qname {
            value.node_flags = PLAIN_ANY_QNAME;
        }
        if tail.len() <= TAIL_MAX {
            return with_tail(value, tail).unwrap_or_else(other);
        }
        // A full large table leaves the rest to user space; it never stops the tables.
        let Some(id) = large_id(&self.large) else {
            return pass_because(KIND_PASS, REASON_LARGE);
        };
        let big = large_tail(tail, &[]);
        value.node_flags |= PLAIN_LARGE;
        value.policy = id;
        value.tail_len = tail.len() as u16;
        value.tail_sum = fold(sum_words(tail, 0));
        self.large.push((
            PolicyKey {
                generation: self.generation,
                id,
            },
            big,
        ));
        value
    }
}

impl Compiler<'_> {
    /// The entry of a wildcard's answer whose RDATA names (or additional records) point
    /// into the question or the tail: the engine compresses synthesised answers against
    /// the closest encloser, so one copy relocated by the question's extra length over
    /// `*.encloser` answers every name the wildcard covers (and the wildcard's own name).
    fn wildcard_relocated(&mut self, name: &[u8], rtype: u16) -> Option<AnswerValue> {
        let encloser = name.get(2..)?;
        // Labels the zone cannot hold beside a wildcard's answer (checked: a name that
        // exists answers differently and the relocation check fails).
        let Relocatable { message, tail, fixups } = relocatable(
            self.engine,
            name,
            rtype,
            encloser,
            [b"\x03q-x", b"\x08q-xxxxxx"],
            &mut self.scratch,
        )?;
        if !self.limits.fits(message.len(), NAME_MAX.saturating_sub(name.len())) {
            return None;
        }
        let id = large_id(&self.large)?;
        self.large.push((
            PolicyKey {
                generation: self.generation,
                id,
            },
            large_tail(&tail, &fixups),
        ));
        let counts = |i: usize| u16::from_be_bytes([message[4 + 2 * i], message[5 + 2 * i]]);
        let mut value = pass(KIND_PLAIN);
        value.flags = u16::from_be_bytes([message[2], message[3]]);
        value.ancount = counts(1);
        value.nscount = counts(2);
        value.arcount = counts(3);
        value.apex_len = u8::try_from(name.len()).ok()?;
        value.node_flags = PLAIN_ANY_QNAME | PLAIN_LARGE;
        value.policy = id;
        value.tail_len = u16::try_from(tail.len()).ok()?;
        value.tail_sum = fold(sum_words(&tail, 0));
        Some(value)
    }
}

/// What the links the program serves carry.
#[derive(Clone, Copy)]
struct Limits {
    /// Largest DNS message (with our OPT) an answer may be.
    max_message: usize,
}

impl Limits {
    /// True when a `message` octets long (without OPT) still fits when its question
    /// grows by `growth` octets (a wildcard or referral entry answers names longer than
    /// its own).
    fn fits(self, message: usize, growth: usize) -> bool {
        message + OPT_LEN + growth <= self.max_message.min(RESPONSE_MAX)
    }
}

/// `name` and each of its parent names, longest first.
fn label_suffixes(name: &[u8]) -> impl Iterator<Item = &[u8]> + '_ {
    crate::wire::name::label_starts(name).filter_map(|start| name.get(start..))
}

impl Compiler<'_> {
    /// The referral of the cut `cut` as a relocatable entry: the engine's answer to a query
    /// for the cut's own name, whose compression pointers are found by comparing it with
    /// the answers for names 2 and 7 octets longer below the cut (each pointer moves by
    /// exactly that much, nothing else changes — checked, or the cut passes).
    fn referral(&mut self, cut: &[u8]) -> AnswerValue {
        let passed = || pass_because(KIND_NODE, REASON_REFERRAL);
        let Some(Relocatable { message, tail, fixups }) =
            relocatable(self.engine, cut, 1, cut, [b"\x01x", b"\x06xxxxxx"], &mut self.scratch)
        else {
            return passed();
        };
        let flags = u16::from_be_bytes([message[2], message[3]]);
        let counts = |i: usize| u16::from_be_bytes([message[4 + 2 * i], message[5 + 2 * i]]);
        // A referral: no AA, NOERROR, nothing in the answer section.
        if flags & 0x040f != 0 || counts(1) != 0 || !self.limits.fits(message.len(), NAME_MAX.saturating_sub(cut.len()))
        {
            return passed();
        }
        let Some(id) = large_id(&self.large) else {
            return passed();
        };
        self.large.push((
            PolicyKey {
                generation: self.generation,
                id,
            },
            large_tail(&tail, &fixups),
        ));
        let mut value = pass(KIND_REFERRAL);
        value.flags = flags;
        value.nscount = counts(2);
        value.arcount = counts(3);
        value.apex_len = cut.len() as u8;
        value.node_flags = PLAIN_LARGE;
        value.policy = id;
        value.tail_len = tail.len() as u16;
        value.tail_sum = fold(sum_words(&tail, 0));
        value
    }
}

/// What user space answers for a name and type, checked to be one answer for every
/// client that can take it.
enum Answer {
    /// The message without our OPT record (ARCOUNT counts the records only).
    Fits(Vec<u8>),
    /// Truncated even at our own UDP limit.
    Truncated,
}

/// The engine's response to an EDNS query (so up to our limit), compared with the DO=1
/// response (the program echoes DO but must send the same sections) and, where it fits
/// 512 octets, with the no-EDNS response; `None` when they differ.
fn engine_answer(engine: &Engine, name: &[u8], rtype: u16, out: &mut [u8]) -> Option<Answer> {
    let with_edns = engine.respond_with_draw(&query(name, rtype, Edns::Plain), out, Transport::Udp, 0)?;
    if with_edns.truncated {
        return Some(Answer::Truncated);
    }
    let full = out.get(..with_edns.len)?.to_vec();
    let message = without_opt(&full, engine.max_udp_payload(), false)?;
    // DO=1: the same sections; only our OPT's DO bit differs — except in a signed zone,
    // whose DO=1 answers are the entries' signed variants (`engine_answer_signed`).
    if !engine.signs(name) {
        let dnssec_ok = engine.respond_with_draw(&query(name, rtype, Edns::DnssecOk), out, Transport::Udp, 0)?;
        let with_do = out.get(..dnssec_ok.len)?;
        let body_len = full.len() - OPT_LEN;
        if with_do.get(..body_len) != full.get(..body_len)
            || with_do.get(body_len..) != Some(&opt_record(engine.max_udp_payload(), 0, true)[..])
        {
            return None;
        }
    }
    // Without EDNS: the same message when it fits 512 octets (the program passes larger
    // answers to such clients, and user space truncates or trims them).
    if message.len() <= 512 {
        let classic = engine.respond_with_draw(&query(name, rtype, Edns::None), out, Transport::Udp, 0)?;
        if out.get(..classic.len) != Some(&message[..]) {
            return None;
        }
    }
    Some(Answer::Fits(message))
}

/// The engine's response to a DO=1 query (without our OPT), for a signed zone's variant:
/// under the health, draw and client given, or the engine's own.
fn engine_answer_signed(
    engine: &Engine,
    name: &[u8],
    rtype: u16,
    out: &mut [u8],
    under: Option<Under<'_>>,
) -> Option<Answer> {
    let msg = query(name, rtype, Edns::DnssecOk);
    let dnssec_ok = match under {
        Some(under) => engine.respond_under(
            &msg,
            out,
            crate::engine::Asked {
                transport: Transport::Udp,
                draw: under.draw,
                source: under.client,
            },
            under.bitmap,
        )?,
        None => engine.respond_with_draw(&msg, out, Transport::Udp, 0)?,
    };
    if dnssec_ok.truncated {
        return Some(Answer::Truncated);
    }
    let full = out.get(..dnssec_ok.len)?;
    without_opt(full, engine.max_udp_payload(), true).map(Answer::Fits)
}

/// `response` without the OPT record the engine ends it with (ours: `payload`, DO as
/// given; `None` when it ends otherwise), ARCOUNT lowered by one: the program writes
/// its own OPT.
fn without_opt(response: &[u8], payload: u16, dnssec_ok: bool) -> Option<Vec<u8>> {
    let body_len = response.len().checked_sub(OPT_LEN)?;
    if response.get(body_len..) != Some(&opt_record(payload, 0, dnssec_ok)[..]) {
        return None;
    }
    let mut message = response.get(..body_len)?.to_vec();
    let arcount = u16::from_be_bytes([*message.get(10)?, *message.get(11)?]).checked_sub(1)?;
    message.get_mut(10..12)?.copy_from_slice(&arcount.to_be_bytes());
    Some(message)
}

/// True when each of the `count` records of `tail` is owned by the question name
/// (pointer 0xc00c), none has an RDATA name (user space compresses those against the
/// question, so their bytes depend on its length) and the tail holds nothing else: the
/// tail answers a question of any length.
fn owned_by_question(tail: &[u8], count: u16) -> bool {
    let mut pos = 0;
    for _ in 0..count {
        if tail.get(pos..pos + 2) != Some(&[0xc0, 0x0c]) {
            return false;
        }
        // NS, CNAME, PTR, MX: the types whose RDATA names are compressed.
        if matches!(tail.get(pos + 2..pos + 4), Some([0, 2 | 5 | 12 | 15]) | None) {
            return false;
        }
        let Some(rdlen) = tail.get(pos + 10..pos + 12) else {
            return false;
        };
        pos += 12 + usize::from(u16::from_be_bytes([rdlen[0], rdlen[1]]));
    }
    pos == tail.len()
}

/// NODATA here (unless a CNAME makes user space answer), and below: NXDOMAIN, or the
/// wildcard child's answers.
fn node_value(node: &NodeView<'_>) -> AnswerValue {
    let mut tail = vec![0u8, 0];
    tail.extend_from_slice(node.negative_soa);
    // An SOA too long for the table: the node passes (flags 0).
    let Some(mut value) = with_tail(pass(KIND_NODE), &tail) else {
        return pass(KIND_NODE);
    };
    value.flags = QR_AA;
    value.apex_len = node.apex_len as u8;
    value.node_flags = if node.has_cname { 0 } else { NODE_NODATA }
        | if node.has_wildcard {
            NODE_WILDCARD
        } else {
            NODE_NXDOMAIN
        };
    value
}

#[cfg(test)]
mod tests {
    use qdns_abi::answer::PLAIN_MEDIUM;

    use super::*;

    fn entry(name: &[u8], hash: u64, kind: u8) -> (AnswerKey, AnswerValue) {
        let (mut key, words) = key(7, 1, name).unwrap();
        key.hash = hash;
        let mut value = pass(kind);
        value.name = words.window;
        (key, value)
    }

    #[test]
    fn tails_up_to_512_octets_without_pointers_move_to_the_medium_table() {
        let generation = 3;
        let mut table = Table::default();
        // (kind, tail length, pointers to relocate) of each large tail, in order.
        let tails = [
            (KIND_PLAIN, 200, false),
            (KIND_PLAIN, 900, false),
            (KIND_REFERRAL, 300, true),
            (KIND_PLAIN, 512, false),
        ];
        for (id, &(kind, len, fixups)) in tails.iter().enumerate() {
            let (key, mut value) = entry(b"\x01a\x00", id as u64, kind);
            value.node_flags = PLAIN_LARGE | SIGNED;
            value.policy = id as u32;
            value.tail_len = len as u16;
            table.answers.push((key, value));
            let bytes: Vec<u8> = (0..len).map(|i| (i + id) as u8).collect();
            let pointers: &[u16] = if fixups { &[4] } else { &[] };
            table.large.push((
                PolicyKey {
                    generation,
                    id: id as u32,
                },
                large_tail(&bytes, pointers),
            ));
        }
        split_medium_tails(&mut table, generation);
        assert_eq!(table.medium.len(), 2, "the 200- and 512-octet plain tails");
        assert_eq!(table.large.len(), 2, "the 900-octet tail and the referral's");
        let flags: Vec<(u8, u32)> = table
            .answers
            .iter()
            .map(|(_, v)| (v.node_flags & (PLAIN_LARGE | PLAIN_MEDIUM | SIGNED), v.policy))
            .collect();
        assert_eq!(
            flags,
            [
                (PLAIN_MEDIUM | SIGNED, 0),
                (PLAIN_LARGE | SIGNED, 0),
                (PLAIN_LARGE | SIGNED, 1),
                (PLAIN_MEDIUM | SIGNED, 1),
            ]
        );
        // The bytes moved whole, and every id is its entry's own.
        for (id, (key, tail)) in table.medium.iter().enumerate() {
            assert_eq!(key.id as usize, id);
            let from = if id == 0 { 0 } else { 3 };
            let len = tails[from].1;
            let bytes: Vec<u8> = (0..len).map(|i| (i + from) as u8).collect();
            assert_eq!(tail.bytes, bytes);
            assert_eq!(&tail.medium().tail[..len], &bytes[..]);
        }
        assert_eq!(table.large[1].1.fixups, [4], "the referral keeps its pointers");
        assert_eq!(table.stats().medium, 2);
    }

    #[test]
    fn colliding_names_are_left_to_user_space() {
        let mut answers = vec![
            entry(b"\x01a\x00", 1, KIND_PLAIN),
            entry(b"\x01b\x00", 2, KIND_PLAIN),
            // Same key as the first, another name: a hash collision.
            entry(b"\x01c\x00", 1, KIND_PLAIN),
        ];
        pass_collisions(&mut answers);
        assert_eq!(answers.len(), 2);
        let shared = answers.iter().find(|(k, _)| k.hash == 1).unwrap();
        assert_eq!(shared.1.kind, KIND_PASS);
        assert_eq!(shared.1.name, [0; NAME_WORDS], "no name: the program passes");
        let other = answers.iter().find(|(k, _)| k.hash == 2).unwrap();
        assert_eq!(other.1.kind, KIND_PLAIN);
    }

    #[test]
    fn only_tails_owned_by_the_question_fit_any_qname() {
        let a = [0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1];
        assert!(owned_by_question(&a, 1));
        assert!(owned_by_question(&[a, a].concat(), 2));
        assert!(!owned_by_question(&a, 2), "a record missing");
        let mut glue = a;
        glue[1] = 0x2a; // an additional record owned by a name inside the tail
        assert!(!owned_by_question(&[a, glue].concat(), 2));
    }

    #[test]
    fn identical_large_tails_are_stored_once() {
        let mut table = Table::default();
        for (id, fill) in [7u8, 9, 7].into_iter().enumerate() {
            table.large.push((
                PolicyKey {
                    generation: 3,
                    id: id as u32,
                },
                large_tail(&[fill; 300], &[]),
            ));
            let mut value = pass(KIND_PLAIN);
            value.node_flags = PLAIN_LARGE;
            value.policy = id as u32;
            table.answers.push((key(3, 1, b"\x01a\x00").unwrap().0, value));
        }
        // A policy record's id is not a large tail's.
        let mut policy = pass(KIND_POLICY);
        policy.policy = 2;
        table.answers.push((key(3, 16, b"\x01a\x00").unwrap().0, policy));
        share_large_tails(&mut table, 3);
        assert_eq!(table.large.len(), 2);
        let ids: Vec<u32> = table.answers.iter().map(|(_, v)| v.policy).collect();
        assert_eq!(ids, [0, 1, 0, 2]);
        assert_eq!(table.large[1].1.bytes[0], 9);
        assert!(table.large.iter().enumerate().all(|(i, (k, _))| k.id == i as u32));
    }

    #[test]
    fn long_names_keep_their_front_words_apart() {
        let long: Vec<u8> = std::iter::repeat_n(*b"\x07abcdefg", 9).flatten().chain([0]).collect();
        assert!(long.len() > 64);
        let (long_key, long_words) = key(1, 1, &long).unwrap();
        let front = long_words.front.expect("a name over 64 octets has front words");
        assert!(front.front.iter().any(|&w| w != 0));
        // Its last 64 octets as a name of their own: same window, no front, another hash.
        let (short_key, short_words) = key(1, 1, &long[long.len() - 64..]).unwrap();
        assert_eq!(short_words.window, long_words.window);
        assert_eq!(short_words.front, None);
        assert_ne!(short_key.hash, long_key.hash);
        // The answer path's eight-word hash of a short name is the key's.
        let narrow = qdns_abi::name::words_of::<NAME_WORDS>(&long[long.len() - 64..]).unwrap();
        assert_eq!(name_hash(&narrow), short_key.hash);
        let longest: Vec<u8> = std::iter::repeat_n(*b"\x07abcdefg", 32).flatten().chain([0]).collect();
        assert!(key(1, 1, &longest).is_none(), "over 255 octets");
    }
}
