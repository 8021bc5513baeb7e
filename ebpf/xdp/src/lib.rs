//! Empty on purpose: the XDP program is the `qdns-xdp` binary (src/main.rs), built for
//! `bpfel-unknown-none` by `edge/build.rs`. This library target exists only so that
//! `qdns-edge` can list the crate as a build-dependency and be rebuilt when it changes.
#![no_std]
