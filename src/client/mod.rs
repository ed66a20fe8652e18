//! A blocking client for BoltQ's v1 TCP protocol (queue plane), used by tests and tools.
//!
//! It runs outside the server's shards, so it is plain `std::net`: one connection, one
//! request at a time, replies paired with requests by order (the protocol has no
//! correlation id). Request bodies are byte-identical to the v1 Go SDK's (keys in
//! alphabetical order, Go's string escaping; see [`json`]), so a test can compare them with
//! what v1 clients send.
//!
//! - Pub/sub pushes (status 0x00 with a top-level `subscriber_id`) can arrive between
//!   replies; they are set aside for [`Client::next_push`], never taken for a reply. The
//!   queue is bounded ([`PUSH_QUEUE_FRAMES_MAX`], [`PUSH_QUEUE_BYTES_MAX`]); overflow is
//!   dropped and counted ([`Client::dropped_pushes`]).
//! - Frames over [`crate::queue::protocol::frame::PAYLOAD_BYTES_MAX`] are refused both ways.
//! - `timeout_ms` bounds connecting and each wait for a reply. After a timeout, an I/O error
//!   or a protocol error the connection is out of step, so every later call fails fast; make
//!   a new client. There is no automatic reconnect or resend (v1's Go SDK resends after I/O
//!   errors and so can publish twice).
//! - TLS ([`ClientOptions::tls`], see [`ClientTls`]) runs over the same blocking socket with
//!   rustls; the handshake is done inside `connect`, bounded by `timeout_ms`.
//! - The raw API ([`Client::send_frame`], [`Client::read_frame`], [`Client::pipeline`],
//!   [`Client::send_bytes`], [`Client::read_wire_frame`]) is for tests that need exact bytes.
//! - Stream commands for trusted backends (publish, read, tail, commit on the messaging
//!   plane's stream topics) are in [`stream`].
//! - [`fake_server`] is a scripted stand-in for the server, for unit tests of clients.

mod error;
pub mod fake_server;
pub mod gateway;
pub mod json;
pub mod stream;
mod tls;
mod types;
mod wire;

#[cfg(test)]
mod tests;

pub use error::{ClientError, Result};
pub use stream::{
    StreamAt, StreamConsumer, StreamPage, StreamPayload, StreamPublished, StreamRecord,
};
pub use tls::{ClientCertificate, ClientTls, TlsSession};
pub use types::{ConsumedMessage, Headers, PublishOptions, PublishReply, Push, CONSUME_BATCH_KEY};
pub use wire::{RawFrame, PUSH_QUEUE_BYTES_MAX, PUSH_QUEUE_FRAMES_MAX};

use crate::queue::protocol::frame::{op, status};
use serde_json::Value;
use std::collections::VecDeque;
use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;
use tls::Stream;
use types::Body;

/// Default reply timeout, as v1's Go SDK.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// DLQ_LIST `{"queue"?}` (BoltQ additive).
pub const OP_DLQ_LIST: u8 = 0x19;
/// DLQ_READ `{"limit","offset","queue"}` (BoltQ additive).
pub const OP_DLQ_READ: u8 = 0x1A;
/// DLQ_REQUEUE `{"limit","queue"}` (BoltQ additive).
pub const OP_DLQ_REQUEUE: u8 = 0x1B;
/// DLQ_PURGE `{"queue"}` (BoltQ additive).
pub const OP_DLQ_PURGE: u8 = 0x1C;

/// The answer to [`Client::ack_many`] / [`Client::nack_many`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckedMany {
    /// Messages acknowledged (or NACKed).
    pub count: u64,
    /// (id, the server's reason) for each id that was not: not pending, or refused.
    pub failed: Vec<(String, String)>,
}

/// How to connect. Build with `..Default::default()` so fields added later don't break
/// callers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// Sent with AUTH (0x08) right after connecting; `None` or empty sends nothing, as v1.
    pub api_key: Option<String>,
    /// Bound on connecting (TLS handshake included) and on each wait for a reply; 0 waits
    /// forever.
    pub timeout_ms: u64,
    /// `Some`: speak TLS (the server's `server.tls.enabled`). Default `None`, plain TCP.
    pub tls: Option<ClientTls>,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            api_key: None,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            tls: None,
        }
    }
}

/// One connection to a BoltQ server. Not thread-safe by design: a connection carries one
/// conversation; use one client per thread.
pub struct Client {
    stream: Stream,
    /// Bytes read but not yet decoded start at `read_pos`.
    read_buf: Vec<u8>,
    read_pos: usize,
    pushes: wire::PushQueue,
    /// Replies to raw sends that arrived while [`Client::next_push`] was waiting.
    early_replies: VecDeque<RawFrame>,
    /// Raw sends whose replies have not been read yet.
    outstanding: usize,
    reply_timeout: Option<Duration>,
    /// Why the connection can no longer be trusted, once it can't.
    broken: Option<String>,
}

impl Client {
    /// Connects to `addr` (`host:port`) and, when a key is set, authenticates first (the
    /// server closes connections whose first command is not AUTH when it has a key).
    pub fn connect(addr: &str, options: ClientOptions) -> Result<Client> {
        let reply_timeout =
            (options.timeout_ms > 0).then(|| Duration::from_millis(options.timeout_ms));
        let tls = match &options.tls {
            Some(t) => Some(TlsSession::new(t, addr)?),
            None => None,
        };
        let socket = open_stream(addr, reply_timeout)?;
        // Requests are small and each waits for its reply: don't let Nagle hold them back.
        socket.set_nodelay(true)?;
        socket.set_write_timeout(reply_timeout)?;
        let stream = match tls {
            None => Stream::Plain(socket),
            Some(tls) => {
                // Reads are bounded per wait later on; the handshake needs its own bound.
                socket.set_read_timeout(reply_timeout)?;
                tls.handshake(socket)?
            }
        };
        let mut client = Client {
            stream,
            read_buf: Vec::new(),
            read_pos: 0,
            pushes: wire::PushQueue::default(),
            early_replies: VecDeque::new(),
            outstanding: 0,
            reply_timeout,
            broken: None,
        };
        if let Some(key) = options.api_key.as_deref().filter(|k| !k.is_empty()) {
            client.authenticate(key)?;
        }
        Ok(client)
    }

    fn authenticate(&mut self, api_key: &str) -> Result<()> {
        let body = Body::new().str("api_key", api_key).finish();
        let (code, payload) = self.call(op::AUTH, &body, Duration::ZERO)?;
        if code != status::OK {
            return Err(ClientError::Auth(
                String::from_utf8_lossy(&payload).into_owned(),
            ));
        }
        Ok(())
    }

    // ---- work queues ---------------------------------------------------------------------

    /// PUBLISH (0x01) to a work queue. `payload_json` must be JSON; it is sent compacted,
    /// keeping its key order.
    pub fn publish(
        &mut self,
        queue: &str,
        payload_json: &str,
        headers: Option<&Headers>,
        options: PublishOptions,
    ) -> Result<PublishReply> {
        let body = Body::new()
            .int("delay", options.delay_ns)
            .headers("headers", headers)
            .raw("payload", &compact_payload(payload_json)?)
            .int("priority", options.priority)
            .str("topic", queue)
            .int("ttl", options.ttl_ns)
            .finish();
        self.publish_call(op::PUBLISH, &body)
    }

    /// CONSUME (0x03): one message, or `None` when the queue is empty (never waits).
    pub fn consume(&mut self, queue: &str) -> Result<Option<ConsumedMessage>> {
        let body = Body::new().str("topic", queue).finish();
        let (code, payload) = self.call(op::CONSUME, &body, Duration::ZERO)?;
        match code {
            status::EMPTY => Ok(None),
            status::OK => ConsumedMessage::parse(&reply_text(&payload)?).map(Some),
            other => Err(ClientError::from_status(other, &payload)),
        }
    }

    /// CONSUME with BoltQ's additive long-poll: waits up to `wait_ms` for a message and
    /// returns up to `max` of them (empty when the wait ended with none). The reply timeout
    /// is extended by `wait_ms`.
    pub fn consume_wait(
        &mut self,
        queue: &str,
        wait_ms: u64,
        max: u32,
    ) -> Result<Vec<ConsumedMessage>> {
        let body = Body::new()
            .int("max", max)
            .str("topic", queue)
            .int("wait_ms", wait_ms)
            .finish();
        let extra_wait = Duration::from_millis(wait_ms);
        let (code, payload) = self.call(op::CONSUME, &body, extra_wait)?;
        match code {
            status::EMPTY => Ok(Vec::new()),
            status::OK => ConsumedMessage::parse_batch(&reply_text(&payload)?),
            other => Err(ClientError::from_status(other, &payload)),
        }
    }

    /// ACK (0x04) a consumed message, from any connection.
    pub fn ack(&mut self, message_id: &str) -> Result<()> {
        let body = Body::new().str("id", message_id).finish();
        self.ok_call(op::ACK, &body).map(drop)
    }

    /// ACK of several messages in one request (`ids`, a BoltQ addition: v1 servers refuse
    /// it). Answers how many were acknowledged and, for each id that was not, why.
    pub fn ack_many(&mut self, message_ids: &[&str]) -> Result<AckedMany> {
        self.settle_many(op::ACK, message_ids)
    }

    /// NACK of several messages in one request (see [`Client::ack_many`]).
    pub fn nack_many(&mut self, message_ids: &[&str]) -> Result<AckedMany> {
        self.settle_many(op::NACK, message_ids)
    }

    fn settle_many(&mut self, code: u8, message_ids: &[&str]) -> Result<AckedMany> {
        let ids = serde_json::to_string(message_ids).expect("strings serialise");
        let body = Body::new().raw("ids", &ids).finish();
        let reply = self.json_call(code, &body)?;
        let failed = reply["failed"]
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|f| {
                        let text = |k: &str| f[k].as_str().unwrap_or_default().to_string();
                        (text("id"), text("error"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(AckedMany {
            count: reply["count"].as_u64().unwrap_or(0),
            failed,
        })
    }

    /// NACK (0x05): retry (or dead-letter) a consumed message.
    pub fn nack(&mut self, message_id: &str) -> Result<()> {
        let body = Body::new().str("id", message_id).finish();
        self.ok_call(op::NACK, &body).map(drop)
    }

    /// PREFETCH (0x09): at most `count` un-acked consumes on this connection (≤ 0: no limit).
    pub fn set_prefetch(&mut self, count: i64) -> Result<()> {
        let body = Body::new().int("count", count).finish();
        self.ok_call(op::PREFETCH, &body).map(drop)
    }

    /// CONFIRM_SELECT (0x13): from now on publish replies carry `seq_no` and `ack`.
    pub fn confirm_select(&mut self) -> Result<()> {
        self.ok_call(op::CONFIRM_SELECT, b"{}").map(drop)
    }

    // ---- pub/sub -------------------------------------------------------------------------

    /// PUBLISH_TOPIC (0x02) to every subscriber of `topic` (delay and TTL do not apply).
    pub fn publish_topic(
        &mut self,
        topic: &str,
        payload_json: &str,
        headers: Option<&Headers>,
        priority: i64,
    ) -> Result<PublishReply> {
        let body = Body::new()
            .headers("headers", headers)
            .raw("payload", &compact_payload(payload_json)?)
            .int("priority", priority)
            .str("topic", topic)
            .finish();
        self.publish_call(op::PUBLISH_TOPIC, &body)
    }

    /// SUBSCRIBE (0x03 with `id`). Deliveries then arrive through [`Client::next_push`].
    pub fn subscribe(&mut self, topic: &str, subscriber_id: &str, durable: bool) -> Result<()> {
        let body = Body::new()
            .bool("durable", durable)
            .str("id", subscriber_id)
            .str("topic", topic)
            .finish();
        self.ok_call(op::CONSUME, &body).map(drop)
    }

    /// SUBSCRIBE durably with acknowledged pushes (a BoltQ addition, not in v1): a push
    /// counts as received only once [`Client::ack`] names its id, so pushes this client
    /// read but never acknowledged (it crashed, or closed) come again on its next
    /// subscribe. Acknowledge every push; the server holds at most 65,536 unacknowledged
    /// per connection and closes it past that.
    pub fn subscribe_acked(&mut self, topic: &str, subscriber_id: &str) -> Result<()> {
        let body = Body::new()
            .bool("ack", true)
            .bool("durable", true)
            .str("id", subscriber_id)
            .str("topic", topic)
            .finish();
        self.ok_call(op::CONSUME, &body).map(drop)
    }

    // ---- exchanges -----------------------------------------------------------------------

    /// EXCHANGE_DECLARE (0x14); `kind` is `direct`, `fanout`, `topic` or `headers`.
    pub fn exchange_declare(&mut self, name: &str, kind: &str, durable: bool) -> Result<()> {
        let body = Body::new()
            .bool("durable", durable)
            .str("name", name)
            .str("type", kind)
            .finish();
        self.ok_call(op::EXCHANGE_DECLARE, &body).map(drop)
    }

    /// EXCHANGE_DELETE (0x15).
    pub fn exchange_delete(&mut self, name: &str) -> Result<()> {
        let body = Body::new().str("name", name).finish();
        self.ok_call(op::EXCHANGE_DELETE, &body).map(drop)
    }

    /// BIND_QUEUE (0x16). `headers`/`match_all` matter for `headers` exchanges only.
    pub fn bind_queue(
        &mut self,
        exchange: &str,
        queue: &str,
        binding_key: &str,
        headers: Option<&Headers>,
        match_all: bool,
    ) -> Result<()> {
        let body = Body::new()
            .str("binding_key", binding_key)
            .str("exchange", exchange)
            .headers("headers", headers)
            .bool("match_all", match_all)
            .str("queue", queue)
            .finish();
        self.ok_call(op::BIND_QUEUE, &body).map(drop)
    }

    /// UNBIND_QUEUE (0x17).
    pub fn unbind_queue(&mut self, exchange: &str, queue: &str, binding_key: &str) -> Result<()> {
        let body = Body::new()
            .str("binding_key", binding_key)
            .str("exchange", exchange)
            .str("queue", queue)
            .finish();
        self.ok_call(op::UNBIND_QUEUE, &body).map(drop)
    }

    /// PUBLISH_EXCHANGE (0x18); `""` is the default exchange (routes to queue `routing_key`).
    pub fn publish_exchange(
        &mut self,
        exchange: &str,
        routing_key: &str,
        payload_json: &str,
        headers: Option<&Headers>,
        priority: i64,
    ) -> Result<PublishReply> {
        let body = Body::new()
            .str("exchange", exchange)
            .headers("headers", headers)
            .raw("payload", &compact_payload(payload_json)?)
            .int("priority", priority)
            .str("routing_key", routing_key)
            .finish();
        self.publish_call(op::PUBLISH_EXCHANGE, &body)
    }

    // ---- server --------------------------------------------------------------------------

    /// PING (0x06).
    pub fn ping(&mut self) -> Result<()> {
        self.ok_call(op::PING, b"{}").map(drop)
    }

    /// STATS (0x07): `{"Queues","Topics","DeadLetters","PendingCount","DelayedCount"}`.
    pub fn stats(&mut self) -> Result<Value> {
        self.json_call(op::STATS, b"{}")
    }

    /// CLUSTER_STATUS (0x12): `{"enabled":false}` or `{"cluster":{…},"enabled":true}`.
    pub fn cluster_status(&mut self) -> Result<Value> {
        self.json_call(op::CLUSTER_STATUS, b"{}")
    }

    /// CLUSTER_JOIN (0x10): add a voter at Raft address `raft_addr` (run on the leader).
    pub fn cluster_join(&mut self, node_id: &str, raft_addr: &str) -> Result<Value> {
        let body = Body::new()
            .str("addr", raft_addr)
            .str("node_id", node_id)
            .finish();
        self.json_call(op::CLUSTER_JOIN, &body)
    }

    /// CLUSTER_LEAVE (0x11).
    pub fn cluster_leave(&mut self, node_id: &str) -> Result<Value> {
        let body = Body::new().str("node_id", node_id).finish();
        self.json_call(op::CLUSTER_LEAVE, &body)
    }

    // ---- dead letters (BoltQ additive) ---------------------------------------------------

    /// DLQ_LIST (0x19): dead-letter queues, all or the one for `queue`.
    pub fn dlq_list(&mut self, queue: Option<&str>) -> Result<Value> {
        let body = match queue {
            Some(q) => Body::new().str("queue", q),
            None => Body::new(),
        };
        self.dlq_call(OP_DLQ_LIST, &body.finish())
    }

    /// DLQ_READ (0x1A): up to `limit` dead letters of `queue` from `offset`, not removed.
    pub fn dlq_read(&mut self, queue: &str, offset: u64, limit: u64) -> Result<Value> {
        let body = Body::new()
            .int("limit", limit)
            .int("offset", offset)
            .str("queue", queue)
            .finish();
        self.dlq_call(OP_DLQ_READ, &body)
    }

    /// DLQ_REQUEUE (0x1B): move up to `limit` dead letters of `queue` back to the queue.
    pub fn dlq_requeue(&mut self, queue: &str, limit: u64) -> Result<Value> {
        let body = Body::new().int("limit", limit).str("queue", queue).finish();
        self.dlq_call(OP_DLQ_REQUEUE, &body)
    }

    /// DLQ_PURGE (0x1C): drop every dead letter of `queue`.
    pub fn dlq_purge(&mut self, queue: &str) -> Result<Value> {
        let body = Body::new().str("queue", queue).finish();
        self.dlq_call(OP_DLQ_PURGE, &body)
    }

    // ---- reply handling ------------------------------------------------------------------

    /// A request whose only success is OK; returns the OK payload.
    fn ok_call(&mut self, code: u8, body: &[u8]) -> Result<Vec<u8>> {
        let (status_byte, payload) = self.call(code, body, Duration::ZERO)?;
        if status_byte != status::OK {
            return Err(ClientError::from_status(status_byte, &payload));
        }
        Ok(payload)
    }

    fn json_call(&mut self, code: u8, body: &[u8]) -> Result<Value> {
        let payload = self.ok_call(code, body)?;
        parse_json(&payload)
    }

    /// DLQ replies are taken as JSON; EMPTY (if the server uses it for "nothing there") is
    /// `null`, as v1's SDK treats EMPTY outside CONSUME.
    fn dlq_call(&mut self, code: u8, body: &[u8]) -> Result<Value> {
        let (status_byte, payload) = self.call(code, body, Duration::ZERO)?;
        match status_byte {
            status::OK => parse_json(&payload),
            status::EMPTY => Ok(Value::Null),
            other => Err(ClientError::from_status(other, &payload)),
        }
    }

    fn publish_call(&mut self, code: u8, body: &[u8]) -> Result<PublishReply> {
        let payload = self.ok_call(code, body)?;
        serde_json::from_slice(&payload)
            .map_err(|e| ClientError::Protocol(format!("malformed publish reply: {e}")))
    }
}

fn open_stream(addr: &str, timeout: Option<Duration>) -> Result<TcpStream> {
    let mut last_error = None;
    for socket_addr in addr.to_socket_addrs()? {
        let attempt = match timeout {
            Some(t) => TcpStream::connect_timeout(&socket_addr, t),
            None => TcpStream::connect(socket_addr),
        };
        match attempt {
            Ok(stream) => return Ok(stream),
            Err(e) => last_error = Some(e),
        }
    }
    Err(ClientError::Io(last_error.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("no address found for {addr}"),
        )
    })))
}

fn compact_payload(payload_json: &str) -> Result<String> {
    json::compact(payload_json)
        .map_err(|e| ClientError::InvalidArgument(format!("payload is not valid JSON: {e}")))
}

fn reply_text(payload: &[u8]) -> Result<String> {
    String::from_utf8(payload.to_vec())
        .map_err(|_| ClientError::Protocol("reply is not UTF-8".to_string()))
}

fn parse_json(payload: &[u8]) -> Result<Value> {
    if payload.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(payload)
        .map_err(|e| ClientError::Protocol(format!("malformed reply: {e}")))
}
