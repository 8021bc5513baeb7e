//! Link flags of the XDP program. bpf-linker generates the code, so LLVM target features
//! go to it: `allows-misaligned-mem-access` lets a 16-, 32- or 64-bit packet read or
//! write be one instruction instead of a byte sequence. The kernel accepts misaligned
//! packet and map accesses on architectures with efficient unaligned access (x86-64,
//! arm64) unless the program asks for strict alignment; stack accesses stay aligned
//! (LLVM aligns its stack slots).
fn main() {
    println!("cargo:rustc-link-arg-bins=--cpu-features=+allows-misaligned-mem-access");
}
