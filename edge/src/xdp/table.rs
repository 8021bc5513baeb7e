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
        KIND_PASS, KIND_PLAIN, KIND_POLICY, KIND_REFERRAL, LARGE_TAIL_MAX, NAME_MAX, NODE_DENIAL, NODE_NODATA,
        NODE_NXDOMAIN, NODE_WILDCARD, PLAIN_ANSWERS_ANY, PLAIN_ANY_QNAME, PLAIN_LARGE, QTYPE_ANY, QTYPE_NODE,
        REASON_CLIENT_AWARE, REASON_LARGE, REASON_OTHER, REASON_REFERRAL, RESPONSE_MAX, SIGNED, TAIL_MAX,
        WIRE_NAME_MAX,
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

mod ask;
mod client;
mod denial;
mod nodes;
mod plain;
mod policy;
mod tails;

use ask::{engine_answer, engine_answer_signed, owned_by_question, Answer};
use client::ClientTables;
use nodes::node_entries;
use plain::{label_suffixes, Limits, Under, Variant};
use policy::{policy_value, unfit_reason, SignedSet};
pub use tails::Negatives;
pub use tails::Tail;
use tails::{large_id, large_tail, relocatable, share_large_tails, split_medium_tails, Relocatable, SmallTails};

/// The entries of one generation.
#[derive(Default)]
pub struct Table {
    /// Answer table entries.
    pub answers: Vec<(AnswerKey, AnswerValue)>,
    /// Policy table entries.
    pub policies: Vec<(PolicyKey, PolicyValue)>,
    /// Small tails (answers of 33 to 128 octets after the question, and each zone's
    /// negative SOA), each once.
    pub small: Vec<(PolicyKey, Tail)>,
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
    /// Signed NXDOMAIN: the gaps below each encloser (`qdns_abi::denial`).
    pub gaps: Vec<qdns_abi::denial::Gap>,
    /// Their answers' pieces.
    pub pieces: Vec<qdns_abi::denial::Piece>,
    /// Each zone's negative SOA entry in the small table (by apex: id and bytes).
    pub negatives: Negatives,
    /// For a patch: the negative SOA entries of the installed generation whose bytes
    /// changed (to rewrite in place, with every record carrying them).
    pub rewritten: Vec<u32>,
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
    /// Small tails (33 to 128 octets, and each zone's negative SOA), each once.
    pub small: usize,
    /// Names at or below a zone cut answered with a relocated referral.
    pub referral: usize,
    /// Gaps below the enclosers of signed zones (their NXDOMAIN answers).
    pub gaps: usize,
    /// The pre-signed pieces of those answers.
    pub pieces: usize,
    /// Entries left without a slot in a crowded bucket (their queries go to user
    /// space; see `qdns_abi::slots`).
    pub crowded: usize,
    /// Octets of the generation's arrays (records, slot buckets, policy sets, large
    /// tails), as the kernel allocates them.
    pub bytes: usize,
}

/// For log lines: `plain=81 policy=5 … bytes=35776` (zero counts left out).
impl std::fmt::Display for TableStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |v: usize| v as u64;
        f.write_str(&crate::stats::counts(&[
            ("plain", n(self.plain)),
            ("policy", n(self.policy)),
            ("client", n(self.client)),
            ("client_blocks", n(self.client_blocks)),
            ("client_indexed", n(self.client_indexed)),
            ("nodes", n(self.nodes)),
            ("pass", n(self.pass)),
            ("long_names", n(self.long_names)),
            ("large", n(self.large)),
            ("medium", n(self.medium)),
            ("small", n(self.small)),
            ("referral", n(self.referral)),
            ("gaps", n(self.gaps)),
            ("pieces", n(self.pieces)),
            ("crowded", n(self.crowded)),
            ("bytes", n(self.bytes)),
        ]))
    }
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
            small: self.small.len(),
            long_names: self.long_names.len(),
            gaps: self.gaps.len(),
            pieces: self.pieces.len(),
            client: self.client.sets.len(),
            client_blocks: self.client.blocks.len(),
            client_indexed: self.client.index.len() / qdns_abi::client::INDEX_ENTRIES as usize,
            ..TableStats::default()
        };
        for (key, value) in &self.answers {
            match value.kind {
                // A name's one set that is its node entry too: the node key's entry.
                KIND_PLAIN if key.qtype == QTYPE_NODE && value.node_flags & PLAIN_ANSWERS_ANY != 0 => stats.nodes += 1,
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
    let mut c = Compiler::new(engine, generation, max_message, SmallTails::default());
    let mut table = Table::default();
    let nodes: Vec<NodeView<'_>> = engine.export();
    // The zone cuts (NS below an apex: below_cut with an NS set) and each one's
    // relocatable referral, built once and shared by every node at or below it.
    // In a signed zone, the DO=1 referral too (with the DS or the NSEC proving none).
    let mut referrals: nodes::Referrals<'_> = std::collections::HashMap::new();
    for node in nodes
        .iter()
        .filter(|n| n.below_cut && n.sets.iter().any(|(t, _)| *t == 2))
    {
        let signed = node.signed.then(|| c.referral_with(node.name, true)).flatten();
        let unsigned = c
            .referral_with(node.name, false)
            .unwrap_or_else(|| pass_because(KIND_NODE, REASON_REFERRAL));
        referrals.insert(node.name, (unsigned, signed));
    }
    // The names only signed nodes consult the children of (their denials): a signed
    // zone's names, and every zone apex (a hosted child's apex is a child of its
    // parent's name too). An unsigned zone's other names never are, and at 1,000,000
    // names collecting them cost 0.36 s of an install.
    let children = denial::children(
        nodes
            .iter()
            .filter(|n| n.signed || n.name.len() == n.apex_len)
            .map(|n| n.name),
    );
    // Each signed wildcard's encloser, and a type of it whose answer is static (A or
    // AAAA first): the synthesis the encloser's gaps take their proofs from.
    for node in nodes.iter().filter(|n| n.signed && n.name.starts_with(b"\x01*")) {
        let types: Vec<u16> = node
            .sets
            .iter()
            .filter(|(t, policy)| policy.is_none() && !is_special(*t) && ![5, 46, 47].contains(t))
            .map(|(t, _)| *t)
            .collect();
        let chosen = [1, 28]
            .into_iter()
            .find(|t| types.contains(t))
            .or(types.first().copied());
        if let (Some(rtype), Some(encloser)) = (chosen, node.name.get(2..)) {
            c.denials.wildcards.insert(encloser.to_vec(), rtype);
        }
    }
    for node in &nodes {
        node_entries(&mut c, &mut table, node, (&referrals, &children));
    }
    pass_collisions(&mut table.answers);
    c.finish(table)
}

/// The entries of `nodes` alone, for a patch of an installed generation whose small
/// table holds `small_first` entries (new tails follow them) and whose zones' negative
/// SOAs are `negatives`; large and medium tail ids count from 0 (the patcher moves
/// them past the installed ones). Nothing at or below a zone cut, nothing signed: no
/// referral or denial is made, and collisions are not looked for (the patcher finds a
/// tag taken) — the patcher (`xdp::patch`) takes only names off any cut in unsigned
/// zones.
pub(crate) fn compile_nodes(
    engine: &Engine,
    nodes: &[NodeView<'_>],
    (generation, max_message): (u32, usize),
    (small_first, negatives): (u32, Negatives),
) -> Table {
    let mut c = Compiler::new(
        engine,
        generation,
        max_message,
        SmallTails::seeded(small_first, negatives),
    );
    let mut table = Table::default();
    let (referrals, children) = (nodes::Referrals::new(), nodes::Children::new());
    for node in nodes {
        node_entries(&mut c, &mut table, node, (&referrals, &children));
    }
    c.finish(table)
}

/// The small-table entry of `bytes` (at most 128 octets).
pub(crate) fn tails_small(bytes: &[u8]) -> qdns_abi::answer::SmallTail {
    large_tail(bytes, &[]).small()
}

/// What each entry of one table is compiled with: the engine asked, a message buffer,
/// the tails over 128 octets made so far, the generation and the links' limit.
struct Compiler<'e> {
    engine: &'e Engine,
    scratch: Vec<u8>,
    large: Vec<(PolicyKey, Tail)>,
    small: SmallTails,
    generation: u32,
    limits: Limits,
    denials: denial::Denials,
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
    // foldhash, not SipHash: the keys are the compiler's, and at 2,000,000 entries the
    // hasher was most of this pass.
    let mut seen: foldhash::HashSet<AnswerKey> =
        foldhash::HashSet::with_capacity_and_hasher(answers.len(), foldhash::fast::RandomState::default());
    let collided: foldhash::HashSet<AnswerKey> = answers
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
        tail_id: 0,
        negative_len: 0,
        negative_sum: 0,
        tail: [0; TAIL_MAX],
    }
}

impl<'e> Compiler<'e> {
    fn new(engine: &'e Engine, generation: u32, max_message: usize, small: SmallTails) -> Compiler<'e> {
        Compiler {
            engine,
            scratch: vec![0u8; crate::engine::MAX_MESSAGE],
            large: Vec::new(),
            small,
            generation,
            limits: Limits { max_message },
            denials: denial::Denials::default(),
        }
    }

    /// `table` (its entries made) with the tails and denials compiled, identical large
    /// tails shared and the medium ones moved to their table.
    fn finish(self, mut table: Table) -> Table {
        let generation = self.generation;
        table.large = self.large;
        table.small = self.small.tails;
        table.negatives = self.small.negatives;
        table.rewritten = self.small.rewritten;
        table.gaps = self.denials.gaps;
        table.pieces = self.denials.pieces;
        share_large_tails(&mut table, generation);
        split_medium_tails(&mut table, generation);
        table
    }

    /// `value` with `tail`: in the record up to [`TAIL_MAX`] octets, else (up to
    /// [`qdns_abi::answer::SMALL_TAIL_MAX`]) in the small table; `None` when neither
    /// holds it.
    fn with_tail(&mut self, mut value: AnswerValue, tail: &[u8]) -> Option<AnswerValue> {
        if tail.len() > TAIL_MAX {
            value.tail_id = self.small.id(self.generation, tail)?;
        } else {
            value.tail.get_mut(..tail.len())?.copy_from_slice(tail);
        }
        value.tail_len = u16::try_from(tail.len()).ok()?;
        value.tail_sum = fold(sum_words(tail, 0));
        Some(value)
    }

    /// `value` with the negative SOA `tail` (owner pointer zeroed) of a node entry of the
    /// zone at `apex`: always in the small table, the zone's one entry there; `None`
    /// when too long for it.
    fn with_negative(&mut self, mut value: AnswerValue, apex: &[u8], tail: &[u8]) -> Option<AnswerValue> {
        value.tail_id = self.small.negative(self.generation, apex, tail)?;
        value.negative_len = u16::try_from(tail.len()).ok()?;
        value.negative_sum = fold(sum_words(tail, 0));
        Some(value)
    }
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

    /// A zone's node entries share one small tail, its negative SOA (a serial change
    /// is one entry); an A answer stays in its record; a tail of 33..=128 octets is in
    /// the small table, once however many names answer with it.
    #[test]
    fn node_entries_share_the_zones_soa_and_tails_take_the_smallest_class() {
        use std::fmt::Write as _;
        let mut zone = qdns_testkit::fixtures::ZONE_HEAD.to_owned();
        for i in 0..40 {
            writeln!(
                zone,
                "[[rrset]]\nname = \"h{i}\"\ntype = \"A\"\nvalues = [\"192.0.2.{i}\"]"
            )
            .unwrap();
        }
        for i in 0..3 {
            writeln!(
                zone,
                "[[rrset]]\nname = \"three{i}\"\ntype = \"A\"\nvalues = [\"198.51.100.1\", \"198.51.100.2\", \"198.51.100.3\"]"
            )
            .unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t.toml"), zone).unwrap();
        let engine = Engine::compile(&qdns_zone::load_dir(dir.path(), 1).unwrap()).unwrap();
        let table = compile(&engine, 1, RESPONSE_MAX);
        let entry = |name: &[u8], qtype: u16| {
            let (want, _) = key(1, qtype, name).unwrap();
            table.answers.iter().find(|(k, _)| *k == want).map(|(_, v)| *v).unwrap()
        };
        // Every node key's entry: a node entry, or a name's one set that is its node
        // entry too.
        let nodes: Vec<AnswerValue> = table
            .answers
            .iter()
            .filter(|(k, v)| k.qtype == QTYPE_NODE && v.node_flags & (NODE_NODATA | NODE_NXDOMAIN) != 0)
            .map(|(_, v)| *v)
            .collect();
        assert!(nodes.len() > 40, "{}", nodes.len());
        let soa = nodes[0].tail_id;
        let negative = (nodes[0].negative_len, nodes[0].negative_sum);
        assert!(nodes
            .iter()
            .all(|v| (v.tail_id, v.negative_len, v.negative_sum) == (soa, negative.0, negative.1)));
        // The owner pointer (filled in by the program), then TYPE SOA.
        assert_eq!(&table.small[soa as usize].1.bytes[..4], [0, 0, 0, 6]);
        // One A: 16 octets in the record, which is the name's node entry too (one
        // record for the A, ANY and node keys: no ANY entry of its own).
        let h7 = b"\x02h7\x01t\x07example\x00";
        let one = entry(h7, 1);
        assert_eq!(
            (one.kind, one.tail_len, &one.tail[..2]),
            (KIND_PLAIN, 16, &[0xc0, 0x0c][..])
        );
        assert_eq!(&one.tail[12..16], [192, 0, 2, 7]);
        assert_eq!(entry(h7, QTYPE_NODE), one);
        assert_eq!(
            one.node_flags & !PLAIN_ANY_QNAME,
            NODE_NODATA | NODE_NXDOMAIN | PLAIN_ANSWERS_ANY
        );
        assert_eq!(one.tail_id, soa);
        let (any, _) = key(1, QTYPE_ANY, h7).unwrap();
        assert!(table.answers.iter().all(|(k, _)| *k != any));
        // Three A (too long for the record): a node entry and an ANY entry of their own.
        let three_node = entry(b"\x06three0\x01t\x07example\x00", QTYPE_NODE);
        assert_eq!((three_node.kind, three_node.tail_id), (KIND_NODE, soa));
        // Three A: 48 octets, one small tail for the three names.
        let three: Vec<AnswerValue> = (0..3)
            .map(|i| entry(format!("\x06three{i}\x01t\x07example\x00").as_bytes(), 1))
            .collect();
        assert!(three
            .iter()
            .all(|v| v.tail_len == 48 && v.tail_id == three[0].tail_id && v.tail_id != soa));
        assert_eq!(table.small[three[0].tail_id as usize].1.bytes.len(), 48);
        // And the apex's SOA answer (its own owner pointer and TTL).
        let apex_soa = entry(b"\x01t\x07example\x00", 6);
        assert!(![soa, three[0].tail_id].contains(&apex_soa.tail_id));
        assert_eq!(
            table.small.len(),
            3,
            "the negative SOA, the SOA answer and the three-A tail"
        );
        assert_eq!(table.stats().small, 3);
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
