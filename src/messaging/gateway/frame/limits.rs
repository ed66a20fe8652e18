//! Bounds on every field a client frame carries (§2.2 leaves them to the server). A value
//! over one is a `bad_request` naming the field, never a truncation.

/// Longest correlation `id`. Longer ids are refused and not echoed.
pub const ID_BYTES_MAX: usize = 128;
/// Longest `topic`.
pub const TOPIC_BYTES_MAX: usize = 512;
/// Longest `conversation` id.
pub const CONVERSATION_BYTES_MAX: usize = 256;
/// Longest `client_msg_id` (the idempotency key kept in the dedup window).
pub const CLIENT_MSG_ID_BYTES_MAX: usize = 256;
/// Longest `device_id` (it becomes part of cursor keys, §18 G13).
pub const DEVICE_ID_BYTES_MAX: usize = 256;
/// Longest `user_agent`.
pub const USER_AGENT_BYTES_MAX: usize = 256;
/// Longest `resume` token (a real one is 66 bytes: `<22>.<43>`).
pub const RESUME_BYTES_MAX: usize = 256;
/// Longest publish `key`.
pub const KEY_BYTES_MAX: usize = 1024;
/// Header caps on a send or publish (§18 G41); the messaging plane owns them because
/// typing signals obey the same ones.
pub use crate::messaging::headers::{HEADERS_BYTES_MAX, HEADERS_PAIRS_MAX};
/// Most users in one `watch_presence` (§18 G10).
pub const USERS_MAX: usize = 1000;
/// Longest user id in `watch_presence`.
pub const USER_ID_BYTES_MAX: usize = 256;
/// Longest client-supplied text quoted back in an error message (an unknown `op`).
pub const QUOTE_BYTES_MAX: usize = 64;
