//! The control socket protocol (SPEC §6): one JSON request per line, one JSON response
//! per line. `qdnsctl` and any script speak it; `qdnsctl --json` prints `data` as is.
use serde::{Deserialize, Serialize};

/// A request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    /// Zones, serials, snapshot and health versions, fail-open sets, edges, checkers.
    Status,
    /// Re-read every zone: validate, then swap atomically; on error change nothing.
    Reload,
    /// Every check, or one.
    Health {
        /// A check id (or `zone/id`).
        check: Option<String>,
    },
    /// Why a name answers as it does.
    Explain {
        /// Owner name.
        name: String,
        /// RR type mnemonic.
        rtype: String,
    },
    /// A zone's record sets in master-file form (policy sets as comments).
    Dump {
        /// The zone's origin.
        zone: String,
    },
    /// Force a check's status until the expiry.
    OverrideSet {
        /// Check id.
        check: String,
        /// Forced status.
        healthy: bool,
        /// Expiry (`30m`, `2h`; at most 72h).
        expires: String,
    },
    /// End an override.
    OverrideClear {
        /// Check id.
        check: String,
    },
    /// Set the status of an `external` check.
    External {
        /// Check id.
        check: String,
        /// New status.
        healthy: bool,
    },
    /// Shift traffic away from an AZ of a zonal set.
    ShiftStart {
        /// Owner name of the zonal set.
        rrset: String,
        /// AZ name.
        az: String,
        /// Expiry (required, at most 72h).
        expires: String,
        /// Free text.
        comment: Option<String>,
    },
    /// Give a shift a new expiry (from now).
    ShiftUpdate {
        /// Owner name.
        rrset: String,
        /// AZ name.
        az: String,
        /// New expiry.
        expires: String,
    },
    /// End a shift.
    ShiftCancel {
        /// Owner name.
        rrset: String,
        /// AZ name.
        az: String,
    },
    /// Every shift, and whether it moves traffic.
    ShiftList,
    /// The timeline.
    Events {
        /// Newest N (default 100).
        limit: Option<usize>,
    },
}

/// A response: `data` on success, `error` otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Success.
    pub ok: bool,
    /// The result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// What went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    /// A success.
    #[must_use]
    pub fn ok(data: serde_json::Value) -> Response {
        Response {
            ok: true,
            data: Some(data),
            error: None,
        }
    }

    /// A failure.
    #[must_use]
    pub fn error(message: impl Into<String>) -> Response {
        Response {
            ok: false,
            data: None,
            error: Some(message.into()),
        }
    }
}
