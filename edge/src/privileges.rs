//! Capabilities the edge gives up (issue 28 §1, SPEC §10 "Privileges").
//!
//! The unit grants `CAP_NET_BIND_SERVICE` (port 53) and, for the XDP program,
//! `CAP_BPF`, `CAP_NET_ADMIN` and `CAP_PERFMON`. An edge started without `--xdp` drops
//! the last three from every set — effective, permitted, inheritable, ambient and (where
//! the process may) the bounding set — before it starts a thread: capabilities are per
//! thread, and every thread it starts later inherits the reduced sets. A replacement it
//! starts on SIGUSR2 inherits them too (ambient), so it runs without XDP as well, as its
//! arguments say.
//!
//! With `--xdp` the edge keeps them: each new snapshot creates the table maps
//! (`CAP_BPF`), and a takeover's replacement loads its program and attaches it
//! (`CAP_PERFMON`, `CAP_NET_ADMIN`). Dropping them from the effective sets of a running,
//! multi-threaded process would need each thread to do it (libcap's psx); that is not
//! done yet (docs/OPERATIONS.md, "Least privilege").
use caps::{CapSet, Capability};

/// What loading and attaching the XDP program takes.
pub const XDP_CAPABILITIES: [Capability; 3] = [Capability::CAP_BPF, Capability::CAP_NET_ADMIN, Capability::CAP_PERFMON];

/// For an edge without XDP: drops [`XDP_CAPABILITIES`] from every set of this process.
/// Call before any thread starts. Returns the ones it held (and so dropped).
///
/// # Errors
/// When the kernel refuses a drop (dropping needs no privilege, so this is not
/// expected; the caller stops rather than run with more than it says).
pub fn drop_xdp_capabilities() -> Result<Vec<Capability>, caps::errors::CapsError> {
    let mut held = Vec::new();
    for cap in XDP_CAPABILITIES {
        if caps::has_cap(None, CapSet::Permitted, cap)? || caps::has_cap(None, CapSet::Inheritable, cap)? {
            held.push(cap);
        }
        // Ambient first (it may not exceed permitted and inheritable), effective before
        // permitted (it may not exceed permitted).
        for set in [
            CapSet::Ambient,
            CapSet::Effective,
            CapSet::Permitted,
            CapSet::Inheritable,
        ] {
            caps::drop(None, set, cap)?;
        }
        // The bounding set needs CAP_SETPCAP, which the unit does not grant (its
        // CapabilityBoundingSet already holds only the four); root drops it too.
        let _ = caps::drop(None, CapSet::Bounding, cap);
    }
    Ok(held)
}
