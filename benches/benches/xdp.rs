//! Per-query cost of the XDP program in the kernel (needs root): `BPF_PROG_TEST_RUN`
//! with `repeat = 1`, 1,000,000 times per case.
//!
//! Why not one run with a large `repeat`: the kernel runs the program again on the same
//! buffer, and the in-place rewrite has turned the query into a response after the first
//! run, so every later run would measure the cheap "not a query" pass. With `repeat = 1`
//! each run gets a fresh copy of the query, the action is checked (`XDP_TX` where an
//! answer is expected), and the kernel's own per-run time is kept.
//!
//! That time includes the kernel's clock reads and bottom-half toggling around the run,
//! so a two-instruction program (`r0 = XDP_PASS; exit`) is measured the same way — the
//! floor — and the program's own cost is the case's median minus the floor's median.
//! The cases run interleaved in rounds of 20,000 runs. This VM's speed drifts by up to
//! 2× over seconds (host load; no steal shows in vmstat), which moves whole rounds, so
//! besides the overall percentiles each case reports its quietest round — the lowest
//! per-round median — and the program's cost is that figure minus the floor's quietest
//! round median.
//!
//! Run: `sudo taskset -c 1 cargo bench -p benches --bench xdp` (prints one line per case).
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use qdns_edge::{xdp::XdpProgram, Engine};

/// Runs per case; `QDNS_XDP_RUNS` lowers it for quick comparisons, `QDNS_XDP_CASE`
/// keeps the cases whose label contains it.
const RUNS: u32 = 1_000_000;
/// Rounds the runs are split into (every case runs once per round).
const ROUNDS: u32 = 50;

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_PROG_TYPE_XDP: u32 = 6;
const XDP_PASS: u32 = 2;

/// `bpf(2)` with an attribute block (the kernel reads the fields it knows, the rest is 0).
fn bpf(cmd: libc::c_long, attr: &mut [u64; 16]) -> std::io::Result<i64> {
    // SAFETY: `attr` is a zeroed, 8-aligned 128-octet block that outlives the call.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), std::mem::size_of_val(attr)) };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// The floor: an XDP program of two instructions, `r0 = XDP_PASS; exit`.
fn floor_program() -> std::io::Result<OwnedFd> {
    let insns: [u64; 2] = [0xb7 | u64::from(XDP_PASS) << 32, 0x95];
    let license = c"GPL";
    let mut attr = [0u64; 16];
    attr[0] = u64::from(BPF_PROG_TYPE_XDP) | (insns.len() as u64) << 32;
    attr[1] = insns.as_ptr() as u64;
    attr[2] = license.as_ptr() as u64;
    let fd = bpf(BPF_PROG_LOAD, &mut attr)?;
    // SAFETY: the kernel returned a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// One `BPF_PROG_TEST_RUN` of the floor program: (action, ns).
fn floor_run(program: &OwnedFd, packet: &[u8]) -> std::io::Result<(u32, u32)> {
    let mut attr = [0u64; 16];
    attr[0] = u64::try_from(program.as_raw_fd()).map_err(std::io::Error::other)?;
    attr[1] = packet.len() as u64;
    attr[2] = packet.as_ptr() as u64;
    attr[4] = 1;
    bpf(BPF_PROG_TEST_RUN, &mut attr)?;
    Ok(((attr[0] >> 32) as u32, (attr[4] >> 32) as u32))
}

/// Names of the generated zone loaded beside the example zones: every case runs against
/// a table of this size, and the "names" cases draw from all of them.
const BIG_NAMES: usize = 100_000;

/// Names of the big zone: [`BIG_NAMES`], or `QDNS_XDP_NAMES` (e.g. 1,000,000 to see the
/// tables' memory at that size; the cold cases then draw from all of them).
fn big_names() -> usize {
    std::env::var("QDNS_XDP_NAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(BIG_NAMES)
}

/// The EDNS part of a case's query.
#[derive(Clone, Copy)]
enum Edns {
    None,
    /// OPT, DO=0, no options.
    Plain,
    /// OPT with DO=1 and a client COOKIE, as BIND sends its first query.
    Resolver,
    /// OPT with DO=1, the client COOKIE and a valid server cookie, as BIND sends once
    /// it has one.
    ResolverCookie,
    /// OPT, DO=0, and a Client Subnet option for the /24 `a.b.c.0/24`, as a resolver
    /// with ECS sends (RFC 7871 §11.1).
    Subnet([u8; 3]),
}

/// The cookie secret and clock the program is given (as an edge gives it its
/// location's), unless `QDNS_XDP_NO_COOKIES` is set.
const COOKIE_SECRET: [u8; 16] = [0x5a; 16];
const COOKIE_NOW: u32 = 1_800_000_000;

fn frame(name: &str, qtype: u16, edns: Edns) -> Vec<u8> {
    let mut dns = benches::query(name, qtype, None);
    match edns {
        Edns::None => {}
        Edns::Plain => {
            dns[11] = 1;
            dns.extend([0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
        }
        Edns::Resolver => {
            dns[11] = 1;
            dns.extend([0, 0, 41, 0x04, 0xd0, 0, 0, 0x80, 0, 0, 12, 0, 10, 0, 8]);
            dns.extend(0x0123_4567_89ab_cdefu64.to_be_bytes());
        }
        Edns::ResolverCookie => {
            dns[11] = 1;
            dns.extend([0, 0, 41, 0x04, 0xd0, 0, 0, 0x80, 0, 0, 28, 0, 10, 0, 24]);
            let client = 0x0123_4567_89ab_cdefu64.to_be_bytes();
            dns.extend(client);
            let made = qdns_abi::cookie::answer(
                &qdns_abi::cookie::CookieSecrets::new(COOKIE_SECRET, None, None),
                u64::from_le_bytes(client),
                None,
                &qdns_abi::cookie::ClientAddress::v4([10, 0, 0, 2]),
                COOKIE_NOW,
            );
            dns.extend(qdns_abi::cookie::server_octets(made.server));
        }
        Edns::Subnet(net) => {
            dns[11] = 1;
            dns.extend([0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 11, 0, 8, 0, 7, 0, 1, 24, 0]);
            dns.extend(net);
        }
    }
    let mut frame = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    let total = (20 + 8 + dns.len()) as u16;
    frame.extend([0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1]);
    frame[16..18].copy_from_slice(&total.to_be_bytes());
    frame.extend(40000u16.to_be_bytes());
    frame.extend(53u16.to_be_bytes());
    frame.extend(((8 + dns.len()) as u16).to_be_bytes());
    frame.extend([0, 0]);
    frame.extend(dns);
    frame
}

#[expect(
    clippy::too_many_lines,
    reason = "the cases table and the measurement loop read best in one place"
)]
fn main() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("xdp bench: needs root (BPF_PROG_TEST_RUN); skipped");
        return;
    }
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/zones");
    let zones = tempfile::tempdir().expect("temporary directory");
    for entry in std::fs::read_dir(&examples).expect("example zones") {
        let path = entry.expect("example zone").path();
        std::fs::copy(&path, zones.path().join(path.file_name().expect("file name"))).expect("copy");
    }
    big_zone(zones.path());
    // A country-sized geolocation database (QDNS_GEO_NETWORKS IPv4 networks, default
    // 400,000) and the zone t.example. of 50 geo sets over it (the `geo` bench's).
    let mut rng = qdns_testkit::Rng(0x6e0_2029);
    let db = zones.path().join("country.mmdb");
    let v4_networks = std::env::var("QDNS_GEO_NETWORKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400_000);
    let networks = benches::geo::write_country_db(&db, v4_networks, &mut rng);
    std::fs::write(zones.path().join("geo.toml"), benches::geo::zone(&mut rng)).expect("write zone");
    let sources = qdns_zone::Sources {
        geoip_db: Some(&db),
        location: None,
        secondary_dir: None,
        dynamic_dir: None,
    };
    let mut snapshot = qdns_zone::load_dir_from(zones.path(), 1, sources).expect("zones");
    std::fs::remove_file(&db).expect("database written");
    // example.net and shop.example signed: their DO=1 answers come from the tables'
    // signed variants (shop.example's policy sets: one per outcome).
    benches::sign_example_net(&mut snapshot);
    benches::sign_zone_of(&mut snapshot, b"\x04shop\x07example\x00");
    // QDNS_XDP_SIGN_BIG=1: the big zone signed too (table size and the random-name
    // cases of a signed zone; other cases as without it).
    if std::env::var_os("QDNS_XDP_SIGN_BIG").is_some() {
        benches::sign_zone_of(&mut snapshot, b"\x03big\x04test\x00");
        println!("big.test signed");
    }
    let engine = Engine::compile(&snapshot)
        .expect("compile")
        .with_options(&benches::served());
    engine.set_health(vec![u64::MAX; engine.health().len()]);
    // The frames go to 10.0.0.1:53: listened on by address (one lookup of the listen
    // set per query), or with QDNS_XDP_LISTEN=any on 0.0.0.0 (a miss, then the wildcard).
    let listen: Vec<std::net::SocketAddr> = if std::env::var_os("QDNS_XDP_LISTEN").is_some_and(|v| v == "any") {
        qdns_edge::xdp::any_address(53).to_vec()
    } else {
        vec![std::net::SocketAddr::from(([10, 0, 0, 1], 53))]
    };
    let mut program = XdpProgram::load(&listen, engine.max_udp_payload()).expect("load");
    let installing = std::time::Instant::now();
    let built = qdns_edge::xdp::Built::new(&engine, program.next_build());
    let took = built.took;
    let writing = std::time::Instant::now();
    let stats = program.install_built(built, &engine.health()).expect("install");
    println!(
        "tables compiled and installed in {:.2} s (compile {} ms, pack {} ms, write {} ms)",
        installing.elapsed().as_secs_f64(),
        took.compile_ms,
        took.pack_ms,
        writing.elapsed().as_millis()
    );
    // QDNS_XDP_PATCH=1: what an edge does with a delta that edits one name of the big
    // zone and bumps its serial, three times: then the bench ends.
    if std::env::var_os("QDNS_XDP_PATCH").is_some() {
        patches(&mut program, snapshot, engine);
        return;
    }
    // Cookies on, as an edge runs by default (QDNS_XDP_NO_COOKIES=1: off, COOKIE options
    // ignored: the hashing's cost).
    if std::env::var_os("QDNS_XDP_NO_COOKIES").is_none() {
        program
            .set_cookie_secrets(&qdns_abi::cookie::CookieSecrets::new(COOKIE_SECRET, None, None))
            .expect("cookie secrets");
        program.set_cookie_clock(COOKIE_NOW).expect("cookie clock");
    } else {
        println!("cookies off");
    }
    // QDNS_XDP_RRL=1: the rate limiter on at a rate no case reaches (each answer then
    // goes through the rate-limit stage and is allowed): the stage's cost.
    if std::env::var_os("QDNS_XDP_RRL").is_some() {
        let settings = qdns_abi::rrl::RrlSettings::new(1_000_000, 2, 24, 56, 7);
        program.set_rrl(&settings).expect("rate limiter");
        println!("rate limiter on (1,000,000 per second)");
    }
    println!("big zone: {} names", big_names());
    println!(
        "geo zone: {} sets over a database of {networks} networks; {} client-aware sets, {} blocks in the tables",
        benches::geo::SETS,
        stats.client,
        stats.client_blocks
    );
    let denial = stats.gaps * size_of::<qdns_abi::denial::Gap>() + stats.pieces * size_of::<qdns_abi::denial::Piece>();
    println!(
        "tables: {} plain, {} node, {} policy, {} pass entries, {} crowded; {}.{} MiB of arrays \
         ({} NXDOMAIN gaps and {} pieces: {}.{} MiB)",
        stats.plain,
        stats.nodes,
        stats.policy,
        stats.pass,
        stats.crowded,
        stats.bytes >> 20,
        ((stats.bytes * 10) >> 20) % 10,
        stats.gaps,
        stats.pieces,
        denial >> 20,
        ((denial * 10) >> 20) % 10
    );
    let floor = floor_program().expect("load the floor program");
    let plain = frame("www.example.com.", 1, Edns::None);
    // Distinct names in a random order (a fixed xorshift sequence): each lookup misses
    // the caches as real traffic over a big zone does.
    let mut draw = 0x9e37_79b9_7f4a_7c15u64;
    let names = big_names();
    let mut random_names = |count: usize, make: &dyn Fn(usize) -> Vec<u8>| -> Vec<Vec<u8>> {
        (0..count)
            .map(|_| {
                draw ^= draw << 13;
                draw ^= draw >> 7;
                draw ^= draw << 17;
                make(draw as usize % names)
            })
            .collect()
    };
    let names_a = random_names(BIG_NAMES, &|i| frame(&format!("h{i}.big.test."), 1, Edns::None));
    let names_resolver = random_names(BIG_NAMES, &|i| frame(&format!("h{i}.big.test."), 1, Edns::Resolver));
    let names_nxdomain = random_names(BIG_NAMES, &|i| frame(&format!("x{i}.big.test."), 1, Edns::None));
    // A random-subdomain flood on a signed zone, as validating resolvers relay it (DO=1
    // and a cookie): every name distinct and missing, answered from the gap tables
    // (until issue 31 all passed). Below the big zone too: signed with
    // QDNS_XDP_SIGN_BIG=1, its apex's 100,000 children are the gaps searched.
    let flood_signed = random_names(BIG_NAMES, &|i| frame(&format!("r{i}.shop.example."), 1, Edns::Resolver));
    let flood_big = random_names(BIG_NAMES, &|i| frame(&format!("x{i}.big.test."), 1, Edns::Resolver));
    // ECS /24s anywhere in 1.0.0.0–223.255.255.255, each for one of the 50 geo sets:
    // the class table's search from a cold start, as many resolvers' clients give it.
    let geo_ecs = random_names(BIG_NAMES, &|i| {
        let net = (i as u32).wrapping_mul(0x9e37_79b9) % (223 << 16) + (1 << 16);
        let [_, a, b, c] = net.to_be_bytes();
        frame(
            &format!("geo{}.t.example.", i % benches::geo::SETS),
            1,
            Edns::Subnet([a, b, c]),
        )
    });
    let cases: Vec<(&str, Vec<Vec<u8>>, u32)> = vec![
        ("floor (empty program)", vec![plain.clone()], 2),
        ("plain A", vec![plain.clone()], 3),
        ("plain A + EDNS", vec![frame("www.example.com.", 1, Edns::Plain)], 3),
        (
            "plain A + DO=1 + COOKIE",
            vec![frame("www.example.com.", 1, Edns::Resolver)],
            3,
        ),
        (
            "plain A + DO=1 + COOKIE with a valid server cookie",
            vec![frame("www.example.com.", 1, Edns::ResolverCookie)],
            3,
        ),
        ("signed A, DO=0", vec![frame("www.example.net.", 1, Edns::Plain)], 3),
        (
            "signed A + DO=1 + COOKIE (RRSIG)",
            vec![frame("www.example.net.", 1, Edns::Resolver)],
            3,
        ),
        ("weighted", vec![frame("www.shop.example.", 1, Edns::None)], 3),
        ("failover", vec![frame("api.shop.example.", 1, Edns::None)], 3),
        ("multivalue", vec![frame("mv.shop.example.", 28, Edns::None)], 3),
        (
            "signed NODATA + DO=1 + COOKIE (SOA, NSEC, RRSIGs)",
            vec![frame("www.example.net.", 16, Edns::Resolver)],
            3,
        ),
        (
            "signed weighted + DO=1 + COOKIE (RRSIG)",
            vec![frame("www.shop.example.", 1, Edns::Resolver)],
            3,
        ),
        (
            "signed failover + DO=1 + COOKIE (RRSIG)",
            vec![frame("api.shop.example.", 1, Edns::Resolver)],
            3,
        ),
        (
            "signed multivalue + DO=1 + COOKIE (RRSIG)",
            vec![frame("mv.shop.example.", 28, Edns::Resolver)],
            3,
        ),
        ("NXDOMAIN", vec![frame("no-such-name.example.com.", 1, Edns::None)], 3),
        ("NODATA", vec![frame("www.example.com.", 16, Edns::None)], 3),
        ("CNAME chain", vec![frame("chain.example.com.", 1, Edns::None)], 3),
        ("wildcard", vec![frame("anything.wild.example.com.", 1, Edns::None)], 3),
        (
            "wildcard MX (relocated, glue)",
            vec![frame("anything.wmx.big.test.", 15, Edns::None)],
            3,
        ),
        (
            "A, 100-octet name (long-name stage)",
            vec![frame(&format!("{LONG_NAME}.big.test."), 1, Edns::None)],
            3,
        ),
        (
            "30 A (large tail) + EDNS",
            vec![frame("pool.example.com.", 1, Edns::Plain)],
            3,
        ),
        (
            "referral with glue",
            vec![frame("host.sub.example.com.", 1, Edns::None)],
            3,
        ),
        (
            "30 A, no EDNS (needs TC: pass)",
            vec![frame("pool.example.com.", 1, Edns::None)],
            2,
        ),
        (
            "geo set + ECS /24 (one client)",
            vec![frame("geo7.t.example.", 1, Edns::Subnet([81, 2, 69]))],
            3,
        ),
        ("geo sets + ECS /24, random clients", geo_ecs, 3),
        (
            "geo set + EDNS, no ECS (packet source)",
            vec![frame("geo7.t.example.", 1, Edns::Plain)],
            3,
        ),
        ("A, random names of the big zone", names_a, 3),
        ("A + DO=1, random names of the big zone", names_resolver, 3),
        ("NXDOMAIN, random names of the big zone", names_nxdomain, 3),
        (
            "NXDOMAIN + DO=1 + COOKIE, random names under a signed zone (flood)",
            flood_signed,
            3,
        ),
        (
            "NXDOMAIN + DO=1 + COOKIE, random names of the big zone (flood)",
            flood_big,
            3,
        ),
        (
            "pass (other port)",
            vec![{
                let mut f = plain.clone();
                f[36..38].copy_from_slice(&5353u16.to_be_bytes());
                f
            }],
            2,
        ),
    ];
    let runs: u32 = std::env::var("QDNS_XDP_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(RUNS);
    let only = std::env::var("QDNS_XDP_CASE").unwrap_or_default();
    let check = std::env::var_os("QDNS_XDP_ANY").is_none();
    let cases: Vec<_> = cases
        .into_iter()
        .filter(|(label, _, _)| label.starts_with("floor") || label.contains(only.as_str()))
        .collect();
    let per_round = runs.div_ceil(ROUNDS);
    let mut times: Vec<Vec<u32>> = vec![Vec::with_capacity((per_round * ROUNDS) as usize); cases.len()];
    // Per case, the median of each round.
    let mut round_medians: Vec<Vec<u32>> = vec![Vec::with_capacity(ROUNDS as usize); cases.len()];
    let mut round = Vec::with_capacity(per_round as usize);
    // Where each round starts in a case's packets: the multi-name cases go on through
    // their names instead of starting over.
    let mut next = 0usize;
    // Runs whose action was not the case's: the slot table leaves an entry in a crowded
    // bucket to user space (well under 0.1 % of names; see `qdns_abi::slots`).
    let mut other_action = vec![0u64; cases.len()];
    for _ in 0..ROUNDS {
        for ((((label, packets, action), times), medians), other) in cases
            .iter()
            .zip(&mut times)
            .zip(&mut round_medians)
            .zip(&mut other_action)
        {
            round.clear();
            for i in 0..per_round as usize {
                let packet = &packets[(next + i) % packets.len()];
                let (got, ns) = if label.starts_with("floor") {
                    floor_run(&floor, packet).expect("floor test run")
                } else {
                    let run = program.test_run(packet, 1).expect("test run");
                    (run.action, u32::try_from(run.duration.as_nanos()).unwrap_or(u32::MAX))
                };
                if check && got != *action {
                    *other += 1;
                }
                round.push(ns);
            }
            times.extend_from_slice(&round);

            round.sort_unstable();
            medians.push(round[round.len() / 2]);
        }
        next += per_round as usize;
    }
    for ((label, _, _), &other) in cases.iter().zip(&other_action) {
        let runs = u64::from(per_round * ROUNDS);
        assert!(
            other * 1000 <= runs,
            "{label}: {other} of {runs} runs had another action"
        );
        if other > 0 {
            println!("{label}: {other} of {runs} runs passed to user space (crowded slot buckets)");
        }
    }
    let quiet = |medians: &[u32]| medians.iter().copied().min().unwrap_or(0);
    let floor_quiet = quiet(&round_medians[0]);
    for (((label, _, action), times), medians) in cases.iter().zip(&mut times).zip(&round_medians) {
        times.sort_unstable();
        let at = |q: usize| times[(times.len() - 1) * q / 100];
        let mean = times.iter().map(|&t| f64::from(t)).sum::<f64>()
            / f64::from(u32::try_from(times.len()).unwrap_or(u32::MAX));
        let quiet = quiet(medians);
        println!(
            "xdp {label:<22} p10 {:>4} ns  median {:>4} ns  p90 {:>4} ns  mean {mean:>6.1} ns  quiet {quiet:>4} ns  program {:>4} ns  ({} runs, action {action})",
            at(10),
            at(50),
            at(90),
            quiet.saturating_sub(floor_quiet),
            times.len()
        );
    }
}

/// Three deltas over `snapshot`, each editing one name of big.test. and its SOA serial:
/// each compiled as an edge compiles it and patched into `program`'s tables, with the
/// time each step took; the name's new address is then checked in XDP.
fn patches(program: &mut XdpProgram, mut snapshot: qdns_zone::Snapshot, mut engine: Engine) {
    use qdns_link::delta::{between, changed_names, zone_digests};
    const BIG: &[u8] = b"\x03big\x04test\x00";
    for round in 0..3u8 {
        let mut next = snapshot.clone();
        next.version += 1;
        let zone = next.zones.iter_mut().find(|z| z.origin == BIG).expect("big.test");
        let owner = [&[5u8][..], format!("h{}", 1000 + u32::from(round)).as_bytes(), BIG].concat();
        let set = zone
            .rrsets
            .iter_mut()
            .find(|s| s.name == owner && s.rtype == 1)
            .expect("the name");
        set.rdata = vec![vec![192, 0, 2, round]];
        zone.serial += 1;
        let soa = zone
            .rrsets
            .iter_mut()
            .find(|s| s.name == BIG && s.rtype == 6)
            .expect("the SOA");
        let rdata = &mut soa.rdata[0];
        let serial_at = name_end(rdata, name_end(rdata, 0));
        rdata[serial_at..serial_at + 4].copy_from_slice(&zone.serial.to_be_bytes());
        let started = std::time::Instant::now();
        let delta = between(&snapshot, &next, &zone_digests(&next), 0);
        let names = changed_names(&snapshot, &delta).expect("set changes");
        let delta_ms = started.elapsed().as_millis();
        let changes = qdns_edge::engine::Changes::new(snapshot.version, names);
        let compiling = std::time::Instant::now();
        let latest = Engine::compile(&next)
            .expect("compile")
            .with_options(&benches::served())
            .with_changes(changes);
        latest.set_health(vec![u64::MAX; latest.health().len()]);
        let compile_ms = compiling.elapsed().as_millis();
        let planning = std::time::Instant::now();
        let seed = program.patch_seed().expect("installed tables");
        let planned = qdns_edge::xdp::patch::plan(&engine, &latest, seed).expect("a patch covers the edit");
        let redone = planned.names();
        let plan_ms = planning.elapsed().as_millis();
        let writing = std::time::Instant::now();
        let stats = program
            .apply_patch(planned, &latest.health())
            .expect("the patch writes");
        println!(
            "patch {round}: {redone} names redone; delta {delta_ms} ms, engine compile {compile_ms} ms, \
             plan {plan_ms} ms, arrays copied, patched and flipped {} ms; {}.{} MiB of arrays",
            writing.elapsed().as_millis(),
            stats.bytes >> 20,
            ((stats.bytes * 10) >> 20) % 10
        );
        let query = frame(&format!("h{}.big.test.", 1000 + u32::from(round)), 1, Edns::None);
        let run = program.test_run(&query, 1).expect("test run");
        assert_eq!(run.action, 3, "answered in XDP");
        assert!(run.packet.ends_with(&[192, 0, 2, round]), "the new address");
        snapshot = next;
        engine = latest;
    }
}

/// Where the uncompressed wire name at `at` of `rdata` ends.
fn name_end(rdata: &[u8], mut at: usize) -> usize {
    while rdata[at] != 0 {
        at += 1 + usize::from(rdata[at]);
    }
    at + 1
}

/// A zone `big.test.` of [`big_names`] names `hN` with one A record each, in `dir`.
/// A 100-octet name of the big zone (relative).
const LONG_NAME: &str = "host.label-of-the-long-name-stage-number-one.label-of-the-long-name-stage-number-two";

fn big_zone(dir: &std::path::Path) {
    use std::fmt::Write as _;
    let toml = r#"[zone]
origin = "big.test."
ttl = 300
include = "big.test.zone"

[zone.soa]
mname = "ns1.big.test."
rname = "hostmaster.big.test."
serial = 1
refresh = 7200
retry = 900
expire = 1209600
minimum = 60

[zone.ns]
names = ["ns1.big.test."]
"#;
    // A name over 64 octets (the long-name stage: a reverse IPv6 name is 74) and a
    // wildcard MX whose exchange has an address (a relocated answer with glue).
    let mut master = format!("ns1 IN A 10.0.0.1\nmx IN A 10.0.0.2\n*.wmx IN MX 10 mx\n{LONG_NAME} IN A 10.0.0.3\n");
    for i in 0..big_names() {
        let _ = writeln!(master, "h{i} IN A 10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255);
    }
    std::fs::write(dir.join("big.test.toml"), toml).expect("write zone");
    std::fs::write(dir.join("big.test.zone"), master).expect("write zone");
}
