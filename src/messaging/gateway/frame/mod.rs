//! The gateway frame codec (spec/messaging-edge.md §2.2–§2.7, §2.11, §2.13): one WebSocket
//! message in, one [`Request`] or [`DecodeError`] out; and the encoders for every frame the
//! server sends. Pure functions over byte buffers: no sockets, no session state, no clock.
//!
//! # Decoding
//!
//! Text and binary messages are both JSON bytes, decoded by [`decode_request`]. The rules:
//!
//! - Unknown fields are ignored; `null` counts as absent (so it gives the field's zero
//!   value, as a v1 client that does not omit empty fields expects).
//! - Keys match exactly (lowercase). §2.2 lets a server accept v1's case-folded keys
//!   (`"OP"`); we do not: no v1 client sends them, and exact keys keep one spelling per
//!   field.
//! - A wrong type, a negative value for an unsigned field, bad base64, or a value over one
//!   of the limits below is a [`DecodeError`] that names the field. Unlike v1, which closed
//!   the socket, the connection answers `error`/`bad_request` and stays open (§18 G1, §19
//!   decisions 8 and 9); [`decode_error`] writes that frame, echoing `id` when it could be
//!   read.
//! - Semantic checks that need no server state are done here too, with v1's texts, so a
//!   decoded [`Request`] already satisfies them: `topic is required` (subscribe, history,
//!   publish), `conversation is required` (send, typing), `topic and seq are required`
//!   (commit), `state must be online, away or offline` (presence), an unknown `kind` (§18
//!   G26). Anything that needs the server (ACL, partition ranges, clamping `from_seq` to
//!   `next_seq` per §18 G14, stripping reserved header names per G41) is the handler's.
//!
//! Requests are parsed through a `serde_json::Value`: they are small, one at a time per
//! connection, and not on the delivery path, so the simplicity is worth the allocation.
//! A payload is bounded only by the WebSocket message size, which the connection limits
//! (`gateway.read_limit`).
//!
//! # Encoding
//!
//! Every encoder appends exactly one compact JSON object (one text message) to `out`, in
//! the field order of the §2.13 examples. Top-level fields that are empty, zero or false are
//! omitted, except `partition`, which is present whenever the frame names a partition
//! (§2.2); nested objects follow the §2.3 presence table. Strings are escaped by
//! serde_json's string serializer straight into `out`, payloads base64-encoded straight
//! into it (standard alphabet, padded): `record` frames are on the delivery hot path, so
//! nothing there builds a `serde_json::Value` or an intermediate string.
//!
//! # Files
//!
//! - `limits`: the byte and count bounds every decoded field respects.
//! - `request`: the decoded [`Request`] and its field types.
//! - `decode`, `fields`, `payload`: one message to a [`Request`]; the per-field readers;
//!   lenient base64.
//! - `error_code`, `close`: the `error.code` names and the WebSocket close codes.
//! - `out`, `encode`, `json`: what an outbound frame carries; one encoder per frame; the
//!   JSON object writer they share.

pub mod close;
mod decode;
mod encode;
mod error_code;
mod fields;
mod json;
mod limits;
mod out;
mod payload;
mod request;
#[cfg(test)]
mod tests;

pub use decode::{decode_request, DecodeError};
pub use encode::{
    ack, decode_error, error, gap, pong, presence_event, published, records, sent, signal,
    subscribe_ack, welcome,
};
pub use error_code::ErrorCode;
pub use limits::{
    CLIENT_MSG_ID_BYTES_MAX, CONVERSATION_BYTES_MAX, DEVICE_ID_BYTES_MAX, HEADERS_BYTES_MAX,
    HEADERS_PAIRS_MAX, ID_BYTES_MAX, KEY_BYTES_MAX, QUOTE_BYTES_MAX, RESUME_BYTES_MAX,
    TOPIC_BYTES_MAX, USERS_MAX, USER_AGENT_BYTES_MAX, USER_ID_BYTES_MAX,
};
pub use out::{HeadersOut, PresenceOut, PublishedOut, RecordOut, SentOut, SignalOut};
pub use request::{ConversationKind, Request};

/// The protocol version this server speaks; sent in every `welcome`.
pub const PROTOCOL_VERSION: i64 = 1;
