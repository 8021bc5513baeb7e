//! Builds the XDP program (`ebpf/xdp`) for `bpfel-unknown-none` with the nightly toolchain
//! and bpf-linker, so `qdns-edge` can embed it (`include_bytes_aligned!`).
//!
//! bpf-linker is looked up on PATH, then in `$QDNS_TOOLS/bin` (default `~/.cache/qdns/bin`),
//! where `scripts/setup` installs it.
use std::{env, path::PathBuf};

use anyhow::{anyhow, Context as _};
use aya_build::{Package, Toolchain};

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed=QDNS_TOOLS");
    let tools = env::var_os("QDNS_TOOLS")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/qdns")))
        .ok_or_else(|| anyhow!("neither QDNS_TOOLS nor HOME is set"))?;
    let bin = tools.join("bin");
    let path = env::var_os("PATH").unwrap_or_default();
    let on_path = env::split_paths(&path).any(|dir| dir.join("bpf-linker").is_file());
    if !on_path {
        if !bin.join("bpf-linker").is_file() {
            return Err(anyhow!(
                "bpf-linker not found on PATH nor in {}: run scripts/setup first",
                bin.display()
            ));
        }
        let joined = env::join_paths(std::iter::once(bin).chain(env::split_paths(&path)))
            .context("cannot extend PATH with the bpf-linker directory")?;
        // SAFETY (edition 2021: set_var is safe here): build scripts are single-threaded at
        // this point; the child cargo inherits the extended PATH.
        env::set_var("PATH", joined);
    }
    aya_build::build_ebpf(
        [Package {
            name: "qdns-xdp",
            root_dir: "../ebpf/xdp",
            ..Package::default()
        }],
        Toolchain::default(),
    )
}
