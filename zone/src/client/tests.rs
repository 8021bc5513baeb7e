use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;

use super::*;

fn v4(text: &str) -> u32 {
    u32::from(text.parse::<Ipv4Addr>().unwrap())
}

fn rule(prefix: &str, member: u8) -> Rule<u32> {
    let (addr, len) = parse_prefix(prefix).unwrap();
    let IpAddr::V4(a) = addr else { panic!("v4 only") };
    Rule {
        start: u32::from(a),
        len,
        member,
    }
}

fn table(rules: &[(&str, u8)], star: Option<u8>) -> ClientRules {
    let v4 = rules.iter().map(|&(p, m)| rule(p, m)).collect();
    compile(Vec::new(), v4, Vec::new(), star).unwrap()
}

fn decide(rules: &ClientRules, addr: &str) -> (Vec<u8>, u8) {
    let d = rules.decide(addr.parse().unwrap());
    (d.chain.to_vec(), d.scope)
}

#[test]
fn prefixes_are_parsed_strictly() {
    assert_eq!(parse_prefix("10.0.0.0/8").unwrap(), ("10.0.0.0".parse().unwrap(), 8));
    assert_eq!(parse_prefix("2001:db8::/32").unwrap().1, 32);
    assert_eq!(parse_prefix("192.0.2.7").unwrap().1, 32);
    assert!(parse_prefix("10.0.0.1/8").unwrap_err().contains("bits set past /8"));
    assert!(parse_prefix("10.0.0.0/33").unwrap_err().contains("0..=32"));
    assert!(parse_prefix("eu").is_err());
}

#[test]
fn nested_rules_are_split_so_each_block_has_one_answer() {
    // member 0: 10.0.0.0/8, member 1: 10.1.2.0/24 inside it, member 2: `*`.
    let rules = table(&[("10.0.0.0/8", 0), ("10.1.2.0/24", 1)], Some(2));
    assert_eq!(decide(&rules, "10.1.2.77"), (vec![1, 0, 2], 24));
    // 10.1.3.0 is in 10.1.3.0/24, the sibling of the hole: the /8 minus the hole.
    assert_eq!(decide(&rules, "10.1.3.0"), (vec![0, 2], 24));
    assert_eq!(decide(&rules, "10.200.0.1"), (vec![0, 2], 9));
    assert_eq!(decide(&rules, "10.0.0.1"), (vec![0, 2], 16));
    // Outside every rule: `*`, scope the largest prefix that meets no rule.
    assert_eq!(decide(&rules, "11.0.0.1"), (vec![2], 8));
    assert_eq!(decide(&rules, "192.0.2.1"), (vec![2], 1));
    // 8 blocks for the /8 around the /24 (one per level), plus the /24.
    assert_eq!(rules.v4.len(), 17);
}

#[test]
fn siblings_with_one_answer_merge_and_a_set_without_v4_rules_has_scope_zero() {
    let rules = table(&[("10.0.0.0/9", 0), ("10.128.0.0/9", 0)], Some(1));
    assert_eq!(
        rules.v4,
        vec![Block {
            start: v4("10.0.0.0"),
            len: 8,
            chain: 1
        }]
    );
    assert_eq!(decide(&rules, "10.5.5.5"), (vec![0, 1], 8));
    let only_v6 = compile(
        Vec::new(),
        Vec::new(),
        vec![Rule {
            start: 1u128 << 127,
            len: 1,
            member: 0,
        }],
        Some(1),
    )
    .unwrap();
    assert_eq!(decide(&only_v6, "192.0.2.1"), (vec![1], 0));
    assert_eq!(decide(&only_v6, "8000::1"), (vec![0, 1], 1));
    assert_eq!(
        decide(&only_v6, "::ffff:192.0.2.1"),
        (vec![1], 0),
        "IPv4-mapped is IPv4"
    );
}

#[test]
fn one_prefix_for_two_members_is_an_error_and_a_zero_length_rule_is_the_root() {
    let err = compile(
        Vec::new(),
        vec![rule("10.0.0.0/8", 0), rule("10.0.0.0/8", 1)],
        Vec::new(),
        None,
    )
    .unwrap_err();
    assert_eq!(
        err,
        RulesError::Conflict {
            prefix: "10.0.0.0/8".into(),
            members: (0, 1)
        }
    );
    let rules = table(&[("0.0.0.0/0", 0), ("10.0.0.0/8", 1)], Some(2));
    assert_eq!(decide(&rules, "10.0.0.1"), (vec![1, 0, 2], 8));
    assert_eq!(decide(&rules, "11.0.0.1"), (vec![0, 2], 8));
}

#[test]
fn ecs_sources_are_capped_and_source_zero_means_the_packet_source() {
    let source: IpAddr = "127.0.0.9".parse().unwrap();
    let ecs = |a: &str, len| Some((a.parse::<IpAddr>().unwrap(), len));
    assert_eq!(
        client_prefix(ecs("192.0.2.77", 32), source),
        "192.0.2.0".parse::<IpAddr>().unwrap()
    );
    assert_eq!(
        client_prefix(ecs("192.0.2.128", 25), source),
        "192.0.2.0".parse::<IpAddr>().unwrap()
    );
    assert_eq!(
        client_prefix(ecs("192.0.0.0", 16), source),
        "192.0.0.0".parse::<IpAddr>().unwrap()
    );
    assert_eq!(
        client_prefix(ecs("2001:db8:1:2ff:1::", 128), source),
        "2001:db8:1:200::".parse::<IpAddr>().unwrap()
    );
    assert_eq!(client_prefix(ecs("0.0.0.0", 0), source), source);
    assert_eq!(client_prefix(None, source), source);
}

/// The oracle: the chain found by walking every rule containing `addr`.
fn oracle(rules: &[Rule<u32>], star: Option<u8>, addr: u32) -> Vec<u8> {
    let mut containing: Vec<&Rule<u32>> = rules
        .iter()
        .filter(|r| addr & !u32::host_mask(r.len) == r.start)
        .collect();
    containing.sort_by_key(|r| std::cmp::Reverse(r.len));
    let mut chain: Vec<u8> = Vec::new();
    for r in containing {
        if !chain.contains(&r.member) {
            chain.push(r.member);
        }
    }
    if let Some(s) = star {
        if !chain.contains(&s) {
            chain.push(s);
        }
    }
    chain
}

fn arb_rules() -> impl Strategy<Value = Vec<Rule<u32>>> {
    // Rules packed into 10.0.0.0/16 so they nest and touch often.
    prop::collection::vec((0u32..0x1_0000, 8u8..=28, 0u8..4), 0..12).prop_map(|raw| {
        let mut seen = std::collections::BTreeMap::new();
        for (low, len, member) in raw {
            let len = len.max(16);
            let start = (v4("10.0.0.0") | low) & !u32::host_mask(len);
            seen.entry((start, len)).or_insert(member);
        }
        seen.into_iter()
            .map(|((start, len), member)| Rule { start, len, member })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    /// Every address inside the returned scope gets the same chain, and the chain is
    /// the longest-match-first walk of the rules (first, last and random addresses).
    #[test]
    fn every_address_inside_the_scope_gets_the_same_answer(
        rules in arb_rules(),
        probes in prop::collection::vec(0u32..0x2_0000, 1..24),
        offsets in prop::collection::vec(any::<u32>(), 4),
    ) {
        let star = Some(9u8);
        let table = compile(Vec::new(), rules.clone(), Vec::new(), star).unwrap();
        for probe in probes {
            let addr = v4("10.0.0.0").wrapping_add(probe).wrapping_sub(0x8000);
            let d = table.decide(IpAddr::V4(addr.into()));
            prop_assert_eq!(d.chain.to_vec(), oracle(&rules, star, addr));
            let first = addr & !u32::host_mask(d.scope);
            let last = first | u32::host_mask(d.scope);
            let mut inside = vec![first, last];
            inside.extend(offsets.iter().map(|o| first | (o & u32::host_mask(d.scope))));
            for other in inside {
                let e = table.decide(IpAddr::V4(other.into()));
                prop_assert_eq!(e.chain, d.chain, "{:?}/{} vs {:?}", Ipv4Addr::from(first), d.scope, Ipv4Addr::from(other));
                prop_assert_eq!(e.scope, d.scope);
            }
            // The scope is the largest such prefix: one bit shorter holds another answer
            // somewhere (unless it is /0).
            if d.scope > 0 {
                let wider = d.scope - 1;
                let wfirst = addr & !u32::host_mask(wider);
                let differs = (0..=u32::host_mask(wider).min(0x3_ffff)).step_by(16).any(|o| {
                    oracle(&rules, star, wfirst | o) != d.chain
                }) || u32::host_mask(wider) > 0x3_ffff;
                prop_assert!(differs, "scope /{} at {:?} is not the largest", d.scope, Ipv4Addr::from(addr));
            }
        }
    }
}

#[test]
fn disjoint_prefixes_merge_with_their_siblings() {
    let blocks = vec![
        (v4("10.0.1.0"), 24, 1),
        (v4("10.0.0.0"), 24, 1),
        (v4("10.0.2.0"), 23, 1),
        (v4("10.0.5.0"), 24, 2),
        (v4("10.0.4.0"), 24, 3),
    ];
    assert_eq!(
        merge_blocks(blocks),
        vec![
            Block {
                start: v4("10.0.0.0"),
                len: 22,
                chain: 1
            },
            Block {
                start: v4("10.0.4.0"),
                len: 24,
                chain: 3
            },
            Block {
                start: v4("10.0.5.0"),
                len: 24,
                chain: 2
            },
        ]
    );
}

#[test]
fn the_first_level_index_finds_what_the_whole_search_finds() {
    // 20,000 random prefixes, nested and not, in both families.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for i in 0..20_000u32 {
        let len = 8 + (next() % 25) as u8;
        let start = (next() as u32) & !u32::host_mask(len);
        v4.push(Rule {
            start,
            len,
            member: (i % 7) as u8,
        });
        let len6 = 16 + (next() % 49) as u8;
        let start6 = (u128::from(next()) << 64) & !u128::host_mask(len6);
        v6.push(Rule {
            start: start6,
            len: len6,
            member: (i % 5) as u8,
        });
    }
    // Drop prefixes given to two members (a load error).
    v4.sort_by_key(|r| (r.start, r.len));
    v4.dedup_by_key(|r| (r.start, r.len));
    v6.sort_by_key(|r| (r.start, r.len));
    v6.dedup_by_key(|r| (r.start, r.len));
    let plain = compile(Vec::new(), v4, v6, Some(9)).unwrap();
    let mut indexed = plain.clone();
    indexed.build_index();
    assert!(indexed.index.is_some());
    for _ in 0..50_000 {
        let a4 = IpAddr::V4(Ipv4Addr::from(next() as u32));
        let a6 = IpAddr::V6(std::net::Ipv6Addr::from(u128::from(next()) << 64 | u128::from(next())));
        for addr in [a4, a6] {
            assert_eq!(indexed.decide(addr), plain.decide(addr), "{addr}");
        }
    }
}
