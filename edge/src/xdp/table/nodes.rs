//! The entries of one exported node: its sets, its CNAME chains and ANY, the signed
//! variants, and the node entry that answers NODATA, NXDOMAIN and wildcards below it.
use super::{
    client_entry, is_special, key, label_suffixes, long_name_id, pass, pass_because, policy_entries, AnswerKey,
    AnswerValue, Compiler, NodeView, Table, Variant, DO_SALT, KIND_NODE, KIND_PASS, KIND_PLAIN, NODE_DENIAL,
    NODE_NODATA, NODE_NXDOMAIN, NODE_WILDCARD, QR_AA, QTYPE_ANY, QTYPE_NODE, REASON_REFERRAL, SIGNED,
};
use qdns_abi::answer::{PLAIN_ANSWERS_ANY, PLAIN_ANY_QNAME, TAIL_MAX};

/// The zone cuts and each one's relocatable referral (a pass entry when it cannot be
/// relocated), and in a signed zone its DO=1 referral.
pub(super) type Referrals<'n> = std::collections::HashMap<&'n [u8], (AnswerValue, Option<AnswerValue>)>;
/// Each name's child labels, sorted (see `denial::children`).
pub(super) type Children = std::collections::HashMap<Vec<u8>, Vec<Vec<u8>>>;

/// Whether the answer to ANY at `node` is byte for byte its plain set of `rtype`'s
/// (RFC 8482 §4.1: one set): the node holds only that set, of a type answered without
/// additional records or a chase (A, TXT, AAAA).
fn any_is_the_set(node: &NodeView<'_>, rtype: u16) -> bool {
    node.sets.len() == 1 && node.static_chases.is_empty() && [1, 16, 28].contains(&rtype)
}

/// The entries of one exported node: its sets (plain, policy), the chains at a CNAME
/// owner, ANY, a signed zone's DO=1 variants, and the node entry (NODATA, NXDOMAIN and
/// wildcards below it, or the referral at and below a cut).
pub(super) fn node_entries(
    c: &mut Compiler<'_>,
    table: &mut Table,
    node: &NodeView<'_>,
    (referrals, children): (&Referrals<'_>, &Children),
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
    let mut nodata = c.node_value(node);
    // A name with one plain set whose answer is ANY's too: one record for the set, ANY
    // and the node (`PLAIN_ANSWERS_ANY`), found by the set's and the node's keys.
    let mut both: Option<AnswerValue> = None;
    if node.below_cut {
        for (key, value) in c.cut_entries(node, node_key, referrals) {
            push(key, value);
        }
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
    // The one plain set whose answer is the ANY answer too: asked of the engine once.
    let mut one_plain: Option<AnswerValue> = None;
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
                let value = c.plain(node.name, *rtype);
                one_plain = any_is_the_set(node, *rtype).then_some(value);
                // Not a wildcard's: ANY below it is synthesised from its own entry.
                let wildcard = node.name.starts_with(b"\x01*");
                both = one_plain
                    .filter(|_| !signed && !wildcard)
                    .and_then(|set| set_and_node(set, &nodata));
                both.unwrap_or(value)
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
    // entry never answers NODATA for it — or, for a one-set name whose record is its
    // node entry too (`PLAIN_ANSWERS_ANY`), the node key's record answers it.
    if node.static_any {
        static_types.push(QTYPE_ANY);
    }
    if let Some((any_key, _)) =
        key(generation, QTYPE_ANY, node.name).filter(|_| !node.sets.is_empty() && both.is_none())
    {
        push(any_key, c.any_entry(node, one_plain));
    }
    if signed {
        for (key, value) in c.signed_entries(node, &static_types, node_key, &nodata) {
            push(key, value);
        }
        c.with_denial(node.name, &mut nodata, children);
    }
    push(node_key, both.unwrap_or(nodata));
}

/// The one record of a name's plain `set` that is its `node` entry too (see
/// [`PLAIN_ANSWERS_ANY`]): when the node entry is a plain NODATA-here, NXDOMAIN-below
/// one and the set's answer is held in the record (no other table; owned by the
/// question, `PLAIN_ANY_QNAME`, or not).
fn set_and_node(set: AnswerValue, node: &AnswerValue) -> Option<AnswerValue> {
    // The header flags answer for both (QR AA, NOERROR): the program adds the RCODE.
    let plain_node = node.kind == KIND_NODE
        && set.flags == node.flags
        && node.node_flags != 0
        && node.node_flags & !(NODE_NODATA | NODE_NXDOMAIN) == 0;
    let inline =
        set.kind == KIND_PLAIN && set.node_flags & !PLAIN_ANY_QNAME == 0 && usize::from(set.tail_len) <= TAIL_MAX;
    (plain_node && inline).then_some(AnswerValue {
        node_flags: set.node_flags | node.node_flags | PLAIN_ANSWERS_ANY,
        apex_len: node.apex_len,
        tail_id: node.tail_id,
        negative_len: node.negative_len,
        negative_sum: node.negative_sum,
        ..set
    })
}

impl Compiler<'_> {
    /// A signed zone's DO=1 entries at `node`: each static type's signed answer, a
    /// wildcard's synthesised answers' sections (for the encloser's gaps), and the
    /// node entry's (`nodata`, keyed `node_key`) signed NODATA.
    fn signed_entries(
        &mut self,
        node: &NodeView<'_>,
        static_types: &[u16],
        node_key: AnswerKey,
        nodata: &AnswerValue,
    ) -> Vec<(AnswerKey, AnswerValue)> {
        let mut entries = Vec::new();
        // Not NSEC, which only zone walkers ask: its signed answer would take a tail
        // entry at every name (docs/BENCHMARKS.md: 337 vs 114 MiB for 100,000 names).
        for &rtype in static_types.iter().filter(|&&t| t != NSEC) {
            entries.extend(self.signed_variant(node.name, rtype));
        }
        if node.name.starts_with(b"\x01*") {
            for &rtype in static_types.iter().filter(|&&t| t != NSEC && t != QTYPE_ANY) {
                entries.extend(self.wildcard_answer(node.name, rtype));
            }
        }
        if nodata.node_flags & NODE_NODATA != 0 {
            if let Some(value) = self.signed_nodata(node) {
                let key = AnswerKey {
                    hash: node_key.hash ^ DO_SALT,
                    ..node_key
                };
                entries.push((key, value));
            }
        }
        entries
    }

    /// The ANY entry of a node with sets: its one plain set's answer when that is the
    /// ANY answer (`one_plain`), else the engine's; a pass when ANY's answer is not static.
    fn any_entry(&mut self, node: &NodeView<'_>, one_plain: Option<AnswerValue>) -> AnswerValue {
        match (node.static_any, one_plain) {
            (false, _) => pass(KIND_PASS),
            (true, Some(value)) => value,
            (true, None) => self.plain(node.name, QTYPE_ANY),
        }
    }

    /// A signed zone's DO=1 NODATA at `node` — the SOA, the NSEC showing the types the
    /// name has (or covering an empty non-terminal), their RRSIGs — which is the same for
    /// every type the name lacks: the node entry's DO=1 variant. `None` when it does not
    /// fit the tables (then such queries pass, `pass_signed`).
    pub(super) fn signed_nodata(&mut self, node: &NodeView<'_>) -> Option<AnswerValue> {
        // A private-use type (RFC 6895 §3.1) the name does not have stands for them all.
        let absent = (0xff00..=0xfffe_u16).find(|t| node.sets.iter().all(|(rtype, _)| rtype != t))?;
        let value = self.plain_with(node.name, absent, Variant::Signed(None));
        (value.kind == KIND_PLAIN && value.ancount == 0 && value.nscount > 0).then_some(value)
    }
}

impl Compiler<'_> {
    /// The entries of a node at or below a zone cut: DS at the cut itself, which it
    /// answers with authority (RFC 4035 §3.1.4.1); the cut's referral under the node
    /// key; in a signed zone, both for DO=1 too (the referral under the node key's DO=1
    /// hash).
    fn cut_entries(
        &mut self,
        node: &NodeView<'_>,
        node_key: AnswerKey,
        referrals: &Referrals<'_>,
    ) -> Vec<(AnswerKey, AnswerValue)> {
        let mut entries = Vec::new();
        if let (Some(_), Some((ds_key, _))) = (referrals.get(node.name), key(self.generation, 43, node.name)) {
            entries.push((ds_key, self.plain(node.name, 43)));
            entries.extend(self.signed_variant(node.name, 43).filter(|_| node.signed));
        }
        let cut = label_suffixes(node.name).find_map(|suffix| referrals.get(suffix));
        let unsigned = cut.map_or_else(|| pass_because(KIND_NODE, REASON_REFERRAL), |(unsigned, _)| *unsigned);
        entries.push((node_key, unsigned));
        if let Some(&(_, Some(value))) = cut.filter(|_| node.signed) {
            let key = AnswerKey {
                hash: node_key.hash ^ DO_SALT,
                ..node_key
            };
            entries.push((key, value));
        }
        entries
    }

    /// A signed zone's node entry that answers NXDOMAIN below it, or has a wildcard
    /// child: with the gaps between its children (`denial`), when they fit the tables.
    fn with_denial(&mut self, name: &[u8], entry: &mut AnswerValue, children: &Children) {
        let wildcard = if entry.node_flags & NODE_NXDOMAIN != 0 {
            None
        } else if entry.node_flags & NODE_WILDCARD != 0 {
            match self.denials.wildcards.get(name) {
                Some(&rtype) => Some(rtype),
                None => return,
            }
        } else {
            return;
        };
        let labels = children.get(name).map_or(&[][..], Vec::as_slice);
        if let Some(base) = self.denial(name, labels, wildcard) {
            entry.node_flags |= NODE_DENIAL;
            entry.policy = base;
        }
    }
}

/// The NSEC type (RFC 4034 §4).
pub(super) const NSEC: u16 = 47;

impl Compiler<'_> {
    /// A signed zone's DO=1 answer for `name` and `rtype` — the records with their RRSIGs,
    /// as the engine writes them — under the key the program looks up for DO=1 (the name's
    /// hash with `DO_SALT`); `None` when it is not a plain answer the tables can hold.
    pub(super) fn signed_variant(&mut self, name: &[u8], rtype: u16) -> Option<(AnswerKey, AnswerValue)> {
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

impl Compiler<'_> {
    /// NODATA here (unless a CNAME makes user space answer), and below: NXDOMAIN, or the
    /// wildcard child's answers. The zone's SOA is in the small table, one entry the
    /// zone's node entries share.
    pub(super) fn node_value(&mut self, node: &NodeView<'_>) -> AnswerValue {
        let mut tail = vec![0u8, 0];
        tail.extend_from_slice(node.negative_soa);
        // An SOA too long for the table: the node passes (flags 0).
        let apex = node
            .name
            .get(node.name.len().saturating_sub(node.apex_len)..)
            .unwrap_or_default();
        let Some(mut value) = self.with_negative(pass(KIND_NODE), apex, &tail) else {
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
}
