//! Topic names: their on-disk encoding, validation, namespaces, key → partition routing and
//! the storage log name of each partition (spec/messaging-engine.md §1.2, §2;
//! spec/messaging-edge.md §6, §19 decisions 10–12 and 17).
//!
//! Everything here is a pure function of its arguments, so the gateway, the deliverer, the
//! admin routes and the startup scan all agree on what a name means.

use boltq_shards::ownership::fnv1a_64;
use std::fmt;

/// Longest topic name, measured in bytes of its directory encoding ([`encode_dir`]). Keeps a
/// partition's path well under the file-system and log-name limits.
pub const TOPIC_ENCODED_BYTES_MAX: usize = 200;
/// Ids inside topic names (user, device, group, direct party) follow the same rule as the
/// ids in tokens (§19 #11): one definition, in the identity layer.
pub use crate::messaging::identity::principal::{valid_id, ID_BYTES_MAX};
/// Prefix of 1:1 conversation topics: `chat.direct.<a>:<b>`.
pub const DIRECT_PREFIX: &str = "chat.direct.";
/// Prefix of group conversation topics: `chat.group.<id>`.
pub const GROUP_PREFIX: &str = "chat.group.";
/// Prefix of per-user inbox topics: `chat.inbox.<user>`.
pub const INBOX_PREFIX: &str = "chat.inbox.";
/// Prefix of typing-signal names (never stored): `typing.<conversation>`.
pub const TYPING_PREFIX: &str = "typing.";
/// Prefix of server announcement topics.
pub const SYSTEM_PREFIX: &str = "system.";
/// First component of every stream partition's storage log name.
pub const LOG_NAME_PREFIX: &str = "streams/";
/// Separator of the two parties of a direct conversation id.
pub const DIRECT_SEPARATOR: char = ':';

/// Longest storage log name `boltq_io::store::validate_log_name` accepts.
const STORE_LOG_NAME_BYTES_MAX: usize = 255;
/// Decimal digits of the largest partition number (`u32::MAX`).
const PARTITION_DIGITS_MAX: usize = 10;
// Every valid topic's log name fits the store's limit, whatever its partition.
const _: () = assert!(
    LOG_NAME_PREFIX.len() + TOPIC_ENCODED_BYTES_MAX + 1 + PARTITION_DIGITS_MAX
        <= STORE_LOG_NAME_BYTES_MAX
);

/// Why a topic name, an id inside it or a partition number was refused. Every variant is a
/// client error; `Display` is meant for the message of a `bad_request` reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicError {
    Empty,
    TooLong {
        encoded_bytes: usize,
        encoded_bytes_max: usize,
    },
    /// `#` or `*`: ACL wildcards, which would turn an id into a pattern (edge G30).
    Wildcard(char),
    /// A leading, trailing or doubled `.`: ACL segments must not be empty (§19 #10).
    EmptySegment,
    /// An ASCII control byte (including NUL), which cursor keys and log lines cannot carry.
    ControlCharacter,
    /// An id inside a reserved namespace is not 1–128 bytes of `[A-Za-z0-9_@+-]`.
    InvalidId {
        what: &'static str,
        id: String,
    },
    /// `chat.direct.<id>` whose id is not two parties joined by one `:`.
    DirectNotPair,
    /// `chat.direct.<a>:<a>`: a conversation needs two distinct parties.
    DirectSameParty,
    /// `chat.direct.<b>:<a>` with `b > a`; carries the canonical topic (§19 #12).
    DirectNotCanonical {
        canonical: String,
    },
    PartitionOutOfRange {
        partition: u32,
        count: u32,
    },
}

impl fmt::Display for TopicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopicError::Empty => write!(f, "topic is required"),
            TopicError::TooLong {
                encoded_bytes,
                encoded_bytes_max,
            } => write!(
                f,
                "topic is {encoded_bytes} bytes once encoded, over the limit of {encoded_bytes_max}"
            ),
            TopicError::Wildcard(c) => write!(f, "topic must not contain {c:?}"),
            TopicError::EmptySegment => write!(
                f,
                "topic must not have empty segments (a leading, trailing or doubled '.')"
            ),
            TopicError::ControlCharacter => write!(f, "topic must not contain control characters"),
            TopicError::InvalidId { what, id } => write!(
                f,
                "{what} {id:?} must be 1-{ID_BYTES_MAX} bytes of A-Z a-z 0-9 _ @ + -"
            ),
            TopicError::DirectNotPair => write!(
                f,
                "a direct conversation id must be two user ids joined by ':'"
            ),
            TopicError::DirectSameParty => {
                write!(f, "a direct conversation needs two different user ids")
            }
            TopicError::DirectNotCanonical { canonical } => write!(
                f,
                "a direct conversation id must list the smaller user id first: use {canonical:?}"
            ),
            TopicError::PartitionOutOfRange { partition, count } => write!(
                f,
                "partition {partition} is out of range: the topic has {count} partition(s)"
            ),
        }
    }
}

impl std::error::Error for TopicError {}

// ---------------------------------------------------------------------------------------
// Directory encoding (§1.2, D33)

/// Whether `b` is kept as is by the directory encoding.
fn is_kept_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_')
}

/// Whether the byte at `index` of a name is written as `%XX`. A leading `.` is escaped so
/// that no topic (in particular `.` and `..`) can name a hidden or parent directory (D33).
fn is_escaped_at(index: usize, b: u8) -> bool {
    !is_kept_byte(b) || (index == 0 && b == b'.')
}

/// Bytes of `encode_dir(topic)`, without building it.
pub fn encoded_len(topic: &str) -> usize {
    topic
        .bytes()
        .enumerate()
        .map(|(i, b)| if is_escaped_at(i, b) { 3 } else { 1 })
        .sum()
}

/// The directory name of a topic: bytes `a–z A–Z 0–9 . - _` are kept, every other byte (and
/// a leading `.`) becomes `%` and two uppercase hex digits. The result is always one safe
/// path component: no `/`, no NUL, never `.` or `..`.
pub fn encode_dir(topic: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(encoded_len(topic));
    for (i, b) in topic.bytes().enumerate() {
        if is_escaped_at(i, b) {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xF)] as char);
        } else {
            out.push(b as char);
        }
    }
    out
}

/// The topic named by a directory, or `None` if the directory is not a topic (a truncated or
/// non-hex escape, a result that is not UTF-8, or a spelling [`encode_dir`] would not
/// produce). Strict on purpose: one topic has exactly one directory, so a stray `a%2Db`
/// next to `a-b` can never be opened as a second copy of the same topic.
pub fn decode_dir(dir: &str) -> Option<String> {
    let bytes = dir.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hi = hex_value(*bytes.get(i + 1)?)?;
            let lo = hex_value(*bytes.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let topic = String::from_utf8(out).ok()?;
    (encode_dir(&topic) == dir).then_some(topic)
}

/// The value of an uppercase hex digit (lowercase is never produced by [`encode_dir`], so the
/// canonical check in [`decode_dir`] would refuse it anyway).
fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// Validation and namespaces (edge §6, §19 #10–12)

/// Checks the rules every topic name obeys, whatever its namespace: non-empty, at most
/// [`TOPIC_ENCODED_BYTES_MAX`] bytes once encoded, no ACL wildcard (`#`, `*`), no empty
/// `.`-segment, no control character. Namespace rules are in [`Namespace::of`].
pub fn validate_topic(name: &str) -> Result<(), TopicError> {
    if name.is_empty() {
        return Err(TopicError::Empty);
    }
    let encoded_bytes = encoded_len(name);
    if encoded_bytes > TOPIC_ENCODED_BYTES_MAX {
        return Err(TopicError::TooLong {
            encoded_bytes,
            encoded_bytes_max: TOPIC_ENCODED_BYTES_MAX,
        });
    }
    if let Some(c) = name.chars().find(|c| matches!(c, '#' | '*')) {
        return Err(TopicError::Wildcard(c));
    }
    if name.bytes().any(|b| b.is_ascii_control()) {
        return Err(TopicError::ControlCharacter);
    }
    if name.split('.').any(str::is_empty) {
        return Err(TopicError::EmptySegment);
    }
    Ok(())
}

/// What a topic is, which decides its ACL rules, its partition count and its partition key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespace {
    /// `chat.direct.<a>:<b>`, `a < b` bytewise.
    Direct { a: String, b: String },
    /// `chat.group.<id>`.
    Group { id: String },
    /// `chat.inbox.<user>` exactly; its sub-topics are [`Namespace::Custom`].
    Inbox { user: String },
    /// `system.<…>`: server announcements.
    System,
    /// Anything else, including `chat.inbox.<user>.<…>` and `typing.<…>`.
    Custom,
}

impl Namespace {
    /// Validates `topic` ([`validate_topic`] plus the rules of its namespace) and classifies
    /// it. The conversation namespaces are strict: `chat.direct.` and `chat.group.` must be
    /// followed by exactly one id (pair), since only sends create them and a send names a
    /// whole conversation; a sub-topic there would let members mint topics (edge G12).
    pub fn of(topic: &str) -> Result<Namespace, TopicError> {
        validate_topic(topic)?;
        if let Some(id) = topic.strip_prefix(DIRECT_PREFIX) {
            let (a, b) = parse_direct_id(id)?;
            return Ok(Namespace::Direct {
                a: a.to_string(),
                b: b.to_string(),
            });
        }
        if let Some(id) = topic.strip_prefix(GROUP_PREFIX) {
            check_id("group id", id)?;
            return Ok(Namespace::Group { id: id.to_string() });
        }
        if let Some(rest) = topic.strip_prefix(INBOX_PREFIX) {
            let (user, sub) = match rest.split_once('.') {
                Some((user, sub)) => (user, Some(sub)),
                None => (rest, None),
            };
            check_id("inbox user id", user)?;
            return Ok(match sub {
                None => Namespace::Inbox {
                    user: user.to_string(),
                },
                Some(_) => Namespace::Custom,
            });
        }
        if topic.starts_with(SYSTEM_PREFIX) {
            return Ok(Namespace::System);
        }
        Ok(Namespace::Custom)
    }

    /// Whether this is a conversation (direct or group) topic.
    pub fn is_conversation(&self) -> bool {
        matches!(self, Namespace::Direct { .. } | Namespace::Group { .. })
    }
}

fn check_id(what: &'static str, id: &str) -> Result<(), TopicError> {
    if valid_id(id) {
        Ok(())
    } else {
        Err(TopicError::InvalidId {
            what,
            id: id.to_string(),
        })
    }
}

/// Splits a direct conversation id into its two parties and checks it is canonical: two
/// distinct valid ids, smaller first (§19 #12). Both sides of a conversation must derive the
/// same id, or they would write to two half-conversations.
pub fn parse_direct_id(id: &str) -> Result<(&str, &str), TopicError> {
    let mut parts = id.split(DIRECT_SEPARATOR);
    let (Some(a), Some(b), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(TopicError::DirectNotPair);
    };
    check_id("direct conversation party", a)?;
    check_id("direct conversation party", b)?;
    match a.cmp(b) {
        std::cmp::Ordering::Less => Ok((a, b)),
        std::cmp::Ordering::Equal => Err(TopicError::DirectSameParty),
        std::cmp::Ordering::Greater => Err(TopicError::DirectNotCanonical {
            canonical: format!("{DIRECT_PREFIX}{b}{DIRECT_SEPARATOR}{a}"),
        }),
    }
}

// ---------------------------------------------------------------------------------------
// Names

/// The topic of a conversation: `chat.group.<id>` or `chat.direct.<id>`.
pub fn conversation_topic(kind_is_group: bool, conversation: &str) -> String {
    let prefix = if kind_is_group {
        GROUP_PREFIX
    } else {
        DIRECT_PREFIX
    };
    format!("{prefix}{conversation}")
}

/// The inbox topic of a user: `chat.inbox.<user>`.
pub fn inbox_topic(user: &str) -> String {
    format!("{INBOX_PREFIX}{user}")
}

/// The name typing signals of a conversation travel under: `typing.<conversation>`. Never
/// stored; shared by direct and group ids (a v1 naming, edge §6.1).
pub fn typing_topic(conversation: &str) -> String {
    format!("{TYPING_PREFIX}{conversation}")
}

/// The storage log holding one partition of a stream topic: `streams/<encode_dir(topic)>/<n>`.
/// For a topic that passes [`validate_topic`] the name always passes
/// `boltq_io::store::validate_log_name` (the encoding never starts with `.` and never
/// contains `/`; the length bound is checked at compile time above).
pub fn log_name(topic: &str, partition: u32) -> String {
    debug_assert!(
        validate_topic(topic).is_ok(),
        "log_name of invalid {topic:?}"
    );
    format!("{LOG_NAME_PREFIX}{}/{partition}", encode_dir(topic))
}

/// The topic and partition of a storage log name made by [`log_name`], or `None` for any
/// other log (queue slots, stray names, non-canonical spellings, invalid topics).
pub fn parse_log_name(name: &str) -> Option<(String, u32)> {
    let rest = name.strip_prefix(LOG_NAME_PREFIX)?;
    let (dir, partition) = rest.split_once('/')?;
    let partition = parse_partition(partition)?;
    let topic = decode_dir(dir)?;
    validate_topic(&topic).ok()?;
    Some((topic, partition))
}

/// A partition number in canonical decimal: digits only, no leading zero, fits u32.
fn parse_partition(s: &str) -> Option<u32> {
    let canonical = !s.is_empty()
        && s.len() <= PARTITION_DIGITS_MAX
        && s.bytes().all(|b| b.is_ascii_digit())
        && (s == "0" || !s.starts_with('0'));
    if canonical {
        s.parse().ok()
    } else {
        None
    }
}

// ---------------------------------------------------------------------------------------
// Partitions (§2.3, §19 #17)

/// The partition of `key` among `count` (client-visible; changing it breaks clients that
/// compute partitions): 0 for an empty key or a single partition, else FNV-1a-64 of the key
/// bytes modulo `count`. A `count` of 0 (no partitions) also gives 0 rather than dividing by
/// zero; [`resolve_partition`] refuses it.
pub fn partition_for(key: &[u8], count: u32) -> u32 {
    if key.is_empty() || count <= 1 {
        return 0;
    }
    let p = fnv1a_64(key) % u64::from(count);
    u32::try_from(p).expect("a value modulo a u32 fits in u32")
}

/// The routing key of a topic when a frame omits the partition: the conversation id for
/// `chat.direct.*` / `chat.group.*`, the caller's user id for every other topic.
pub fn partition_key<'a>(topic: &'a str, user_id: &'a str) -> &'a str {
    topic
        .strip_prefix(DIRECT_PREFIX)
        .or_else(|| topic.strip_prefix(GROUP_PREFIX))
        .unwrap_or(user_id)
}

/// The partition a request addresses: the explicit one if given (which must be below
/// `count`), else the partition of [`partition_key`]. The single routine `subscribe`,
/// `history`, `commit` and `unsubscribe` all use, so they can never disagree (§19 #17, D16).
pub fn resolve_partition(
    topic: &str,
    explicit: Option<u32>,
    user_id: &str,
    count: u32,
) -> Result<u32, TopicError> {
    let partition =
        explicit.unwrap_or_else(|| partition_for(partition_key(topic, user_id).as_bytes(), count));
    if partition < count {
        Ok(partition)
    } else {
        Err(TopicError::PartitionOutOfRange { partition, count })
    }
}

/// Partition counts a new topic is created with, by namespace (§2.2). Each is fixed for the
/// life of a topic, so these only matter at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionCounts {
    /// Direct and group conversations (`chat.conversation_partitions`).
    pub conversation: u32,
    /// Inboxes (`chat.inbox_partitions`).
    pub inbox: u32,
    /// Every other stream topic (`stream.default_partitions`).
    pub default: u32,
}

impl Default for PartitionCounts {
    /// The v1 defaults: 16 per conversation, 1 per inbox, 16 otherwise.
    fn default() -> Self {
        PartitionCounts {
            conversation: 16,
            inbox: 1,
            default: 16,
        }
    }
}

impl PartitionCounts {
    /// The count for a new topic of `namespace`. A count of 0 means "the log default" (as in
    /// v1), and a default of 0 means 1, so the answer is never 0.
    pub fn count_for(&self, namespace: &Namespace) -> u32 {
        let chosen = match namespace {
            Namespace::Direct { .. } | Namespace::Group { .. } => self.conversation,
            Namespace::Inbox { .. } => self.inbox,
            Namespace::System | Namespace::Custom => self.default,
        };
        match chosen {
            0 => self.default.max(1),
            n => n,
        }
    }
}

#[cfg(test)]
mod tests;
