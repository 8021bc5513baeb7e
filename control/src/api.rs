//! The control socket protocol (SPEC §6): one JSON request per line, one JSON response
//! per line. The daemon and `qdnsctl` share every type here, so neither can drift from
//! the other: the daemon answers a [`Request`] with a [`Reply`] or an [`ApiError`],
//! `qdnsctl` decodes `data` with [`Reply::decode`] for the request it sent, and
//! `qdnsctl --json` prints `data` as is.
use serde::{Deserialize, Serialize};

use crate::{
    checker::Observation,
    state::{EdgeInfo, Event},
};

/// Longest request line, in octets (newline included); a longer one is refused and the
/// connection closed.
pub const MAX_REQUEST: usize = 64 * 1024;

/// A request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Zones, serials, snapshot and health versions, fail-open sets, edges, checkers.
    // The commands without arguments are empty struct variants, not unit variants:
    // serde's `deny_unknown_fields` does not reach a unit variant of an internally
    // tagged enum, so `{"cmd":"reload","dry_run":true}` would reload for real.
    Status {},
    /// Re-read every zone: validate, then swap atomically; on error change nothing.
    Reload {},
    /// Every check, or one.
    Health {
        /// A check id (or `zone/id`).
        #[serde(default)]
        check: Option<String>,
    },
    /// Why a name answers as it does.
    Explain {
        /// Owner name.
        name: String,
        /// RR type mnemonic.
        rtype: String,
        /// A client address, or an ECS prefix `ADDR/LEN`: what client-aware sets answer
        /// it, and over which scope.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client: Option<String>,
    },
    /// A zone's record sets in master-file form (policy sets as comments).
    Dump {
        /// The zone's origin.
        zone: String,
    },
    /// A zone's plain records, one a row, each with the key that added it and when for
    /// those dynamic update added.
    Records {
        /// The zone's origin.
        zone: String,
        /// Only the records dynamic update added.
        #[serde(default)]
        dynamic: bool,
    },
    /// Force a check's status until the expiry.
    OverrideSet {
        /// Check id.
        check: String,
        /// Forced status.
        healthy: bool,
        /// Expiry (`30m`, `2h`; at most 72h).
        expires: String,
        /// Make it at this one location only (`--only-location NAME`; with `--intent`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        only_location: Option<String>,
    },
    /// End an override.
    OverrideClear {
        /// Check id.
        check: String,
        /// Make it at this one location only (`--only-location NAME`; with `--intent`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        only_location: Option<String>,
    },
    /// Set the status of an `external` check.
    External {
        /// Check id.
        check: String,
        /// New status.
        healthy: bool,
        /// Make it at this one location only (`--only-location NAME`; with `--intent`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        only_location: Option<String>,
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
        #[serde(default)]
        comment: Option<String>,
        /// Make it at this one location only (`--only-location NAME`; with `--intent`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        only_location: Option<String>,
    },
    /// Give a shift a new expiry (from now).
    ShiftUpdate {
        /// Owner name.
        rrset: String,
        /// AZ name.
        az: String,
        /// New expiry.
        expires: String,
        /// Make it at this one location only (`--only-location NAME`; with `--intent`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        only_location: Option<String>,
    },
    /// End a shift.
    ShiftCancel {
        /// Owner name.
        rrset: String,
        /// AZ name.
        az: String,
        /// Make it at this one location only (`--only-location NAME`; with `--intent`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        only_location: Option<String>,
    },
    /// Every shift, and whether it moves traffic.
    ShiftList {},
    /// The timeline.
    Events {
        /// Newest N (default 100).
        #[serde(default)]
        limit: Option<usize>,
    },
    /// A signed zone's keys and the DS records for its parent.
    DnssecDs {
        /// The zone's origin.
        zone: String,
    },
    /// One step of a key rollover; the zone is re-signed and pushed at once.
    DnssecRollover {
        /// The zone's origin.
        zone: String,
        /// `start` or `complete`.
        step: crate::dnssec::RolloverStep,
    },
}

/// What kind of failure an [`ApiError`] is, for scripts that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is not valid JSON, names no known command, lacks or mistypes a field,
    /// or is over [`MAX_REQUEST`].
    Malformed,
    /// A field's value is not acceptable (a name, type or expiry that does not parse).
    BadArgument,
    /// The zone, check or record set does not exist.
    NotFound,
    /// The request does not fit the current state (already shifted, nothing to clear,
    /// an override on an external check).
    Conflict,
    /// `reload` found an invalid zone; nothing changed.
    InvalidZone,
    /// Control could not carry it out (operator state not persisted).
    Internal,
    /// The deployment's intent store did not take the change in time (`--intent`):
    /// nothing was changed anywhere.
    Unavailable,
}

/// A failed request: its kind and what went wrong, for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The kind.
    pub code: ErrorCode,
    /// The message.
    pub message: String,
}

impl From<crate::dnssec::DnssecError> for ApiError {
    /// What the operator asked for does not fit the zone's keys: a bad argument; keys
    /// that cannot be read or made: an internal error.
    fn from(err: crate::dnssec::DnssecError) -> ApiError {
        use crate::dnssec::DnssecError;
        match err {
            DnssecError::NotSigned(_) | DnssecError::Rollover(_) => ApiError::bad_argument(err.to_string()),
            _ => ApiError::new(ErrorCode::Internal, err.to_string()),
        }
    }
}

impl From<crate::state::CheckKeyError> for ApiError {
    fn from(err: crate::state::CheckKeyError) -> ApiError {
        match err {
            crate::state::CheckKeyError::NotFound(_) => ApiError::not_found(err.to_string()),
            crate::state::CheckKeyError::Ambiguous { .. } => ApiError::bad_argument(err.to_string()),
        }
    }
}

impl ApiError {
    /// An error of `code`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
        }
    }

    /// A value that does not parse.
    pub fn bad_argument(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::BadArgument, message)
    }

    /// Something that does not exist.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::NotFound, message)
    }

    /// A request that does not fit the state.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::Conflict, message)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiError {}

/// A response line: `data` on success; `error` (the message) and `code` otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Success.
    pub ok: bool,
    /// The result: a [`Reply`] in JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// What went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
}

impl Response {
    /// The response to a request that ran.
    #[must_use]
    pub fn from_result(result: Result<Reply, ApiError>) -> Response {
        match result {
            Ok(reply) => match serde_json::to_value(&reply) {
                Ok(data) => Response {
                    ok: true,
                    data: Some(data),
                    error: None,
                    code: None,
                },
                Err(err) => Response::error(&ApiError::new(
                    ErrorCode::Internal,
                    format!("cannot encode the reply: {err}"),
                )),
            },
            Err(err) => Response::error(&err),
        }
    }

    /// A failure.
    #[must_use]
    pub fn error(err: &ApiError) -> Response {
        Response {
            ok: false,
            data: None,
            error: Some(err.message.clone()),
            code: Some(err.code),
        }
    }

    /// The request on `line`, or the response that refuses it.
    pub fn parse_request(line: &str) -> Result<Request, Response> {
        serde_json::from_str::<Request>(line.trim())
            .map_err(|e| Response::error(&ApiError::new(ErrorCode::Malformed, format!("bad request: {e}"))))
    }

    /// The reply in `data` for `request`, or the daemon's error.
    pub fn into_reply(self, request: &Request) -> Result<Reply, ApiError> {
        if !self.ok {
            return Err(ApiError::new(
                self.code.unwrap_or(ErrorCode::Internal),
                self.error.unwrap_or_else(|| "request failed".to_owned()),
            ));
        }
        let data = self.data.unwrap_or(serde_json::Value::Null);
        Reply::decode(request, data)
            .map_err(|e| ApiError::new(ErrorCode::Malformed, format!("control's reply does not decode: {e}")))
    }
}

/// What a request returns. In JSON each variant is its content alone (the request
/// says which one it is).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Reply {
    /// `status`.
    Status(Box<StatusReport>),
    /// `reload`.
    Reloaded(Reloaded),
    /// `health`.
    Health(Vec<CheckHealth>),
    /// `explain`.
    Explain(Box<Explanation>),
    /// `dump`.
    Dump(ZoneDump),
    /// `records`.
    Records(Vec<RecordRow>),
    /// `override_set`.
    OverrideSet(OverrideSet),
    /// `override_clear`.
    OverrideCleared(OverrideCleared),
    /// `external`.
    External(ExternalSet),
    /// `shift_*`: every shift after the change.
    Shifts(Vec<ShiftEntry>),
    /// `events`.
    Events(Vec<Event>),
    /// `dnssec_ds`, `dnssec_rollover`: the zone's keys after the request.
    DnssecKeys(Vec<crate::dnssec::KeyInfo>),
}

impl Reply {
    /// Decodes `data` as the reply to `request`.
    pub fn decode(request: &Request, data: serde_json::Value) -> Result<Reply, serde_json::Error> {
        use serde_json::from_value;
        Ok(match request {
            Request::Status {} => Reply::Status(from_value(data)?),
            Request::Reload {} => Reply::Reloaded(from_value(data)?),
            Request::Health { .. } => Reply::Health(from_value(data)?),
            Request::Explain { .. } => Reply::Explain(from_value(data)?),
            Request::Dump { .. } => Reply::Dump(from_value(data)?),
            Request::Records { .. } => Reply::Records(from_value(data)?),
            Request::OverrideSet { .. } => Reply::OverrideSet(from_value(data)?),
            Request::OverrideClear { .. } => Reply::OverrideCleared(from_value(data)?),
            Request::External { .. } => Reply::External(from_value(data)?),
            Request::ShiftStart { .. }
            | Request::ShiftUpdate { .. }
            | Request::ShiftCancel { .. }
            | Request::ShiftList {} => Reply::Shifts(from_value(data)?),
            Request::Events { .. } => Reply::Events(from_value(data)?),
            Request::DnssecDs { .. } | Request::DnssecRollover { .. } => Reply::DnssecKeys(from_value(data)?),
        })
    }
}

/// `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// The snapshot's version.
    pub snapshot_version: u64,
    /// The revision of the deployment's intent it is made from (0: zones from a
    /// directory, without `--intent`).
    #[serde(default)]
    pub intent_revision: u64,
    /// The deployment's operator state in force here: its store revision (0: none
    /// taken from a store).
    #[serde(default)]
    pub intent_operator_revision: u64,
    /// Seconds since the intent store last answered (`--intent`; none without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent_heard_s: Option<u64>,
    /// The health delta sequence.
    pub health_seq: u64,
    /// Every zone.
    pub zones: Vec<ZoneStatus>,
    /// Record sets failing open (`name TYPE`).
    pub fail_open: Vec<String>,
    /// The checkers this location hears from.
    pub checkers: CheckerStatus,
    /// Overrides in force.
    pub overrides: usize,
    /// Shifts in force.
    pub shifts: usize,
    /// Connected edges.
    pub edges: Vec<EdgeInfo>,
    /// Why the operator state cannot be saved (none while it can): changes are refused
    /// until it can.
    #[serde(default)]
    pub persist_error: Option<String>,
    /// Zones taken from a primary that are not served yet (no copy), and catalog zones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_for_primary: Vec<String>,
}

/// One zone in `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneStatus {
    /// Origin.
    pub zone: String,
    /// SOA serial.
    pub serial: u32,
    /// The file it came from.
    pub file: String,
    /// Record sets.
    pub rrsets: usize,
    /// Health slots.
    pub health_slots: usize,
    /// Signing state, for a zone with `dnssec = true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dnssec: Option<ZoneSigning>,
    /// Zone transfer: the serial secondaries get, the primary it comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer: Option<ZoneTransfer>,
}

/// A zone's transfers in `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneTransfer {
    /// The serial transfers to secondaries carry (zones with `transfer_allow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<u32>,
    /// The primary the zone is taken from (zones with `primary`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
}

/// A signed zone in `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneSigning {
    /// Algorithm mnemonic.
    pub algorithm: String,
    /// Signatures in the snapshot.
    pub signatures: usize,
    /// When they were made valid from and when the first expires (seconds since the
    /// epoch); control signs again 7 days before.
    pub inception: u64,
    /// See `inception`.
    pub expiration: u64,
}

/// The checkers in `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckerStatus {
    /// How many are reachable (fresh reports).
    pub reachable: usize,
    /// Which.
    pub list: Vec<CheckerId>,
    /// Healthy iff more than this share of reachable checkers say so.
    pub quorum: f64,
    /// Reports accepted.
    pub reports_accepted: u64,
    /// Octets of accepted reports.
    pub report_bytes: u64,
    /// Frames and connections rejected, by reason.
    pub reports_rejected: std::collections::BTreeMap<String, u64>,
}

/// A reachable checker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckerId {
    /// Its id.
    pub id: String,
    /// Its region.
    pub region: String,
}

/// `reload`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reloaded {
    /// The new snapshot's version.
    pub snapshot_version: u64,
    /// `origin serial N` per zone.
    pub zones: Vec<String>,
}

/// One check in `health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckHealth {
    /// `zone/id`.
    pub check: String,
    /// `http`, `https`, `tcp`, `external` or `calculated`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its status.
    pub healthy: bool,
    /// Why.
    pub why: String,
    /// Unix seconds of the last change (0: never).
    pub since: u64,
    /// The latest observation from each checker, reachable or not.
    pub observations: Vec<Observation>,
    /// The checkers whose latest report is fresh — those this location decides from
    /// (probed checks only).
    #[serde(default)]
    pub reachable: Vec<String>,
}

/// `explain NAME TYPE`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// Owner.
    pub name: String,
    /// Type mnemonic.
    #[serde(rename = "type")]
    pub rtype: String,
    /// `plain` or the policy kind.
    pub policy: String,
    /// TTL.
    pub ttl: u32,
    /// Plain or policy detail.
    #[serde(flatten)]
    pub detail: ExplainDetail,
}

/// What `explain` says beyond the set's identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ExplainDetail {
    /// A set without a policy.
    Plain {
        /// How it answers.
        answer: String,
        /// Its records, in presentation form.
        values: Vec<String>,
    },
    /// A policy set.
    Policy(Box<PolicyExplanation>),
}

/// The policy part of `explain`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyExplanation {
    /// TTL while degraded.
    pub degraded_ttl: Option<u32>,
    /// Fail-open threshold (share of healthy weight or members).
    pub fail_open_below: f64,
    /// Failing open now.
    pub fail_open: bool,
    /// Why, when failing open.
    pub fail_open_note: Option<String>,
    /// Latency sets: the choice, the margin that holds it and who is challenging it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<String>,
    /// Every member.
    pub candidates: Vec<Candidate>,
    /// Shifts on the set.
    pub shifts: Vec<SetShift>,
    /// Who answers.
    pub distribution: Distribution,
    /// The decision for the client asked about (`explain --client`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientExplanation>,
}

/// `explain --client`: what a client's address decides (SPEC §10).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientExplanation {
    /// The client as asked (`ADDR` or `ADDR/LEN`).
    pub client: String,
    /// The address the set decides by (an ECS prefix's bits past /24 or /56 cleared).
    pub decided_by: String,
    /// The rule that matched: `COLLECTION/LOCATION`, or `*`.
    pub matched: String,
    /// The prefix around the client over which the answer holds: the ECS scope.
    pub scope_prefix: String,
    /// Its length (the SCOPE PREFIX-LENGTH echoed to an ECS query).
    pub scope: u8,
    /// Members tried in order: the match, each broader match, then `*`.
    pub chain: Vec<String>,
    /// The member that answers now (`None`: the set answers nothing).
    pub answered_by: Option<String>,
    /// Answered by fail-open (no member of the chain healthy).
    pub fail_open: bool,
}

/// A member in `explain`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Member id.
    pub id: String,
    /// Weight (weighted sets).
    pub weight: Option<u32>,
    /// `primary` or `secondary` (failover sets).
    pub role: Option<String>,
    /// Its health check.
    pub check: Option<String>,
    /// What it matches (client-aware sets): `COLLECTION/LOCATION` or `*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr: Option<String>,
    /// Its status.
    pub healthy: bool,
    /// Why.
    pub why: String,
    /// Its smoothed round trip in microseconds, as this location's own checkers measure
    /// it (members with a probed check, once measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_us: Option<u64>,
    /// The load figure its check reads now (weighted members whose check reads load;
    /// `None` also while no checker has a fresh figure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<f64>,
    /// The weight it answers with after load shedding (weighted members whose check
    /// reads load): `weight` at or below the check's `low`, 0 at or above `high`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_weight: Option<f64>,
    /// What it answers with.
    pub answers: MemberAnswer,
}

impl Candidate {
    /// The weight for people: `10`, or `4/10` while load sheds part of it; `-` outside
    /// weighted sets.
    #[must_use]
    pub fn weight_text(&self) -> String {
        match (self.weight, self.effective_weight) {
            (None, _) => "-".to_owned(),
            (Some(w), Some(e)) if (e - f64::from(w)).abs() > 1e-9 => format!("{e}/{w}"),
            (Some(w), _) => w.to_string(),
        }
    }

    /// The load figure for people: `0.85`, or `-`.
    #[must_use]
    pub fn load_text(&self) -> String {
        self.load.map_or_else(|| "-".to_owned(), |l| format!("{l}"))
    }

    /// The round trip for people: `20.4 ms`, or `-`.
    #[must_use]
    pub fn rtt_text(&self) -> String {
        self.rtt_us
            .map_or_else(|| "-".to_owned(), |us| format!("{}.{} ms", us / 1000, us % 1000 / 100))
    }
}

/// A member's answer in `explain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MemberAnswer {
    /// Records.
    Records {
        /// How many.
        records: usize,
        /// In presentation form.
        #[serde(default)]
        values: Vec<String>,
    },
    /// An alias.
    Alias {
        /// Its target.
        alias: String,
    },
}

/// A shift on the explained set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetShift {
    /// The AZ shifted away from.
    pub az: String,
    /// Seconds left.
    pub expires_in_s: u64,
    /// Free text.
    pub comment: Option<String>,
    /// False while the set fails open.
    pub moves_traffic: bool,
}

/// Who answers an explained set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Distribution {
    /// Weighted and failover: each member's share of answers.
    Shares(Vec<Share>),
    /// Multivalue: the pool answers draw from.
    Multivalue {
        /// Members answers come from.
        answered_from: Vec<String>,
        /// Records per answer.
        per_answer: usize,
    },
    /// Zonal: the AZs answered.
    Zonal {
        /// AZ names.
        answered_azs: Vec<String>,
    },
    /// Client-aware sets: who answers the clients of each rule now.
    ByClient {
        /// One line per distinct chain of matches (at most [`BY_CLIENT_MAX`]).
        by_client: Vec<ClientOutcome>,
    },
}

/// Most chains `explain` lists for a client-aware set.
pub const BY_CLIENT_MAX: usize = 64;

/// Who answers the clients whose most specific match is `matched`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientOutcome {
    /// The most specific rule (`COLLECTION/LOCATION` or `*`).
    pub matched: String,
    /// Members tried in order.
    pub chain: Vec<String>,
    /// The member answering now.
    pub answered_by: Option<String>,
    /// Chosen by fail-open.
    pub fail_open: bool,
}

/// A member's share of answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Share {
    /// Member id (none: no member answers).
    pub member: Option<String>,
    /// Share, 0–1.
    pub share: f64,
}

/// One record of `records`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordRow {
    /// Owner, absolute.
    pub name: String,
    /// TTL.
    pub ttl: u32,
    /// Type mnemonic.
    #[serde(rename = "type")]
    pub rtype: String,
    /// RDATA in presentation form.
    pub rdata: String,
    /// The TSIG key that added it (dynamic update only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// When it was added, Unix seconds (dynamic update only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added: Option<u64>,
}

/// `dump`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneDump {
    /// Origin.
    pub zone: String,
    /// Serial.
    pub serial: u32,
    /// Master-file text.
    pub text: String,
}

/// `override set`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverrideSet {
    /// `zone/id`.
    pub check: String,
    /// Forced status.
    pub healthy: bool,
    /// Seconds until it ends.
    pub expires_in_s: u64,
}

/// `override clear`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverrideCleared {
    /// `zone/id`.
    pub check: String,
    /// Always true.
    pub cleared: bool,
}

/// `external`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalSet {
    /// `zone/id`.
    pub check: String,
    /// The status set.
    pub healthy: bool,
}

/// One shift in `shift list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShiftEntry {
    /// The set's owner.
    pub rrset: String,
    /// The AZ shifted away from.
    pub az: String,
    /// Seconds left.
    pub expires_in_s: u64,
    /// Unix seconds it started.
    pub started: u64,
    /// Free text.
    pub comment: Option<String>,
    /// False while the set fails open.
    pub moves_traffic: bool,
    /// Why it moves nothing, when it does not.
    pub note: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(request: &Request, reply: &Reply) {
        let line = serde_json::to_string(&Response::from_result(Ok(reply.clone()))).unwrap();
        let response: Response = serde_json::from_str(&line).unwrap();
        assert_eq!(&response.into_reply(request).unwrap(), reply, "{line}");
    }

    #[test]
    #[expect(clippy::too_many_lines, reason = "one literal per reply shape")]
    fn every_reply_decodes_as_the_reply_to_its_request() {
        let keys = vec![crate::dnssec::KeyInfo {
            tag: 12345,
            algorithm: "ECDSAP256SHA256".into(),
            state: "active".into(),
            ds: "example. IN DS 12345 13 2 AB".into(),
            dnskey: "example. IN DNSKEY 257 3 13 AA==".into(),
        }];
        round_trip(
            &Request::DnssecDs {
                zone: "example.".into(),
            },
            &Reply::DnssecKeys(keys.clone()),
        );
        round_trip(
            &Request::DnssecRollover {
                zone: "example.".into(),
                step: crate::dnssec::RolloverStep::Complete,
            },
            &Reply::DnssecKeys(keys),
        );
        round_trip(
            &Request::Explain {
                name: "www.example.".into(),
                rtype: "A".into(),
                client: Some("192.0.2.1/24".into()),
            },
            &Reply::Explain(Box::new(Explanation {
                name: "www.example.".into(),
                rtype: "A".into(),
                policy: "plain".into(),
                ttl: 300,
                detail: ExplainDetail::Plain {
                    answer: "all 2 records, always".into(),
                    values: vec!["192.0.2.1".into(), "192.0.2.2".into()],
                },
            })),
        );
        for distribution in [
            Distribution::Shares(vec![Share {
                member: Some("a".into()),
                share: 0.25,
            }]),
            Distribution::Multivalue {
                answered_from: vec!["a".into()],
                per_answer: 1,
            },
            Distribution::Zonal {
                answered_azs: vec!["az1".into()],
            },
            Distribution::ByClient {
                by_client: vec![ClientOutcome {
                    matched: "edges/eu".into(),
                    chain: vec!["eu".into(), "rest".into()],
                    answered_by: Some("rest".into()),
                    fail_open: false,
                }],
            },
        ] {
            round_trip(
                &Request::Explain {
                    name: "api.example.".into(),
                    rtype: "A".into(),
                    client: None,
                },
                &Reply::Explain(Box::new(Explanation {
                    name: "api.example.".into(),
                    rtype: "A".into(),
                    policy: "weighted".into(),
                    ttl: 60,
                    detail: ExplainDetail::Policy(Box::new(PolicyExplanation {
                        degraded_ttl: Some(10),
                        fail_open_below: 0.0,
                        fail_open: false,
                        fail_open_note: None,
                        latency: None,
                        candidates: vec![
                            Candidate {
                                id: "a".into(),
                                weight: Some(3),
                                role: None,
                                check: Some("a-http".into()),
                                cidr: Some("edges/eu".into()),
                                healthy: true,
                                why: "ok".into(),
                                rtt_us: Some(20_400),
                                load: Some(0.85),
                                effective_weight: Some(4.0),
                                answers: MemberAnswer::Records {
                                    records: 1,
                                    values: vec!["192.0.2.1".into()],
                                },
                            },
                            Candidate {
                                id: "b".into(),
                                weight: None,
                                role: Some("secondary".into()),
                                check: None,
                                cidr: None,
                                healthy: false,
                                why: "down".into(),
                                rtt_us: None,
                                load: None,
                                effective_weight: None,
                                answers: MemberAnswer::Alias {
                                    alias: "b.example.".into(),
                                },
                            },
                        ],
                        shifts: vec![SetShift {
                            az: "az1".into(),
                            expires_in_s: 5,
                            comment: None,
                            moves_traffic: true,
                        }],
                        distribution,
                        client: Some(ClientExplanation {
                            client: "192.0.2.77/32".into(),
                            decided_by: "192.0.2.0".into(),
                            matched: "edges/eu".into(),
                            scope_prefix: "192.0.2.0/24".into(),
                            scope: 24,
                            chain: vec!["a".into(), "b".into()],
                            answered_by: Some("a".into()),
                            fail_open: false,
                        }),
                    })),
                })),
            );
        }
        round_trip(
            &Request::ShiftList {},
            &Reply::Shifts(vec![ShiftEntry {
                rrset: "z.example.".into(),
                az: "az1".into(),
                expires_in_s: 60,
                started: 1,
                comment: Some("maintenance".into()),
                moves_traffic: false,
                note: Some("fails open".into()),
            }]),
        );
        round_trip(
            &Request::Health { check: None },
            &Reply::Health(vec![CheckHealth {
                check: "example./a".into(),
                kind: "http".into(),
                healthy: true,
                why: "3 of 3".into(),
                since: 0,
                observations: Vec::new(),
                reachable: Vec::new(),
            }]),
        );
        round_trip(
            &Request::Reload {},
            &Reply::Reloaded(Reloaded {
                snapshot_version: 7,
                zones: vec!["example. serial 1".into()],
            }),
        );
    }

    #[test]
    fn malformed_requests_get_a_precise_error() {
        for (line, says) in [
            ("{\"cmd\":\"staus\"}", "unknown variant `staus`"),
            ("{\"cmd\":\"explain\",\"name\":\"a.\"}", "missing field `rtype`"),
            (
                "{\"cmd\":\"override_set\",\"check\":\"a\",\"healthy\":\"yes\",\"expires\":\"1h\"}",
                "invalid type",
            ),
            (
                "{\"cmd\":\"events\",\"limit\":5,\"verbose\":true}",
                "unknown field `verbose`",
            ),
            ("not json", "expected"),
        ] {
            let refused = Response::parse_request(line).unwrap_err();
            assert_eq!(refused.code, Some(ErrorCode::Malformed), "{line}");
            let message = refused.error.unwrap();
            assert!(message.contains(says), "{line}: {message}");
        }
        assert_eq!(
            Response::parse_request("{\"cmd\":\"health\"}").unwrap(),
            Request::Health { check: None }
        );
    }

    #[test]
    fn an_error_reaches_the_client_with_its_code() {
        let line = serde_json::to_string(&Response::from_result(Err(ApiError::not_found("no zone x.")))).unwrap();
        assert_eq!(line, r#"{"ok":false,"error":"no zone x.","code":"not_found"}"#);
        let response: Response = serde_json::from_str(&line).unwrap();
        assert_eq!(
            response.into_reply(&Request::Status {}).unwrap_err(),
            ApiError::not_found("no zone x.")
        );
    }
}
