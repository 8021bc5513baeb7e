//! Returning freed memory to the operating system, for a daemon on glibc's malloc
//! (`qdns-control`, which forbids unsafe code itself; the edge runs mimalloc and has its
//! own).
//!
//! A control reload holds the old and the new zone set at once; once the old one is dropped,
//! glibc's malloc keeps its pages (in every thread's arena) for reuse: at 1,000,000
//! records control stayed ≈ 125 MiB above its idle size after each reload
//! (docs/BENCHMARKS.md, fleet). Trimming after the reload hands them back.

/// Returns the free pages of every malloc arena to the system (glibc's `malloc_trim`;
/// elsewhere nothing).
pub fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes a size and touches only the allocator's own state.
    unsafe {
        libc::malloc_trim(0);
    }
}
