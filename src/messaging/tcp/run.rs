//! The stream commands (0x1D–0x20) on a TCP connection: each parsed request becomes one
//! future that calls the shard's stream engine and yields the encoded reply. Wire shapes
//! are in `super::protocol`; the steps here only move values between the two.
//!
//! Trade-off: the futures are lazy and the connection awaits replies in request order, so
//! pipelined STREAM_PUBLISHes run one after another (each waits for its own durability)
//! rather than sharing a group commit. In exchange the records of one connection land in
//! the order it sent them, whatever the partition's state, which is what a producer
//! relying on order needs.

use super::protocol::commit::{self, Commit};
use super::protocol::publish::{self, Publish};
use super::protocol::read::Read;
use super::protocol::records::{self, PageHead};
use super::protocol::tail::Tail;
use super::protocol::{StreamRequest, Target};
use crate::messaging::cursor::CursorKey;
use crate::messaging::engine::mesh::{AppendReq, ReadOk, StreamError};
use crate::messaging::engine::Engine;
use crate::messaging::topic::Namespace;
use crate::queue::protocol::reply;
use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The reply of a stream command, once its future completes.
pub type StreamReply = Pin<Box<dyn Future<Output = Vec<u8>>>>;

/// The "user" a backend's appends are accounted to (topic-creation quota, dedup scope).
/// Every backend shares it: they are one trusted party.
pub const BACKEND_USER: &str = "tcp-backend";

/// The error every stream command gets when this server runs without the messaging plane.
pub const PLANE_OFF: &str = "the messaging plane is not enabled";

/// The future answering `req`.
pub fn run(engine: Option<Rc<Engine>>, req: StreamRequest) -> StreamReply {
    let Some(engine) = engine else {
        let mut out = Vec::new();
        reply::error(PLANE_OFF, &mut out);
        return Box::pin(std::future::ready(out));
    };
    Box::pin(async move {
        let mut out = Vec::new();
        let result = match req {
            StreamRequest::Publish(p) => publish(&engine, p, &mut out).await,
            StreamRequest::Read(r) => read(&engine, r, &mut out).await,
            StreamRequest::Tail(t) => tail(&engine, t, &mut out).await,
            StreamRequest::Commit(c) => commit(&engine, c, &mut out).await,
        };
        if let Err(text) = result {
            out.clear();
            reply::error(&text, &mut out);
        }
        out
    })
}

/// Error text for a client: limits and bad input as they are, storage failures only in
/// the server log.
fn error_text(e: StreamError) -> String {
    match e {
        StreamError::Internal(m) => {
            log::warn!("[stream tcp] {m}");
            "internal error in the stream engine; retry later".to_string()
        }
        other => other.to_string(),
    }
}

/// The partition `target` addresses, within the topic's count (as created, or as it would
/// be created now).
fn partition_of(engine: &Engine, target: &Target) -> Result<u32, String> {
    let ns = Namespace::of(&target.topic).map_err(|e| format!("invalid topic: {e}"))?;
    target.partition_in(engine.partitions_of(&target.topic, &ns))
}

fn to_bytes_headers(h: std::collections::BTreeMap<String, String>) -> Vec<(Bytes, Bytes)> {
    // A BTreeMap iterates in name order: the engine wants headers sorted by name.
    h.into_iter()
        .map(|(k, v)| (Bytes::from(k), Bytes::from(v)))
        .collect()
}

async fn publish(engine: &Engine, p: Publish, out: &mut Vec<u8>) -> Result<(), String> {
    let partition = partition_of(engine, &p.target)?;
    let req = AppendReq {
        topic: p.target.topic,
        partition,
        key: Bytes::from(p.target.key),
        headers: to_bytes_headers(p.headers),
        payload: Bytes::from(p.payload),
        user: BACKEND_USER.to_string(),
        dedup: None,
        pointer_members: Vec::new(),
    };
    let ok = engine.append(req).await.map_err(error_text)?;
    let c = &ok.coords;
    publish::published(&c.topic, c.partition, c.seq, c.timestamp_ns, out);
    Ok(())
}

/// Where a read at `pos` really starts: 0 = the first retained record; below it = there
/// (a gap); past the head = the head (waiting for a sequence that does not exist yet would
/// stall the reader for as long as the gap takes to fill).
fn served_from(pos: u64, page: &ReadOk) -> u64 {
    pos.clamp(page.first_seq, page.next_seq.max(page.first_seq))
}

fn page_reply(
    target: &Target,
    partition: u32,
    pos: u64,
    page: &ReadOk,
    consumer: Option<(&str, &str)>,
    out: &mut Vec<u8>,
) {
    let head = PageHead {
        topic: &target.topic,
        partition,
        from: served_from(pos, page),
        first_seq: page.first_seq,
        next_seq: page.next_seq,
        gap: page.gap,
        consumer,
    };
    records::page(&head, &page.records, out);
}

async fn read(engine: &Engine, r: Read, out: &mut Vec<u8>) -> Result<(), String> {
    let partition = partition_of(engine, &r.target)?;
    let page = engine
        .read(&r.target.topic, partition, r.from, r.max as usize, false)
        .await
        .map_err(error_text)?;
    page_reply(&r.target, partition, r.from, &page, None, out);
    Ok(())
}

fn cursor_key(
    target: &Target,
    partition: u32,
    c: &super::protocol::Consumer,
) -> Result<CursorKey, String> {
    CursorKey::new(&target.topic, partition, &c.cursor_group(), &c.member)
        .map_err(|e| format!("invalid consumer: {e}"))
}

async fn tail(engine: &Rc<Engine>, t: Tail, out: &mut Vec<u8>) -> Result<(), String> {
    let partition = partition_of(engine, &t.target)?;
    let pos = match (t.from, &t.consumer) {
        (Some(from), _) => from,
        (None, Some(c)) => {
            let key = cursor_key(&t.target, partition, c)?;
            engine.cursor(key).await.map_err(error_text)?.unwrap_or(0)
        }
        (None, None) => 0,
    };
    let page = tail_page(engine, &t, partition, pos).await?;
    let consumer = t
        .consumer
        .as_ref()
        .map(|c| (c.group.as_str(), c.member.as_str()));
    page_reply(&t.target, partition, pos, &page, consumer, out);
    Ok(())
}

/// Reads from `pos`; when there is nothing yet, waits for the partition to move (the
/// shard's mirror wakes it) until `wait_ms` runs out or the server shuts down.
async fn tail_page(
    engine: &Rc<Engine>,
    t: &Tail,
    partition: u32,
    pos: u64,
) -> Result<ReadOk, String> {
    let topic = t.target.topic.as_str();
    let max = t.max as usize;
    let first = engine
        .read(topic, partition, pos, max, false)
        .await
        .map_err(error_text)?;
    if !first.records.is_empty() || t.wait_ms == 0 {
        return Ok(first);
    }
    // Past the head: wait at the head (see served_from).
    let pos = served_from(pos, &first);
    let deadline = Instant::now() + Duration::from_millis(t.wait_ms);
    let watch = Watch::acquire(engine, topic, partition);
    let mut register = watch.first;
    loop {
        // The ticket is taken before the read, so a record made durable in between still
        // wakes the wait below.
        let ticket = watch.event.ticket();
        let page = engine
            .read(topic, partition, pos, max, register)
            .await
            .map_err(error_text)?;
        register = false;
        let left = deadline.saturating_duration_since(Instant::now());
        if !page.records.is_empty() || left.is_zero() {
            return Ok(page);
        }
        let woke = futures_lite::future::or(
            async {
                watch.event.wait(ticket).await;
                true
            },
            futures_lite::future::or(
                async {
                    boltq_shards::sleep(left).await;
                    false
                },
                async {
                    engine.shard().shutdown_requested().await;
                    false
                },
            ),
        )
        .await;
        if !woke {
            // Deadline or shutdown: answer with what is there (an empty page).
            return engine
                .read(topic, partition, pos, max, false)
                .await
                .map_err(error_text);
        }
    }
}

/// This connection's interest in a partition's tail, registered in the shard's mirror for
/// as long as it waits; dropping it (the reply is ready, or the connection went away)
/// releases it, and the last local reader tells the owner to stop pushing.
struct Watch {
    engine: Rc<Engine>,
    key: (String, u32),
    event: Rc<boltq_io::event::Event>,
    /// The first local reader: its first read must ask the owner to push here.
    first: bool,
}

impl Watch {
    fn acquire(engine: &Rc<Engine>, topic: &str, partition: u32) -> Watch {
        let key = (topic.to_string(), partition);
        let (first, event) = engine.mirror().borrow_mut().subscribe(&key);
        Watch {
            engine: Rc::clone(engine),
            key,
            event,
            first,
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if self.engine.mirror().borrow_mut().unsubscribe(&self.key) {
            self.engine.unwatch(&self.key.0, self.key.1);
        }
    }
}

async fn commit(engine: &Engine, c: Commit, out: &mut Vec<u8>) -> Result<(), String> {
    let partition = partition_of(engine, &c.target)?;
    let key = cursor_key(&c.target, partition, &c.consumer)?;
    engine.commit(key, c.seq).await.map_err(error_text)?;
    commit::committed(&c, partition, out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(first_seq: u64, next_seq: u64) -> ReadOk {
        ReadOk {
            records: Vec::new(),
            first_seq,
            next_seq,
            gap: false,
        }
    }

    #[test]
    fn reads_start_inside_the_retained_range() {
        assert_eq!(served_from(0, &page(1, 1)), 1, "empty partition");
        assert_eq!(served_from(0, &page(4, 9)), 4, "0 = first retained");
        assert_eq!(served_from(2, &page(4, 9)), 4, "below the horizon");
        assert_eq!(served_from(6, &page(4, 9)), 6);
        assert_eq!(served_from(9, &page(4, 9)), 9, "at the head");
        assert_eq!(served_from(50, &page(4, 9)), 9, "past the head: the head");
    }

    #[test]
    fn without_the_plane_every_command_says_so() {
        let req = super::super::protocol::parse(0x1E, br#"{"topic":"m"}"#)
            .unwrap()
            .unwrap();
        let out = futures_lite::future::block_on(run(None, req));
        let (f, _) = crate::queue::protocol::frame::decode(&out)
            .unwrap()
            .unwrap();
        assert_eq!(f.code, crate::queue::protocol::frame::status::ERROR);
        let v: serde_json::Value = serde_json::from_slice(f.payload).unwrap();
        assert_eq!(v["error"], PLANE_OFF);
    }
}
