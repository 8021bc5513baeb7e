//! Plain entries: a name and type's answer as the engine writes it (and its signed
//! variant), wildcard answers relocated to any question under the encloser, referrals.
use super::{
    engine_answer, engine_answer_signed, fold, large_id, large_tail, owned_by_question, pass, pass_because,
    relocatable, sum_words, Answer, AnswerValue, Compiler, PolicyKey, Relocatable, HEADER_LEN, KIND_PASS, KIND_PLAIN,
    KIND_REFERRAL, LARGE_TAIL_MAX, NAME_MAX, OPT_LEN, PLAIN_ANY_QNAME, PLAIN_LARGE, REASON_LARGE, REASON_OTHER,
    RESPONSE_MAX,
};
use qdns_abi::answer::SMALL_TAIL_MAX;

impl Compiler<'_> {
    /// The engine's answer as an entry: plain when it is the same for every client that
    /// can take it and fits the table (tails over [`qdns_abi::answer::TAIL_MAX`] go to the
    /// small table, over [`SMALL_TAIL_MAX`] to `large`), else a pass
    /// entry saying why.
    pub(super) fn plain(&mut self, name: &[u8], rtype: u16) -> AnswerValue {
        self.plain_with(name, rtype, Variant::Plain)
    }
}

/// Which answer an entry holds.
#[derive(Clone, Copy)]
pub(super) enum Variant<'h> {
    /// The answer to every client that can take it (in a signed zone: to DO=0 ones).
    Plain,
    /// A signed zone's DO=1 answer: for a policy set, under the health, weighted draw
    /// and client that give one outcome; else under the engine's own health.
    Signed(Option<Under<'h>>),
}

/// What gives one outcome of a policy set: a health bitmap, the weighted draw and (for
/// a client-aware set) a client whose block chooses the chain.
#[derive(Clone, Copy)]
pub(super) struct Under<'h> {
    pub(super) bitmap: &'h [u64],
    pub(super) draw: u32,
    pub(super) client: Option<std::net::IpAddr>,
}

impl Compiler<'_> {
    /// [`Compiler::plain`] for the queries `variant` stands for.
    pub(super) fn plain_with(&mut self, name: &[u8], rtype: u16, variant: Variant<'_>) -> AnswerValue {
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
        if tail.len() <= SMALL_TAIL_MAX {
            return self.with_tail(value, tail).unwrap_or_else(other);
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
    pub(super) fn wildcard_relocated(&mut self, name: &[u8], rtype: u16) -> Option<AnswerValue> {
        let encloser = name.get(2..)?;
        // Labels the zone cannot hold beside a wildcard's answer (checked: a name that
        // exists answers differently and the relocation check fails).
        let Relocatable { message, tail, fixups } = relocatable(
            self.engine,
            (name, rtype, false),
            encloser,
            (b"\x03q-x", Some(b"\x08q-xxxxxx")),
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
pub(super) struct Limits {
    /// Largest DNS message (with our OPT) an answer may be.
    pub(super) max_message: usize,
}

impl Limits {
    /// True when a `message` octets long (without OPT) still fits when its question
    /// grows by `growth` octets (a wildcard or referral entry answers names longer than
    /// its own).
    pub(super) fn fits(self, message: usize, growth: usize) -> bool {
        message + OPT_LEN + growth <= self.max_message.min(RESPONSE_MAX)
    }
}

/// `name` and each of its parent names, longest first.
pub(super) fn label_suffixes(name: &[u8]) -> impl Iterator<Item = &[u8]> + '_ {
    crate::wire::name::label_starts(name).filter_map(|start| name.get(start..))
}

impl Compiler<'_> {
    /// The referral of the cut `cut` as a relocatable entry: the engine's answer to a query
    /// for the cut's own name, whose compression pointers are found by comparing it with
    /// the answers for names 2 and 7 octets longer below the cut (each pointer moves by
    /// exactly that much, nothing else changes — checked, or `None`: the cut passes).
    /// `signed`: a signed zone's DO=1 referral (with the DS and its RRSIG, or the NSEC
    /// proving there is none).
    pub(super) fn referral_with(&mut self, cut: &[u8], signed: bool) -> Option<AnswerValue> {
        let Relocatable { message, tail, fixups } = relocatable(
            self.engine,
            (cut, 1, signed),
            cut,
            (b"\x01x", Some(b"\x06xxxxxx")),
            &mut self.scratch,
        )?;
        let flags = u16::from_be_bytes([message[2], message[3]]);
        let counts = |i: usize| u16::from_be_bytes([message[4 + 2 * i], message[5 + 2 * i]]);
        // A referral: no AA, NOERROR, nothing in the answer section.
        if flags & 0x040f != 0 || counts(1) != 0 || !self.limits.fits(message.len(), NAME_MAX.saturating_sub(cut.len()))
        {
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
        let mut value = pass(KIND_REFERRAL);
        value.flags = flags;
        value.nscount = counts(2);
        value.arcount = counts(3);
        value.apex_len = cut.len() as u8;
        value.node_flags = PLAIN_LARGE;
        value.policy = id;
        value.tail_len = tail.len() as u16;
        value.tail_sum = fold(sum_words(&tail, 0));
        Some(value)
    }
}
