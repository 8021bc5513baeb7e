//! Loading the XDP program into the kernel and attaching it to interfaces.
//!
//! The object is built from `ebpf/xdp` by `build.rs` and embedded. Attachments are
//! detached when the [`XdpGuard`] is dropped (on exit and on SIGTERM).
use aya::{
    maps::PerCpuArray,
    programs::{Xdp, XdpMode as AttachMode},
    Ebpf,
};
use qdns_abi::{Counter, STATS_MAP};
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
pub struct XdpGuard {
    ebpf: Ebpf,
    interfaces: Vec<String>,
}

impl XdpGuard {
    /// Loads the embedded program and attaches it to each of `interfaces`.
    pub fn attach(interfaces: &[String], mode: XdpMode) -> Result<XdpGuard, XdpLoadError> {
        let mut ebpf = Ebpf::load(OBJECT).map_err(|e| XdpLoadError::Load(Box::new(e)))?;
        let program: &mut Xdp = ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| XdpLoadError::Program(Box::new(aya::programs::ProgramError::NotLoaded)))?
            .try_into()
            .map_err(|e| XdpLoadError::Program(Box::new(e)))?;
        program
            .load()
            .map_err(|e| XdpLoadError::Program(Box::new(e)))?;
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
        }
        Ok(XdpGuard {
            ebpf,
            interfaces: interfaces.to_vec(),
        })
    }

    /// The interfaces the program is attached to.
    #[must_use]
    pub fn interfaces(&self) -> &[String] {
        &self.interfaces
    }

    /// Counter totals summed over CPUs, labelled by [`Counter::label`].
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
                let total = array
                    .get(&(counter as u32), 0)
                    .map(|values| values.iter().sum())
                    .unwrap_or(0);
                (counter.label(), total)
            })
            .collect()
    }
}
