//! Network namespaces for the edge's tests: qdns-testkit's (shared with control's).
#[allow(unused_imports, reason = "each test binary uses a different subset")]
pub use qdns_testkit::netns::{is_root, require_root, run, Pair};
