//! The dnstap schema (dnstap.proto, <https://dnstap.info>, CC0), the messages this edge
//! sends, as `prost` derives them: what `prost-build` would generate from the `.proto`,
//! written out so the build needs no `protoc`.

/// The top-level dnstap payload.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dnstap {
    /// The server's identity (`--nsid`, else the host name).
    #[prost(bytes = "vec", optional, tag = "1")]
    pub identity: Option<Vec<u8>>,
    /// The server's version.
    #[prost(bytes = "vec", optional, tag = "2")]
    pub version: Option<Vec<u8>>,
    /// Free annotation: ours says the path and sampling (`path=user`).
    #[prost(bytes = "vec", optional, tag = "3")]
    pub extra: Option<Vec<u8>>,
    /// Always [`DnstapType::Message`].
    #[prost(enumeration = "DnstapType", required, tag = "15")]
    pub r#type: i32,
    /// The message.
    #[prost(message, optional, tag = "14")]
    pub message: Option<Message>,
}

/// `Dnstap.Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum DnstapType {
    /// A `Message`.
    Message = 1,
}

/// `SocketFamily`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum SocketFamily {
    /// IPv4.
    Inet = 1,
    /// IPv6.
    Inet6 = 2,
}

/// `SocketProtocol` (the two this edge serves).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum SocketProtocol {
    /// UDP.
    Udp = 1,
    /// TCP.
    Tcp = 2,
}

/// `Message.Type` (the two an authoritative server sends).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MessageType {
    /// A query received.
    AuthQuery = 1,
    /// A response sent.
    AuthResponse = 2,
}

/// `Policy.Action` (the one this edge uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum PolicyAction {
    /// The answer came from the policy's data (the member chosen).
    LocalData = 6,
}

/// `Policy.Match` (the one this edge uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum PolicyMatch {
    /// The question's name.
    Qname = 1,
}

/// `Policy`: for an answer from a routing policy set, the set (`rule`) and the members
/// chosen (`value`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Policy {
    /// `qdns` and the set's policy kind.
    #[prost(string, optional, tag = "1")]
    pub r#type: Option<String>,
    /// The set, as `owner TYPE`.
    #[prost(bytes = "vec", optional, tag = "2")]
    pub rule: Option<Vec<u8>>,
    /// [`PolicyAction::LocalData`].
    #[prost(enumeration = "PolicyAction", optional, tag = "3")]
    pub action: Option<i32>,
    /// [`PolicyMatch::Qname`].
    #[prost(enumeration = "PolicyMatch", optional, tag = "4")]
    pub r#match: Option<i32>,
    /// The members chosen, by id, comma-separated.
    #[prost(bytes = "vec", optional, tag = "5")]
    pub value: Option<Vec<u8>>,
}

/// `Message`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Message {
    /// [`MessageType`].
    #[prost(enumeration = "MessageType", required, tag = "1")]
    pub r#type: i32,
    /// [`SocketFamily`].
    #[prost(enumeration = "SocketFamily", optional, tag = "2")]
    pub socket_family: Option<i32>,
    /// [`SocketProtocol`].
    #[prost(enumeration = "SocketProtocol", optional, tag = "3")]
    pub socket_protocol: Option<i32>,
    /// The client's address (masked).
    #[prost(bytes = "vec", optional, tag = "4")]
    pub query_address: Option<Vec<u8>>,
    /// The edge's address.
    #[prost(bytes = "vec", optional, tag = "5")]
    pub response_address: Option<Vec<u8>>,
    /// The client's port.
    #[prost(uint32, optional, tag = "6")]
    pub query_port: Option<u32>,
    /// The edge's port.
    #[prost(uint32, optional, tag = "7")]
    pub response_port: Option<u32>,
    /// When the query was received: seconds since the epoch.
    #[prost(uint64, optional, tag = "8")]
    pub query_time_sec: Option<u64>,
    /// … and nanoseconds.
    #[prost(fixed32, optional, tag = "9")]
    pub query_time_nsec: Option<u32>,
    /// The query, verbatim.
    #[prost(bytes = "vec", optional, tag = "10")]
    pub query_message: Option<Vec<u8>>,
    /// When the response was sent: seconds since the epoch.
    #[prost(uint64, optional, tag = "12")]
    pub response_time_sec: Option<u64>,
    /// … and nanoseconds.
    #[prost(fixed32, optional, tag = "13")]
    pub response_time_nsec: Option<u32>,
    /// The response, verbatim.
    #[prost(bytes = "vec", optional, tag = "14")]
    pub response_message: Option<Vec<u8>>,
    /// The policy answer's set and members.
    #[prost(message, optional, tag = "15")]
    pub policy: Option<Policy>,
}
