//! Loading the XDP program into the kernel and attaching it to interfaces.
//!
//! The object is built from `ebpf/xdp` by `build.rs` and embedded. Attachments are
//! detached when the [`XdpProgram`] is dropped (on exit and on SIGTERM).
use aya::{
    maps::PerCpuArray,
    programs::{TestRun, TestRunOptions, Xdp, XdpMode as AttachMode},
    Ebpf,
};
use qdns_abi::{Counter, MAX_PORTS, PORTS_MAP, STATS_MAP};
use serde::Deserialize;

/// The XDP object, embedded at build time.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/qdns-xdp"));
/// Name of the program in the object.
const PROGRAM: &str = "qdns";

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
}

/// The loaded program and its attachments; dropping it detaches everything.
pub struct XdpProgram {
    ebpf: Ebpf,
    interfaces: Vec<String>,
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
    /// DNS service on the UDP `ports` (at most 8).
    pub fn load(ports: &[u16]) -> Result<XdpProgram, XdpLoadError> {
        let mut ebpf = Ebpf::load(OBJECT).map_err(|e| XdpLoadError::Load(Box::new(e)))?;
        {
            let map = ebpf
                .map_mut(PORTS_MAP)
                .ok_or_else(|| XdpLoadError::Program(Box::new(aya::programs::ProgramError::NotLoaded)))?;
            let mut set =
                aya::maps::HashMap::<_, u16, u8>::try_from(map).map_err(|e| XdpLoadError::Config(Box::new(e)))?;
            for &port in ports.iter().take(MAX_PORTS as usize) {
                set.insert(port, 1, 0).map_err(|e| XdpLoadError::Config(Box::new(e)))?;
            }
        }
        Self::program(&mut ebpf)?
            .load()
            .map_err(|e| XdpLoadError::Program(Box::new(e)))?;
        Ok(XdpProgram {
            ebpf,
            interfaces: Vec::new(),
        })
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
            let attached = match mode {
                XdpMode::Native => program.attach(iface, AttachMode::Driver),
                XdpMode::Generic => program.attach(iface, AttachMode::Skb),
                XdpMode::Auto => program
                    .attach(iface, AttachMode::Driver)
                    .or_else(|_| program.attach(iface, AttachMode::Skb)),
            };
            attached.map_err(|source| XdpLoadError::Attach {
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
        }
        Ok(())
    }

    /// Runs the program once on `packet` in the kernel (`BPF_PROG_TEST_RUN`), `repeat`
    /// times, and returns the verdict and the packet as the program left it.
    pub fn test_run(&mut self, packet: &[u8], repeat: u32) -> Result<TestRunOutcome, XdpLoadError> {
        let program = Self::program(&mut self.ebpf)?;
        let mut out = vec![0u8; packet.len() + 256];
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
}
