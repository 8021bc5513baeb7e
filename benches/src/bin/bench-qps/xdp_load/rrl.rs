//! The random-subdomain floods with response rate limiting off and on (issue 31 §2):
//! the generator's queries all come from one address — the reflection attack the
//! limiter exists for (queries spoofed from one victim's address). trafgen's frames are
//! made so (one source address, many ports); kxdpgun 3.2 can send no other way: it takes
//! a source range (`-l`) but sends from its first address only (measured on this pair). qdns answers in XDP native and generic mode, at the stage's fixed loads.
//! What is measured is what the limiter costs the fast path and that the flood it
//! limits never reaches user space: server CPU per query *sent* (every query is
//! handled, answered or not), the replies (answers and slipped TC=1 answers), and the
//! program's own counts of answered, slipped, dropped and passed queries.

use std::{fmt::Write as _, path::Path};

use super::{Load, Mix, Step, SERVER_CPU};
use crate::{
    veth::{self, Mode, Pair, Placement},
    Plan,
};

/// The limiter as an operator would set it: 20 responses a second per /24, every second
/// one over the rate slipped (TC=1), the rest dropped.
const RRL_ARGS: [&str; 6] = ["--rrl-rate", "20", "--rrl-slip", "2", "--rrl-ipv4-prefix", "24"];

/// One server and mix with the limiter off or on.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RrlRun {
    /// `Mix::label`.
    pub mix: &'static str,
    /// `Mode::label`.
    pub server: &'static str,
    /// `Generator::label`.
    pub generator: &'static str,
    /// The limiter on.
    pub rrl: bool,
    /// The fixed loads.
    pub steps: Vec<Step>,
    /// Queries the program answered (slipped and dropped ones included: the limiter
    /// decides after the answer is made).
    pub answered: u64,
    /// Answers the limiter slipped.
    pub slipped: u64,
    /// Answers the limiter dropped.
    pub dropped: u64,
    /// Queries the program passed to user space (frames that are no query to this
    /// server not counted).
    pub passed: u64,
}

/// The runs: the unsigned flood in native and generic mode, the signed one in generic
/// mode (veth's native frames have no room for a signed NXDOMAIN), each with the
/// limiter off, then on, at `fixed` loads.
pub fn runs(plan: &Plan, pair: &Pair, work: &Path, fixed: &[u32]) -> Result<Vec<RrlRun>, String> {
    let mut runs = Vec::new();
    for (mix, modes) in [
        (Mix::Flood, &[Mode::Native, Mode::Generic][..]),
        (Mix::SignedFlood, &[Mode::Generic][..]),
    ] {
        let load = Load::prepare(plan.generator, pair, work, mix)?;
        for &mode in modes {
            for rrl in [false, true] {
                runs.push(measure(plan, pair, work, (&load, mix), (mode, rrl), fixed)?);
            }
        }
    }
    Ok(runs)
}

fn measure(
    plan: &Plan,
    pair: &Pair,
    work: &Path,
    (load, mix): (&Load, Mix),
    (mode, rrl): (Mode, bool),
    fixed: &[u32],
) -> Result<RrlRun, String> {
    let dir = work.join(format!(
        "gun-rrl-{}-{mix:?}-{}",
        mode.label(),
        if rrl { "on" } else { "off" }
    ));
    // As in `super::measure`: a generator's or knotd's program left on either end off.
    veth::ip(&["-n", &pair.client, "link", "set", "dev", &pair.client_if, "xdp", "off"])?;
    veth::ip(&["-n", &pair.server, "link", "set", "dev", &pair.server_if, "xdp", "off"])?;
    let peer = veth::peer_program(pair, mode)?;
    let signed = matches!(mix, Mix::SignedFlood).then(|| work.join("signed-snapshot.bin"));
    let place = Placement {
        cpu: Some(SERVER_CPU),
        workers: 1,
    };
    let args: &[&str] = if rrl { &RRL_ARGS } else { &[] };
    let running = veth::start_server(plan, pair, work, &dir, (mode, args), place, signed.as_deref())?;
    drop(peer);
    let receiver = load.receiver(pair)?;
    let pid = Some(running.child.id());
    let mut run = RrlRun {
        mix: mix.label(),
        server: mode.label(),
        generator: load.generator.label(),
        rrl,
        ..RrlRun::default()
    };
    for &rate in fixed {
        let step = super::offer(plan, pair, load, pid, rate)?;
        eprintln!(
            "bench-qps: {} {} {}, RRL {}: offered {rate}, sent {:.0}/s, replied {:.0}/s, {:.0} ns/query sent",
            load.generator.label(),
            mode.label(),
            mix.label(),
            if rrl { "on" } else { "off" },
            step.sent_qps,
            step.replied_qps,
            step.server_ns_per_sent
        );
        run.steps.push(step);
    }
    drop(receiver);
    drop(running);
    let log = dir.join("server.log");
    run.answered = veth::xdp_counters_in_log(&log, "answered_");
    run.slipped = veth::xdp_counters_in_log(&log, "rrl_slipped");
    run.dropped = veth::xdp_counters_in_log(&log, "rrl_dropped");
    // Every `pass_` counter but those of frames that are no query to us (ARP, IPv6
    // neighbour discovery and the like: not IP, not UDP, another port or address).
    let not_queries: u64 = ["pass_not_ip", "pass_not_udp", "pass_other_port", "pass_other_address"]
        .iter()
        .map(|name| veth::xdp_counters_in_log(&log, name))
        .sum();
    run.passed = veth::xdp_counters_in_log(&log, "pass_").saturating_sub(not_queries);
    Ok(run)
}

/// The Markdown lines of the comparison.
pub fn report(runs: &[RrlRun], fixed: &[u32]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nThe floods from one address (the reflection attack rate limiting is for), limiting off and on (`{}`); server CPU per query sent:\n",
        RRL_ARGS.join(" ")
    );
    let loads = |f: &dyn Fn(u32) -> String| fixed.iter().map(|&r| f(r)).collect::<Vec<_>>().join(" | ");
    let _ = writeln!(
        t,
        "| mix | server | generator | RRL | {} | {} | answered in XDP | slipped | dropped | passed |",
        loads(&|r| format!("replies/s @ {r}")),
        loads(&|r| format!("server ns/query @ {r}"))
    );
    let _ = writeln!(t, "|{}", "---|".repeat(8 + 2 * fixed.len()));
    for run in runs {
        let step = |rate: u32| run.steps.iter().find(|s| s.offered == rate);
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            run.mix,
            run.server,
            run.generator,
            if run.rrl { "on" } else { "off" },
            loads(&|r| step(r).map_or("–".into(), |s| format!("{:.0}", s.replied_qps))),
            loads(&|r| step(r).map_or("–".into(), |s| format!("{:.0}", s.server_ns_per_sent))),
            run.answered,
            run.slipped,
            run.dropped,
            run.passed
        );
    }
    t
}
