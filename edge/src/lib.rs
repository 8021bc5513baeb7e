//! qdns-edge: the data plane.
//!
//! ```text
//!   zones (standalone) or control ──► Snapshot ──compile──► ArcSwap<Engine>
//!                                                              │ load per batch
//!   NIC ─► XDP program (ebpf/xdp) ── XDP_PASS ─► kernel ─► UDP workers (SO_REUSEPORT,
//!                                                          recvmmsg/sendmmsg) ─┐
//!                                                      ─► TCP (tokio, RFC 7766)┴► Engine::respond
//! ```
//!
//! [`wire`] reads queries and writes responses without allocating; [`engine`] holds the
//! compiled snapshot and the RFC 1034/1035/2308/6891/8482 answer logic; [`server`] runs
//! the sockets; [`xdp`] loads and attaches the XDP program; [`stats`] counts what
//! happened. [`run`] ties them together for the binary and for tests.
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod answers;
pub mod config;
pub mod cookies;
pub mod dnstap;
pub mod engine;
pub mod follow;
pub mod memory;
pub mod metrics;
pub mod privileges;
pub mod ready;
pub mod server;
pub mod stats;
pub mod takeover;
pub mod wire;
pub mod xdp;

pub use config::Config;
pub use engine::{Engine, Outcome, Transport};
pub use server::run;
