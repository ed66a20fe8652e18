//! Admin routes of the queue plane (v1 spec §4.2), one handler per route. Request bodies go
//! through the TCP protocol's parser, so validation and error texts are the same on both
//! front ends; HTTP maps them to 400 (bad request) and 500 (broker refusal) as v1 did.

use super::router::AdminCtx;
use crate::http::{Request, Response};
use crate::queue::broker::{Command, ConsumerRef, Outcome};
use crate::queue::message::Message;
use crate::queue::protocol::frame::{op, Frame};
use crate::queue::protocol::request::{self, ext_op, Request as Cmd, RequestError};
use crate::queue::server::delivery::{
    CatchUp, Confirmations, CATCH_UP_CHUNK_BYTES, CONFIRM_POLL_MS,
};
use crate::queue::server::dispatch::{self, slot_of_name, AckPart};
use crate::queue::server::exchanges::ExchangeOp;
use crate::queue::server::outbound::Outbound;
use crate::queue::server::plane::now_ns;
use crate::queue::server::replicated::{APPLIED_METRIC, LEADER_CHANGES_METRIC, SNAPSHOTS_METRIC};
use base64::Engine;
use futures_lite::AsyncWriteExt;
use serde_json::{json, Value};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

/// Parses a JSON body as the TCP command `code` would be.
fn parse(code: u8, req: &Request) -> Result<Cmd, Response> {
    request::parse(Frame {
        code,
        payload: &req.body,
    })
    .map_err(|e| bad_request(&e))
}

fn bad_request(e: &RequestError) -> Response {
    match e {
        // v1's HTTP front end says only this for any JSON problem.
        RequestError::InvalidJson(_) | RequestError::InvalidJsonNoDetail => {
            Response::error(400, "invalid json")
        }
        other => Response::error(400, &other.text()),
    }
}

/// A broker refusal: 500, as v1; no leader known: v1's 307 without a `Location`.
fn refused(outcome: Outcome) -> Response {
    match outcome {
        Outcome::Error(e) => Response::error(500, &e),
        Outcome::NotLeader {
            leader,
            leader_id,
            leader_tcp,
            leader_http,
        } => {
            let mut body = serde_json::json!({"error": "not leader", "leader": leader, "leader_id": leader_id});
            for (key, value) in [("leader_tcp", leader_tcp), ("leader_http", leader_http)] {
                if !value.is_empty() {
                    body[key] = serde_json::json!(value);
                }
            }
            Response::json(307, &body)
        }
        other => Response::error(
            500,
            &format!("internal error: unexpected outcome {other:?}"),
        ),
    }
}

/// Messages consumed over HTTP belong to no connection: they are acked from anywhere and
/// released by their ack timeout.
fn http_consumer(ctx: &AdminCtx) -> ConsumerRef {
    ctx.plane.http_consumer()
}

pub async fn stats(ctx: &AdminCtx) -> Response {
    let report = ctx.plane.gather_stats().merged().await;
    Response::json(200, &stats_json(&report.stats))
}

fn stats_json(stats: &crate::queue::broker::BrokerStats) -> Value {
    serde_json::to_value(stats).expect("stats serialise")
}

pub async fn overview(ctx: &AdminCtx) -> Response {
    let r = ctx.plane.gather_stats().merged().await;
    let cache = match &ctx.cache {
        None => json!({"enabled": false}),
        Some(c) => match c.run(crate::cache::service::CacheOp::Stats).await {
            crate::cache::service::CacheAnswer::Stats(s) => json!({"enabled": true, "stats": s}),
            _ => json!({"enabled": true}),
        },
    };
    let c = &r.counters;
    Response::json(
        200,
        &json!({
            "health": "ok",
            "stats": stats_json(&r.stats),
            "metrics": {
                "messages_published": c.published + c.published_topic,
                "messages_consumed": c.consumed,
                "messages_acked": c.acked,
                "messages_nacked": c.nacked,
                "retry_count": c.retried,
                "dead_letter_count": c.dead_lettered,
                "raft_apply_count": r.metrics.counter(APPLIED_METRIC, &[]).unwrap_or(0),
                "snapshot_count": r.metrics.counter(SNAPSHOTS_METRIC, &[]).unwrap_or(0),
                "leader_changes": r.metrics.counter(LEADER_CHANGES_METRIC, &[]).unwrap_or(0),
            },
            "storage": {
                "mode": ctx.storage_mode,
                "size": r.storage_bytes,
                "compaction_threshold": ctx.compaction_threshold_bytes,
            },
            "system": {
                "goroutines": process_threads(),
                "memory": process_rss_bytes(),
                "connections": r.connections,
            },
            "uptime_ms": ctx.started.elapsed().as_millis() as u64,
            "cluster": {"enabled": ctx.plane.clustered()},
            "cache": cache,
            "warnings": ctx.warnings,
        }),
    )
}

/// Threads of this process (reported where v1 reported goroutines).
fn process_threads() -> u64 {
    proc_status_field("Threads:").unwrap_or(0)
}

fn process_rss_bytes() -> u64 {
    proc_status_field("VmRSS:").map_or(0, |kb| kb * 1024)
}

fn proc_status_field(name: &str) -> Option<u64> {
    // A small procfs read on an admin request, not on any data path.
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(name))?;
    line[name.len()..].split_whitespace().next()?.parse().ok()
}

pub async fn publish(req: &Request, ctx: &AdminCtx, to_topic: bool) -> Response {
    let code = if to_topic {
        op::PUBLISH_TOPIC
    } else {
        op::PUBLISH
    };
    let p = match parse(code, req) {
        Ok(Cmd::Publish(p)) | Ok(Cmd::PublishTopic(p)) => p,
        Ok(_) => unreachable!("parse of a publish code"),
        Err(r) => return r,
    };
    let (cmd, id, slot) = dispatch::publish_command(&ctx.plane, p, to_topic);
    match ctx.plane.submit(slot, cmd).outcome(&ctx.plane).await {
        Outcome::Published | Outcome::PublishedLive => {
            Response::json(200, &json!({"id": id.to_hex(), "status": "published"}))
        }
        other => refused(other),
    }
}

/// The whole internal message, payload base64 (v1's HTTP `/consume` shape).
pub fn message_json(m: &Message) -> Value {
    let mut v = json!({
        "id": m.id.to_hex(),
        "topic": m.topic,
        "payload": base64::engine::general_purpose::STANDARD.encode(&m.payload),
        "timestamp": m.timestamp_ns,
        "retry": m.retry,
        "max_retry": m.max_retry,
        "delivery_count": 0,
    });
    let o = v.as_object_mut().expect("object");
    if !m.headers().is_empty() {
        o.insert("headers".into(), json!(m.headers()));
    }
    for (k, n) in [
        ("delay", m.delay_ns),
        ("ttl", m.ttl_ns),
        ("deliver_at", m.deliver_at_ns),
        ("expires_at", m.expires_at_ns),
        ("priority", m.priority),
    ] {
        if n != 0 {
            o.insert(k.into(), json!(n));
        }
    }
    for (k, s) in [("exchange", m.exchange()), ("routing_key", m.routing_key())] {
        if !s.is_empty() {
            o.insert(k.into(), json!(s));
        }
    }
    v
}

pub async fn consume(req: &Request, ctx: &AdminCtx) -> Response {
    let queue = req.query("topic").unwrap_or("").to_string();
    if queue.is_empty() {
        return Response::error(400, "topic is required");
    }
    let wait_ms = req
        .query("wait_ms")
        .and_then(|w| w.parse::<u64>().ok())
        .unwrap_or(0)
        .min(request::WAIT_MS_MAX);
    let slot = slot_of_name(&queue);
    let cmd = Command::Consume {
        queue,
        consumer: http_consumer(ctx),
        max: 1,
        now_ns: now_ns(),
    };
    match ctx
        .plane
        .submit_consume(slot, cmd, wait_ms)
        .outcome(&ctx.plane)
        .await
    {
        Outcome::Delivered(ms) => Response::json(200, &message_json(&ms[0])),
        Outcome::Empty => Response::error(404, "no messages available"),
        other => refused(other),
    }
}

pub async fn ack(req: &Request, ctx: &AdminCtx, nack: bool) -> Response {
    let code = if nack { op::NACK } else { op::ACK };
    let targets = match parse(code, req) {
        Ok(Cmd::Ack(t)) | Ok(Cmd::Nack(t)) => {
            return match dispatch::settle(&ctx.plane, &t, nack)
                .outcome(&t.id, &ctx.plane)
                .await
            {
                Outcome::Acked => Response::json(200, &json!({"status": "acked"})),
                Outcome::Nacked => Response::json(200, &json!({"status": "nacked"})),
                other => refused(other),
            };
        }
        Ok(Cmd::AckMany(ts)) | Ok(Cmd::NackMany(ts)) => ts,
        Ok(_) => unreachable!("parse of an ack code"),
        Err(r) => return r,
    };
    // `ids` (a BoltQ addition): the TCP reply's shape, as JSON. Every id is submitted
    // before any answer is awaited, so they share commit rounds.
    let settling: Vec<AckPart> = targets
        .iter()
        .map(|t| dispatch::settle(&ctx.plane, t, nack))
        .collect();
    let mut count = 0;
    let mut failed = Vec::new();
    for (t, s) in targets.iter().zip(settling) {
        match s.outcome(&t.id, &ctx.plane).await {
            Outcome::Acked | Outcome::Nacked => count += 1,
            Outcome::Error(e) => failed.push(json!({"id": t.id, "error": e})),
            other => failed.push(json!({"id": t.id, "error": format!("{other:?}")})),
        }
    }
    let mut body = json!({"status": if nack { "nacked" } else { "acked" }, "count": count});
    if !failed.is_empty() {
        body["failed"] = Value::Array(failed);
    }
    Response::json(200, &body)
}

fn queue_field(req: &Request) -> Result<String, Response> {
    let v: Value =
        serde_json::from_slice(&req.body).map_err(|_| Response::error(400, "invalid json"))?;
    match v.get("queue").and_then(Value::as_str) {
        Some(q) if !q.is_empty() => Ok(q.to_string()),
        _ => Err(Response::error(400, "queue is required")),
    }
}

/// `/queues/purge` (ready messages) and `/dead-letters/purge` (dead letters): same body,
/// same reply shape.
pub async fn purge(req: &Request, ctx: &AdminCtx, dead_letters: bool) -> Response {
    let queue = match queue_field(req) {
        Ok(q) => q,
        Err(r) => return r,
    };
    let cmd = if dead_letters {
        Command::DeadLetterPurge {
            queue: queue.clone(),
        }
    } else {
        Command::Purge {
            queue: queue.clone(),
        }
    };
    let slot = slot_of_name(&queue);
    match ctx.plane.submit(slot, cmd).outcome(&ctx.plane).await {
        Outcome::Purged(n) => purged(&queue, n),
        other => refused(other),
    }
}

fn purged(queue: &str, n: u64) -> Response {
    Response::json(
        200,
        &json!({"purged_count": n, "queue": queue, "status": "purged"}),
    )
}

pub async fn dead_letters(req: &Request, ctx: &AdminCtx) -> Response {
    let Some(queue) = req.query("queue").filter(|q| !q.is_empty()) else {
        let counts = ctx.plane.gather_dlq_list(None).merged().await;
        let list: Vec<Value> = counts
            .iter()
            .map(
                |(q, n)| json!({"queue": q, "dead_letter": format!("{q}_dead_letter"), "count": n}),
            )
            .collect();
        return Response::json(200, &json!({ "dead_letters": list }));
    };
    let offset = req
        .query("offset")
        .and_then(|o| o.parse().ok())
        .unwrap_or(0u64);
    let limit = req
        .query("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(request::DLQ_READ_LIMIT_DEFAULT)
        .clamp(1, request::DLQ_READ_LIMIT_MAX);
    let (queue, offset, messages) = ctx
        .plane
        .submit_dlq_read(queue.to_string(), offset, limit)
        .messages()
        .await;
    let next = offset + messages.len() as u64;
    let list: Vec<Value> = messages.iter().map(message_json).collect();
    Response::json(
        200,
        &json!({"queue": queue, "offset": offset, "messages": list, "next_offset": next}),
    )
}

pub async fn dead_letters_requeue(req: &Request, ctx: &AdminCtx) -> Response {
    let (queue, limit) = match parse(ext_op::DLQ_REQUEUE, req) {
        Ok(Cmd::DlqRequeue { queue, limit }) => (queue, limit),
        Ok(_) => unreachable!("parse of DLQ_REQUEUE"),
        Err(r) => return r,
    };
    let limit = limit.unwrap_or(u32::MAX as u64).min(u32::MAX as u64) as u32;
    let cmd = Command::DeadLetterRequeue {
        queue: queue.clone(),
        limit,
        now_ns: now_ns(),
    };
    match ctx
        .plane
        .submit(slot_of_name(&queue), cmd)
        .outcome(&ctx.plane)
        .await
    {
        Outcome::Requeued(n) => Response::json(200, &json!({"queue": queue, "requeued": n})),
        other => refused(other),
    }
}

/// `GET /connections`: the open TCP (and SSE) connections of every shard. `count` is exact;
/// the list holds at most `CONNECTION_LIST_MAX` per shard, so a client reading a busy
/// server sees from `count` that some are left out.
pub async fn connections(ctx: &AdminCtx) -> Response {
    let report = ctx.plane.gather_stats().merged().await;
    let list: Vec<Value> = report
        .connection_list
        .iter()
        .map(|c| {
            json!({
                "shard": c.shard,
                "peer": c.peer,
                "since_ms": c.since_ms,
                "idle_ms": c.idle_ms,
            })
        })
        .collect();
    Response::json(
        200,
        &json!({"count": report.connections, "connections": list}),
    )
}

pub fn exchanges(ctx: &AdminCtx) -> Response {
    let snapshot = ctx.plane.exchanges_snapshot();
    Response::json(200, &json!({ "exchanges": snapshot.exchanges }))
}

#[derive(Clone, Copy)]
pub enum ExchangeRoute {
    Declare,
    Delete,
    Bind,
    Unbind,
}

pub async fn exchange_op(req: &Request, ctx: &AdminCtx, which: ExchangeRoute) -> Response {
    let code = match which {
        ExchangeRoute::Declare => op::EXCHANGE_DECLARE,
        ExchangeRoute::Delete => op::EXCHANGE_DELETE,
        ExchangeRoute::Bind => op::BIND_QUEUE,
        ExchangeRoute::Unbind => op::UNBIND_QUEUE,
    };
    let change = match parse(code, req) {
        Ok(Cmd::ExchangeDeclare(d)) => ExchangeOp::Declare {
            name: d.name,
            kind: d.kind.as_str().to_string(),
            durable: d.durable,
        },
        Ok(Cmd::ExchangeDelete { name }) => ExchangeOp::Delete { name },
        Ok(Cmd::BindQueue(b)) => ExchangeOp::Bind(b),
        Ok(Cmd::UnbindQueue(b)) => ExchangeOp::Unbind(b),
        Ok(_) => unreachable!("parse of an exchange code"),
        Err(r) => return r,
    };
    match ctx.plane.submit_exchange(change).result(&ctx.plane).await {
        Ok(()) => Response::json(200, &json!({"status": "ok"})),
        Err(e) => Response::error(500, &e),
    }
}

pub async fn exchange_publish(req: &Request, ctx: &AdminCtx) -> Response {
    let p = match parse(op::PUBLISH_EXCHANGE, req) {
        Ok(Cmd::PublishExchange(p)) => p,
        Ok(_) => unreachable!("parse of PUBLISH_EXCHANGE"),
        Err(r) => return r,
    };
    match dispatch::submit_exchange_publish(&ctx.plane, p) {
        Err(e) => Response::error(500, &e),
        Ok((parts, id, _)) => match dispatch::copies_outcome(&ctx.plane, parts).await {
            Ok(()) => Response::json(200, &json!({"id": id.to_hex(), "status": "published"})),
            Err(e) => Response::error(500, &e),
        },
    }
}

/// `GET /subscribe?topic=T&id=S[&durable=true]`: a pub/sub subscription as server-sent
/// events (`data: <push JSON>`), until the client goes away or the server stops.
pub async fn serve_events(
    mut conn: boltq_io::listener::Conn,
    req: &Request,
    ctx: Rc<AdminCtx>,
    mut stop: Pin<&mut impl Future<Output = ()>>,
) {
    let mut out = Vec::new();
    let topic = req.query("topic").unwrap_or("").to_string();
    let sub_id = req.query("id").unwrap_or("").to_string();
    let refusal = if super::router::route_auth_failed(req, &ctx) {
        Some(Response::error(401, "unauthorized"))
    } else if topic.is_empty() || sub_id.is_empty() {
        Some(Response::error(400, "topic and id are required"))
    } else {
        None
    };
    if let Some(mut r) = refusal {
        ctx.cors.apply(req.header("origin"), &mut r);
        crate::http::encode_response(&r, false, true, &mut out);
        let _ = conn.write_all(&out).await;
        return;
    }
    let durable = req.query("durable") == Some("true");
    let peer = conn
        .peer_addr()
        .map(|a| format!("{a} (sse)"))
        .unwrap_or_default();
    let outbound = Rc::new(Outbound::for_peer(peer));
    let me = ctx.plane.register_conn(Rc::clone(&outbound));
    let cmd = Command::Subscribe {
        topic: topic.clone(),
        sub_id: sub_id.clone(),
        durable,
        consumer: me,
        now_ns: now_ns(),
    };
    let slot = slot_of_name(&topic);
    let outcome = ctx.plane.submit(slot, cmd).outcome(&ctx.plane).await;
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
         {}Connection: close\r\n\r\n",
        ctx.cors.event_stream_lines(req.header("origin"))
    );
    out.extend_from_slice(head.as_bytes());
    let mut catch_up = match outcome {
        Outcome::Subscribed {
            catch_up,
            first_delivery,
        } => CatchUp::new(&topic, &sub_id, catch_up, first_delivery),
        refused => {
            let mut refusal = match refused {
                Outcome::Error(e) => Response::error(500, &e),
                other => Response::error(
                    500,
                    &format!("internal error: unexpected outcome {other:?}"),
                ),
            };
            out.clear();
            ctx.cors.apply(req.header("origin"), &mut refusal);
            crate::http::encode_response(&refusal, false, true, &mut out);
            let _ = conn.write_all(&out).await;
            ctx.plane.unregister_conn(me);
            return;
        }
    };
    let mut frames = Vec::new();
    let mut tracked = Vec::new();
    // The catch-up goes out a chunk per round, the first with the response head, and
    // before any live push.
    catch_up.encode_chunk(CATCH_UP_CHUNK_BYTES, &mut frames, &mut tracked);
    sse_events(&frames, &mut out);
    let mut confirms = Confirmations::default();
    let mut probe = [0u8; 64];
    loop {
        if conn.write_all(&out).await.is_err() {
            break;
        }
        confirms
            .written(&mut conn, std::mem::take(&mut tracked))
            .await;
        out.clear();
        if outbound.overrun() {
            break; // a durable subscriber that stopped reading: it gets them again later
        }
        confirms.confirm(&conn, &ctx.plane, me);
        if !catch_up.is_done() {
            frames.clear();
            catch_up.encode_chunk(CATCH_UP_CHUNK_BYTES, &mut frames, &mut tracked);
            sse_events(&frames, &mut out);
            continue;
        }
        let ticket = outbound.push_event.ticket();
        if outbound.has_pushes() {
            frames.clear();
            outbound.take_pushes(&mut frames, &mut tracked);
            sse_events(&frames, &mut out);
            continue;
        }
        // Wait for a push, the server stopping, the client going away (a read that ends
        // or fails: an SSE client sends nothing, so any read result but more bytes ends
        // it), or the time to confirm durable pushes.
        let wake = futures_lite::future::or(
            async {
                outbound.push_event.wait(ticket).await;
                SseWake::Push
            },
            futures_lite::future::or(
                async {
                    stop.as_mut().await;
                    SseWake::Stop
                },
                futures_lite::future::or(
                    async {
                        use futures_lite::AsyncReadExt;
                        match conn.read(&mut probe).await {
                            Ok(n) if n > 0 => SseWake::Push, // stray bytes: ignore, loop again
                            _ => SseWake::Gone,
                        }
                    },
                    async {
                        if !confirms.waiting() {
                            futures_lite::future::pending::<()>().await;
                        }
                        boltq_shards::sleep(std::time::Duration::from_millis(CONFIRM_POLL_MS))
                            .await;
                        SseWake::Push
                    },
                ),
            ),
        )
        .await;
        if !matches!(wake, SseWake::Push) {
            break;
        }
    }
    confirms.confirm(&conn, &ctx.plane, me);
    ctx.plane.unregister_conn(me);
}

enum SseWake {
    Push,
    Stop,
    Gone,
}

/// Turns encoded push frames into SSE events (one `data:` line each: push JSON has no
/// newlines).
fn sse_events(frames: &[u8], out: &mut Vec<u8>) {
    let mut at = 0;
    while let Ok(Some((f, used))) = crate::queue::protocol::frame::decode(&frames[at..]) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(f.payload);
        out.extend_from_slice(b"\n\n");
        at += used;
    }
}
