//! Loading the XDP program into the kernel, attaching it to interfaces, and keeping its
//! answer tables in step with the engine.
//!
//! The object is built from `ebpf/xdp` by `build.rs` and embedded. Attachments are
//! detached when the [`XdpProgram`] is dropped (on exit and on SIGTERM), unless handed
//! to a new edge ([`XdpProgram::pin_links`], [`XdpProgram::adopt_links`]).
//!
//! Table updates ([`XdpProgram::install`]) build a whole new generation's arrays, sized
//! to the snapshot, place them under the inactive bank of the map-of-maps, flip the
//! active word, then swap the old bank's arrays for empty ones; health updates
//! ([`XdpProgram::set_health`]) write the inactive health buffer and flip. A query reads
//! the active word once, so it sees one generation and one buffer whole.
mod config;
mod generation;
mod interface;
pub mod listen;
pub mod pack;
pub mod patch;
pub mod peer;
pub mod table;
pub mod watch;

use aya::{
    maps::{Array, PerCpuArray},
    programs::{TestRun, TestRunOptions, Xdp, XdpMode as AttachMode},
    Ebpf,
};
use qdns_abi::{
    answer::{
        CONFIG_MAP, CONFIG_UDP_PAYLOAD, HEALTH_MAP, LARGE_MAP, LARGE_MAX, LONG_NAMES_MAP, MEDIUM_MAP, POLICIES_MAP,
        POLICIES_MAX, RECORDS_MAP, SLOTS_MAP, SMALL_MAP,
    },
    client::{CLASS_CHAINS_MAP, CLIENT_BLOCKS_MAP, CLIENT_INDEX_MAP, CLIENT_SETS_MAP},
    Counter, ListenKey, LISTEN_MAP, PORTS_MAP, STATS_MAP,
};
use serde::Deserialize;
use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
};

pub use generation::{BuildTimes, Built};
use interface::driver;
pub use table::TableStats;

/// The XDP object, embedded at build time.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/qdns-xdp"));
/// Name of the program in the object.
const PROGRAM: &str = "qdns";
/// The rate-limit stage, tail-called by the program (`QDNS_STAGES_V1[0]`).
const RRL_STAGE: &str = "qdns_rrl";
/// The long-name stage, tail-called for names over 64 octets (`QDNS_STAGES_V1[1]`).
const LONG_STAGE: &str = "qdns_long";
const STAGES_MAP: &str = "QDNS_STAGES_V1";

/// How to attach.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum XdpMode {
    /// Driver mode where the driver supports it, else generic (skb) mode.
    #[default]
    Auto,
    /// Driver (native) mode only.
    Native,
    /// Generic (skb) mode: works on every interface, slower.
    Generic,
}

/// Why the XDP program could not be loaded or attached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum XdpLoadError {
    /// The kernel rejected the object.
    #[error("loading the XDP object failed: {0} (root or CAP_BPF+CAP_NET_ADMIN is required)")]
    Load(#[source] Box<aya::EbpfError>),
    /// The configuration map could not be written.
    #[error("configuring the XDP program failed: {0}")]
    Config(#[source] Box<aya::maps::MapError>),
    /// The program is missing or the verifier refused it.
    #[error("the XDP program failed to load: {0}")]
    Program(#[source] Box<aya::programs::ProgramError>),
    /// The object lacks a map the loader expects (a stale or mismatched build).
    #[error("the XDP object has no map {name}: it was built from another qdns-abi; rebuild qdns-edge")]
    MissingMap {
        /// The map's name.
        name: &'static str,
    },
    /// Attaching failed.
    #[error("attaching XDP to {iface} in {mode:?} mode failed: {source}{hint}")]
    Attach {
        /// The interface.
        iface: String,
        /// The mode tried.
        mode: XdpMode,
        /// The kernel's answer.
        #[source]
        source: Box<aya::programs::ProgramError>,
        /// What to try next.
        hint: &'static str,
    },
    /// The listen addresses do not fit the program's table.
    #[error("XDP listen addresses: {0}")]
    Listen(String),
    /// Handing an attachment to a new edge, or taking one over, failed.
    #[error("XDP handover on {iface}: {reason}")]
    Handover {
        /// The interface.
        iface: String,
        /// What went wrong.
        reason: String,
    },
}

/// Why the answer tables could not be written. The program then passes every query
/// to user space (never a stale or partial answer).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum XdpTableError {
    /// More policy sets or large tails than one generation holds.
    #[error("the XDP tables need {policies} policy and {large} large-tail entries; at most {} and {} fit: queries go to user space", POLICIES_MAX, LARGE_MAX)]
    TooLarge {
        /// Policy entries needed.
        policies: usize,
        /// Large-tail entries needed.
        large: usize,
    },
    /// The answers do not pack into one generation's arrays.
    #[error("{0}: queries go to user space")]
    Pack(#[from] pack::PackError),
    /// A patch could not be written (the whole generation is built instead).
    #[error("XDP table patch: {0}")]
    Patch(&'static str),
    /// A map operation failed.
    #[error("writing the XDP map {map} failed: {source}")]
    Map {
        /// The map.
        map: &'static str,
        /// The kernel's answer.
        #[source]
        source: Box<aya::maps::MapError>,
    },
}

/// The tables as installed.
#[derive(Default)]
struct Installed {
    /// Active generation (0 = none: everything passes).
    generation: u32,
    /// Active health buffer.
    health: u32,
    /// The bank of the map-of-maps the active generation is in.
    bank: u32,
    stats: TableStats,
    /// The snapshot version the active generation was compiled from.
    snapshot: u64,
    /// Its arrays and what a patch needs to know of them (`None` when nothing is
    /// installed).
    tables: Option<generation::Tables>,
}

/// Every address of both families on `port` (`0.0.0.0` and `::`): for tests and
/// benchmarks whose frames go to made-up addresses.
#[must_use]
pub fn any_address(port: u16) -> [SocketAddr; 2] {
    [
        SocketAddr::from(([0, 0, 0, 0], port)),
        SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)),
    ]
}

/// The loaded program and its attachments; dropping it detaches everything.
pub struct XdpProgram {
    ebpf: Ebpf,
    interfaces: Vec<String>,
    /// The attachment of each interface in `interfaces`, in order.
    links: Vec<aya::programs::xdp::XdpLinkId>,
    installed: Installed,
    /// Largest DNS message the tables may hold ([`XdpProgram::fit_links`]).
    max_message: usize,
    /// The cookie map entry the program reads (`qdns_abi::answer::CONFIG_COOKIE_SLOT`).
    cookie_slot: u32,
}

/// Result of one `BPF_PROG_TEST_RUN` of the program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRunOutcome {
    /// The XDP action returned (`XDP_PASS` = 2, `XDP_TX` = 3, ...).
    pub action: u32,
    /// The packet as the program left it.
    pub packet: Vec<u8>,
    /// Kernel-measured run time, averaged over the repeats.
    pub duration: std::time::Duration,
}

impl XdpProgram {
    /// Loads the embedded object and the program into the kernel (not attached), for the
    /// DNS service on the UDP addresses `listen` (`0.0.0.0` and `::` stand for every
    /// address of their family; at most [`qdns_abi::LISTEN_MAX`]), advertising
    /// `udp_payload` in EDNS. Queries to other addresses pass to the kernel
    /// (`pass_other_address`). It passes every query until [`XdpProgram::install`]
    /// gives it tables.
    pub fn load(listen: &[SocketAddr], udp_payload: u16) -> Result<XdpProgram, XdpLoadError> {
        let mut ebpf = Ebpf::load(OBJECT).map_err(|e| XdpLoadError::Load(Box::new(e)))?;
        // The `#[map]` names in the program are literals (the macro takes no constant):
        // a rename on one side only must fail here, not leave a counter unread.
        for name in [
            STATS_MAP,
            PORTS_MAP,
            LISTEN_MAP,
            SLOTS_MAP,
            RECORDS_MAP,
            POLICIES_MAP,
            LARGE_MAP,
            MEDIUM_MAP,
            SMALL_MAP,
            qdns_abi::denial::GAPS_MAP,
            qdns_abi::denial::PIECES_MAP,
            LONG_NAMES_MAP,
            CLIENT_SETS_MAP,
            CLIENT_BLOCKS_MAP,
            CLASS_CHAINS_MAP,
            CLIENT_INDEX_MAP,
            HEALTH_MAP,
            CONFIG_MAP,
            qdns_abi::rrl::RRL_MAP,
            qdns_abi::answer::ANSWERS_MAP,
            qdns_abi::cookie::COOKIE_MAP,
        ] {
            if ebpf.map(name).is_none() {
                return Err(XdpLoadError::MissingMap { name });
            }
        }
        {
            let map = ebpf
                .map_mut(CONFIG_MAP)
                .ok_or_else(|| XdpLoadError::Program(Box::new(aya::programs::ProgramError::NotLoaded)))?;
            let mut config = Array::<_, u64>::try_from(map).map_err(|e| XdpLoadError::Config(Box::new(e)))?;
            config
                .set(CONFIG_UDP_PAYLOAD, u64::from(udp_payload), 0)
                .map_err(|e| XdpLoadError::Config(Box::new(e)))?;
        }
        Self::write_listen(&mut ebpf, listen)?;
        Self::program(&mut ebpf)?
            .load()
            .map_err(|e| XdpLoadError::Program(Box::new(e)))?;
        Self::load_stages(&mut ebpf)?;
        Ok(XdpProgram {
            ebpf,
            interfaces: Vec::new(),
            links: Vec::new(),
            installed: Installed::default(),
            max_message: qdns_abi::answer::RESPONSE_MAX,
            cookie_slot: 0,
        })
    }

    /// Writes which destinations the program answers (`listen::table`): the port
    /// bitmaps, the address slots and their seed.
    fn write_listen(ebpf: &mut Ebpf, listen: &[SocketAddr]) -> Result<(), XdpLoadError> {
        let table = listen::table(listen).map_err(XdpLoadError::Listen)?;
        let config_error = |e| XdpLoadError::Config(Box::new(e));
        let map = ebpf
            .map_mut(PORTS_MAP)
            .ok_or(XdpLoadError::MissingMap { name: PORTS_MAP })?;
        let mut ports = Array::<_, u64>::try_from(map).map_err(config_error)?;
        for (&index, &word) in &table.port_words {
            ports.set(index, word, 0).map_err(config_error)?;
        }
        let map = ebpf
            .map_mut(LISTEN_MAP)
            .ok_or(XdpLoadError::MissingMap { name: LISTEN_MAP })?;
        let mut slots = Array::<_, ListenKey>::try_from(map).map_err(config_error)?;
        for (&index, key) in &table.slots {
            slots.set(index, key, 0).map_err(config_error)?;
        }
        let map = ebpf
            .map_mut(CONFIG_MAP)
            .ok_or(XdpLoadError::MissingMap { name: CONFIG_MAP })?;
        let mut config = Array::<_, u64>::try_from(map).map_err(config_error)?;
        config
            .set(qdns_abi::answer::CONFIG_LISTEN_SEED, u64::from(table.seed), 0)
            .map_err(config_error)
    }

    /// Loads the stages (rate limiting, long names) and puts each where the program
    /// tail-calls it. A long-name stage the kernel refuses (an older verifier) leaves
    /// names over 64 octets to user space (`pass_long_name`) rather than XDP off.
    fn load_stages(ebpf: &mut Ebpf) -> Result<(), XdpLoadError> {
        for (index, name) in [(0, RRL_STAGE), (1, LONG_STAGE)] {
            let not_loaded = || XdpLoadError::Program(Box::new(aya::programs::ProgramError::NotLoaded));
            let stage: &mut Xdp = ebpf
                .program_mut(name)
                .ok_or_else(not_loaded)?
                .try_into()
                .map_err(|e| XdpLoadError::Program(Box::new(e)))?;
            match stage.load() {
                Ok(()) => {}
                Err(error) if name == LONG_STAGE => {
                    tracing::warn!(%error, "the XDP long-name stage did not load: names over 64 octets go to user space");
                    continue;
                }
                Err(error) => return Err(XdpLoadError::Program(Box::new(error))),
            }
            let fd = stage
                .fd()
                .map_err(|e| XdpLoadError::Program(Box::new(e)))?
                .try_clone()
                .map_err(|e| XdpLoadError::Program(Box::new(aya::programs::ProgramError::from(e))))?;
            let map = ebpf
                .map_mut(STAGES_MAP)
                .ok_or(XdpLoadError::MissingMap { name: STAGES_MAP })?;
            let mut stages = aya::maps::ProgramArray::try_from(map).map_err(|e| XdpLoadError::Config(Box::new(e)))?;
            stages
                .set(index, &fd, 0)
                .map_err(|e| XdpLoadError::Config(Box::new(e)))?;
        }
        Ok(())
    }

    fn program(ebpf: &mut Ebpf) -> Result<&mut Xdp, XdpLoadError> {
        ebpf.program_mut(PROGRAM)
            .ok_or_else(|| XdpLoadError::Program(Box::new(aya::programs::ProgramError::NotLoaded)))?
            .try_into()
            .map_err(|e| XdpLoadError::Program(Box::new(e)))
    }

    /// Attaches the loaded program to each of `interfaces`.
    pub fn attach(&mut self, interfaces: &[String], mode: XdpMode) -> Result<(), XdpLoadError> {
        let program = Self::program(&mut self.ebpf)?;
        for iface in interfaces {
            let veth = driver(iface).as_deref() == Some("veth");
            if veth && mode == XdpMode::Native {
                tracing::warn!(
                    %iface,
                    "native XDP on veth: answers sent with XDP_TX reach the peer only while the peer end has a native XDP program attached (the kernel wakes the peer's NAPI only then; GRO is not enough); without one they are lost — --xdp-mode generic is safe"
                );
            }
            let attached = match mode {
                XdpMode::Native => program.attach(iface, AttachMode::Driver),
                XdpMode::Generic => program.attach(iface, AttachMode::Skb),
                // veth: generic, see the warning above — auto must never lose answers,
                // and the peer end (often in another namespace) is not ours to check.
                XdpMode::Auto if veth => program.attach(iface, AttachMode::Skb),
                XdpMode::Auto => program
                    .attach(iface, AttachMode::Driver)
                    .or_else(|_| program.attach(iface, AttachMode::Skb)),
            };
            let link = attached.map_err(|source| XdpLoadError::Attach {
                iface: iface.clone(),
                mode,
                source: Box::new(source),
                hint: match mode {
                    XdpMode::Native => "; the driver may lack native XDP: try --xdp-mode generic",
                    _ => "; check that the interface exists and has no other XDP program",
                },
            })?;
            tracing::info!(%iface, ?mode, "XDP program attached");
            self.interfaces.push(iface.clone());
            self.links.push(link);
        }
        Ok(())
    }

    /// Hands the attachments over (`crate::takeover`): pins each interface's XDP link
    /// in the bpffs directory `dir` and lets go of it, so it stays attached — running
    /// this program — after this process exits, until the new edge updates it. Returns
    /// (interface, pin) pairs.
    pub fn pin_links(&mut self, dir: &Path) -> Result<Vec<(String, PathBuf)>, XdpLoadError> {
        let program = Self::program(&mut self.ebpf)?;
        let mut pins = Vec::new();
        for (iface, link) in self.interfaces.drain(..).zip(self.links.drain(..)) {
            let path = dir.join(format!("qdns-xdp-{iface}-{}", std::process::id()));
            let owned = program
                .take_link(link)
                .map_err(|e| XdpLoadError::Program(Box::new(e)))?;
            let fd_link = aya::programs::links::FdLink::try_from(owned).map_err(|e| XdpLoadError::Handover {
                iface: iface.clone(),
                reason: format!("the XDP attachment is not a bpf_link (kernel older than 5.9?): {e}"),
            })?;
            // Dropped without unpinning: the pin holds the link (and the program).
            fd_link.pin(&path).map_err(|e| XdpLoadError::Handover {
                iface: iface.clone(),
                reason: format!(
                    "cannot pin the link at {} (is {} a bpffs? --bpffs): {e}",
                    path.display(),
                    dir.display()
                ),
            })?;
            tracing::info!(%iface, pin = %path.display(), "XDP link pinned for the new edge");
            pins.push((iface, path));
        }
        Ok(pins)
    }

    /// Takes over the links the old edge pinned: points each at this program
    /// (`bpf_link_update`: the interface goes from the old program to this one at once)
    /// and removes the pin (the link lives on in this process).
    pub fn adopt_links(&mut self, pins: &[(String, PathBuf)]) -> Result<(), XdpLoadError> {
        let program = Self::program(&mut self.ebpf)?;
        for (iface, path) in pins {
            let handover = |reason: String| XdpLoadError::Handover {
                iface: iface.clone(),
                reason,
            };
            let pinned = aya::programs::links::PinnedLink::from_pin(path)
                .map_err(|e| handover(format!("cannot open the pinned link {}: {e}", path.display())))?;
            let fd_link = aya::programs::links::FdLink::from(pinned);
            let xdp_link = aya::programs::xdp::XdpLink::try_from(fd_link)
                .map_err(|e| handover(format!("{} is not an XDP link: {e}", path.display())))?;
            let link = program
                .attach_to_link(xdp_link)
                .map_err(|e| handover(format!("bpf_link_update: {e}")))?;
            if let Err(err) = std::fs::remove_file(path) {
                tracing::warn!(%iface, pin = %path.display(), %err, "cannot remove the pin");
            }
            tracing::info!(%iface, "XDP link taken over: this edge's program answers now");
            self.interfaces.push(iface.clone());
            self.links.push(link);
        }
        Ok(())
    }

    /// Runs the program once on `packet` in the kernel (`BPF_PROG_TEST_RUN`), `repeat`
    /// times, and returns the verdict and the packet as the program left it.
    pub fn test_run(&mut self, packet: &[u8], repeat: u32) -> Result<TestRunOutcome, XdpLoadError> {
        let program = Self::program(&mut self.ebpf)?;
        // Room for the largest answer the program writes.
        let mut out = vec![0u8; packet.len() + qdns_abi::answer::RESPONSE_MAX];
        let result = program
            .test_run(TestRunOptions {
                data_in: Some(packet),
                data_out: Some(&mut out),
                repeat,
                ..TestRunOptions::default()
            })
            .map_err(|e| XdpLoadError::Program(Box::new(e)))?;
        out.truncate(result.data_size_out as usize);
        Ok(TestRunOutcome {
            action: result.return_value,
            packet: out,
            duration: result.duration,
        })
    }

    /// How many instructions the verifier processed for each program (answer path, the
    /// rate-limit and long-name stages), of its 1,000,000 budget: the headroom left for
    /// new branches.
    #[must_use]
    pub fn verified_instructions(&self) -> Vec<(&'static str, Option<u32>)> {
        [PROGRAM, RRL_STAGE, LONG_STAGE]
            .into_iter()
            .map(|name| {
                let count = self
                    .ebpf
                    .program(name)
                    .and_then(|p| p.info().ok())
                    .and_then(|info| info.verified_instruction_count());
                (name, count)
            })
            .collect()
    }

    /// The interfaces the program is attached to.
    #[must_use]
    pub fn interfaces(&self) -> &[String] {
        &self.interfaces
    }

    /// Counter totals summed over CPUs, labelled by [`Counter::label`].
    #[must_use]
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        let Some(map) = self.ebpf.map(STATS_MAP) else {
            return Vec::new();
        };
        let Ok(array) = PerCpuArray::<_, u64>::try_from(map) else {
            return Vec::new();
        };
        Counter::ALL
            .iter()
            .map(|&counter| {
                let total = array.get(&(counter as u32), 0).map_or(0, |values| values.iter().sum());
                (counter.label(), total)
            })
            .collect()
    }

    /// Answers counted at answer counter `index` (see `crate::answers`), summed over
    /// CPUs.
    #[must_use]
    pub fn answers(&self, index: u32) -> u64 {
        self.ebpf
            .map(qdns_abi::answer::ANSWERS_MAP)
            .and_then(|map| PerCpuArray::<_, u64>::try_from(map).ok())
            .and_then(|array| array.get(&index, 0).ok())
            .map_or(0, |values| values.iter().sum())
    }

    /// What the installed tables hold, and their generation (0 = none).
    #[must_use]
    pub fn table_stats(&self) -> (u32, TableStats) {
        (self.installed.generation, self.installed.stats)
    }

    /// The snapshot version the active tables answer from (0 = none): behind the
    /// engine's while a new snapshot's tables are built.
    #[must_use]
    pub fn tables_snapshot(&self) -> u64 {
        self.installed.snapshot
    }

    fn map(&mut self, name: &'static str) -> Result<&mut aya::maps::Map, XdpTableError> {
        self.ebpf.map_mut(name).ok_or(XdpTableError::Map {
            map: name,
            source: Box::new(aya::maps::MapError::InvalidName { name: name.to_owned() }),
        })
    }
}

fn map_error(map: &'static str) -> impl Fn(aya::maps::MapError) -> XdpTableError {
    move |source| XdpTableError::Map {
        map,
        source: Box::new(source),
    }
}
