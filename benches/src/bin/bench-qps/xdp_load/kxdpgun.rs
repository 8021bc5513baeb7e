//! Knot's kxdpgun (`AF_XDP`) as the veth pair's generator, where its XDP program loads
//! (`--generator kxdpgun`). It attaches its own program to the client end and counts
//! the replies it receives itself. Knot 3.2.6's program is refused by Linux 6.18
//! ("program of this type cannot use helper `bpf_xdp_adjust_meta`"): there the run fails
//! with the kernel's words, and trafgen (the default) is the generator.
use std::{path::Path, process::Command};

use super::super::veth::{Pair, PORT, SERVER};
use super::{
    trafgen::{busy_share, cpu_times, Traffic},
    GENERATOR_CPU, SERVER_CPU,
};

/// One kxdpgun run: what it sent and got back, all from the client end's address
/// (kxdpgun 3.2 takes a source range with `-l` but sends from its first address only,
/// as measured on this pair). Its XDP socket is refused as busy for a moment after the
/// previous run let go of the queue: tried again a few times.
pub fn send(pair: &Pair, queries: &Path, seconds: u32, rate: u32) -> Result<Traffic, String> {
    let mut last = String::new();
    for _ in 0..5 {
        match once(pair, queries, seconds, rate) {
            Err(err) if err.contains("busy") => {
                last = err;
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
            other => return other,
        }
    }
    Err(last)
}

fn once(pair: &Pair, queries: &Path, seconds: u32, rate: u32) -> Result<Traffic, String> {
    let busy_before = cpu_times(SERVER_CPU);
    let out = Command::new("ip")
        .args(["netns", "exec", &pair.client, "kxdpgun"])
        .args(["-t", &seconds.to_string(), "-Q", &rate.to_string()])
        .args(["-F", &GENERATOR_CPU.to_string(), "-p", &PORT.to_string(), "-i"])
        .arg(queries)
        .arg(SERVER)
        .output()
        .map_err(|e| format!("kxdpgun: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |label: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.trim_start().starts_with(label))?
            .split(':')
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    match (field("total queries"), field("total replies")) {
        (Some(sent), Some(replied)) if out.status.success() => Ok(Traffic {
            sent,
            replied,
            seconds: f64::from(seconds),
            attempted: Some(sent),
            server_cpu_busy: busy_share(busy_before, cpu_times(SERVER_CPU)),
        }),
        _ => Err(format!("kxdpgun failed: {}", text.trim())),
    }
}
