//! Admin routes of the messaging plane (spec/messaging-edge.md §11.4): read-only JSON about
//! stream topics, cursors, the gateway and replication, gathered from every shard over the
//! mesh at request time.
//!
//! GET (and HEAD) only: the spec's "any method" invited cache-busting POSTs and hid typos;
//! there is nothing to mutate here (§11.6: no topic, session, retention or cursor mutation,
//! no payload access). With the plane off every route answers 404 with a reason rather
//! than the generic 404, so an operator knows the route exists and why it is empty.
//!
//! The JSON is pretty-printed, as §11.1 asks of messaging routes. The shaping of each body is
//! a pure function over the gathered numbers, tested below.

use super::member_call::MemberCall;
use super::members_gateway;
use super::router::AdminCtx;
use crate::http::{Request, Response};
use crate::messaging::cursor::{
    CURSOR_COMPONENT_BYTES_MAX, CURSOR_TOPIC_BYTES_MAX, PUSH_DISPATCHER_GROUP,
};
use crate::messaging::engine::mesh::{GroupCursors, PartitionStats, StreamError};
use crate::messaging::engine::stats::EngineStats;
use crate::messaging::engine::{Engine, ADMIN_MESH_TIMEOUT_MS, ADMIN_PARTITIONS_MAX};
use crate::messaging::gateway::frame::USER_ID_BYTES_MAX;
use crate::messaging::gateway::{
    GatewayCtx, GatewayStats, ShardCensus, UserPresence, PRESENCE_STATES,
};
use crate::messaging::push::dispatcher::PushStats;
use crate::queue::server::replicated::{ClusterView, SlotStatus};
use serde_json::{json, Map, Value};
use std::rc::Rc;

/// Every route of this file (for telling 405 from 404 and for request metrics).
pub const PATHS: &[&str] = &[
    "/streams",
    "/streams/topic",
    "/streams/cursors",
    "/messaging/overview",
    "/presence",
    "/gateway/stats",
    "/replication",
    "/push/dead-letters",
];

/// What the warning of `/replication` says on a node without replication.
pub const STANDALONE_WARNING: &str = "not replicated: this node keeps the only copy of \
its stream log; losing its disk loses every record and cursor (run it in a cluster to \
replicate them: docs/clustering.md)";

/// What the admin handlers of the messaging plane reach. Present whenever the plane is on,
/// whichever listener the gateway is mounted on.
pub struct MessagingAdmin {
    pub engine: Rc<Engine>,
    /// `None` when `messaging.gateway.enabled` is false.
    pub gateway: Option<Rc<GatewayCtx>>,
    /// The `node` label of the gateway metrics.
    pub node: String,
    /// `messaging.presence.region`: every session of this node is in it (empty: none).
    pub region: String,
    /// How the overview asks other members for their gateway numbers (in a cluster).
    pub members: MemberCall,
}

/// Whether `path` is one of this file's routes.
pub fn handles(path: &str) -> bool {
    PATHS.contains(&path)
}

/// Answers a request to one of [`PATHS`] (auth was checked by the router).
pub async fn route(req: &Request, ctx: &AdminCtx) -> Response {
    if req.method != "GET" && req.method != "HEAD" {
        return Response::error(405, "method not allowed");
    }
    let Some(m) = &ctx.messaging else {
        return Response::error(
            404,
            "the messaging plane is off (messaging.stream.enabled = false)",
        );
    };
    match req.path.as_str() {
        "/streams" => streams(m).await,
        "/streams/topic" => streams_topic(req, m).await,
        "/streams/cursors" => streams_cursors(req, m).await,
        "/gateway/stats" => gateway_stats(m).await,
        "/presence" => presence(req, m).await,
        "/replication" => match replication_of(ctx, m).await {
            Ok(v) => pretty(200, &v),
            Err(e) => unavailable(&e),
        },
        "/messaging/overview" => overview(ctx, m).await,
        "/push/dead-letters" => push_dead_letters(req, m).await,
        _ => Response::error(404, "not found"),
    }
}

/// A JSON body, pretty-printed (§11.1), followed by a newline.
fn pretty(status: u16, value: &Value) -> Response {
    let mut body = serde_json::to_vec_pretty(value).expect("a Value always serialises");
    body.push(b'\n');
    Response::text(status, "application/json", body)
}

fn unavailable(e: &StreamError) -> Response {
    log::warn!("[messaging] admin gather: {e}");
    Response::error(503, &format!("could not gather the numbers: {e}"))
}

// ---- /streams ------------------------------------------------------------------------------

/// Topics whose partitions fit in [`ADMIN_PARTITIONS_MAX`], in name order, and whether some
/// were left out.
pub fn topics_within_budget(topics: Vec<(String, u32)>) -> (Vec<(String, u32)>, bool) {
    let mut budget = ADMIN_PARTITIONS_MAX;
    let mut kept = Vec::with_capacity(topics.len());
    for (name, n) in topics {
        if n as usize > budget {
            return (kept, true);
        }
        budget -= n as usize;
        kept.push((name, n));
    }
    (kept, false)
}

/// `TopicStats` of §11.4 for each topic, from partition numbers sorted by topic.
pub fn topics_json(partitions: &[PartitionStats]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for chunk in partitions.chunk_by(|a, b| a.topic == b.topic) {
        let total: u64 = chunk.iter().map(|p| p.bytes).sum();
        let parts: Vec<Value> = chunk
            .iter()
            .map(|p| {
                json!({
                    "id": p.partition,
                    "first_seq": p.first_seq,
                    "next_seq": p.next_seq,
                    "records": p.next_seq.saturating_sub(p.first_seq),
                    "bytes": p.bytes,
                })
            })
            .collect();
        out.push(json!({"name": chunk[0].topic, "partitions": parts, "total_bytes": total}));
    }
    out
}

/// The body of `/streams` (also the overview's `streams` section).
async fn streams_json(m: &MessagingAdmin) -> Result<Value, StreamError> {
    let all = m.engine.topics();
    let topics_total = all.len();
    let (topics, truncated) = topics_within_budget(all);
    let partitions = m.engine.partition_stats(topics).await?;
    let stats = m.engine.stats().await;
    let mut body = json!({
        "topics": topics_json(&partitions),
        "cursors": {"tracked": stats.cursor_keys},
    });
    if truncated {
        body["truncated"] = json!(true);
        body["topics_total"] = json!(topics_total);
    }
    Ok(body)
}

async fn streams(m: &MessagingAdmin) -> Response {
    match streams_json(m).await {
        Ok(v) => pretty(200, &v),
        Err(e) => unavailable(&e),
    }
}

async fn streams_topic(req: &Request, m: &MessagingAdmin) -> Response {
    let Some(name) = req.query("name").filter(|n| !n.is_empty()) else {
        return Response::error(400, "name is required");
    };
    let Some(count) = m
        .engine
        .topics()
        .into_iter()
        .find(|(t, _)| t == name)
        .map(|(_, n)| n)
    else {
        return Response::error(404, "topic not found");
    };
    match m
        .engine
        .partition_stats(vec![(name.to_string(), count)])
        .await
    {
        Ok(p) => match topics_json(&p).pop() {
            Some(t) => pretty(200, &t),
            None => Response::error(404, "topic not found"),
        },
        Err(e) => unavailable(&e),
    }
}

// ---- /streams/cursors ----------------------------------------------------------------------

/// The parameters of `/streams/cursors`, checked.
#[derive(Debug, PartialEq, Eq)]
pub struct CursorQuery {
    pub topic: String,
    pub partition: u32,
    pub group: String,
}

/// Parses `topic`, `partition` (default 0) and `group` (default `push-dispatcher`).
pub fn cursor_query(
    topic: Option<&str>,
    partition: Option<&str>,
    group: Option<&str>,
) -> Result<CursorQuery, String> {
    let topic = topic.filter(|t| !t.is_empty()).ok_or("topic is required")?;
    if topic.len() > CURSOR_TOPIC_BYTES_MAX {
        return Err(format!(
            "topic is longer than {CURSOR_TOPIC_BYTES_MAX} bytes"
        ));
    }
    crate::messaging::topic::validate_topic(topic).map_err(|e| e.to_string())?;
    let partition = match partition {
        None | Some("") => 0,
        Some(p) => p
            .parse::<u32>()
            .map_err(|_| "partition must be a non-negative integer".to_string())?,
    };
    let group = group
        .filter(|g| !g.is_empty())
        .unwrap_or(PUSH_DISPATCHER_GROUP);
    if group.len() > CURSOR_COMPONENT_BYTES_MAX {
        return Err(format!(
            "group is longer than {CURSOR_COMPONENT_BYTES_MAX} bytes"
        ));
    }
    Ok(CursorQuery {
        topic: topic.to_string(),
        partition,
        group: group.to_string(),
    })
}

/// The body of `/streams/cursors`: `watermark` (slowest member) only with members,
/// `first_seq`/`next_seq` only when the partition exists, `lag` only with both. The lag
/// saturates at 0: a cursor is clamped to `next_seq` when committed, but a partition's
/// state after a crash may still be behind a cursor that was written before it.
pub fn cursors_json(q: &CursorQuery, c: &GroupCursors) -> Value {
    let members: Map<String, Value> = c
        .members
        .iter()
        .map(|(m, seq)| (m.clone(), json!(seq)))
        .collect();
    let mut body = json!({
        "topic": q.topic,
        "partition": q.partition,
        "group": q.group,
        "members": members,
    });
    let watermark = c.members.iter().map(|(_, s)| *s).min();
    if let Some(w) = watermark {
        body["watermark"] = json!(w);
    }
    if let Some((first, next)) = c.bounds {
        body["first_seq"] = json!(first);
        body["next_seq"] = json!(next);
        if let Some(w) = watermark {
            body["lag"] = json!(next.saturating_sub(w));
        }
    }
    body
}

async fn streams_cursors(req: &Request, m: &MessagingAdmin) -> Response {
    let q = match cursor_query(
        req.query("topic"),
        req.query("partition"),
        req.query("group"),
    ) {
        Ok(q) => q,
        Err(e) => return Response::error(400, &e),
    };
    match m
        .engine
        .group_cursors(&q.topic, q.partition, &q.group)
        .await
    {
        Ok(c) => pretty(200, &cursors_json(&q, &c)),
        Err(e) => unavailable(&e),
    }
}

// ---- /push/dead-letters ---------------------------------------------------------------------

/// Most dead letters one `/push/dead-letters` answer lists.
pub const DEAD_LETTERS_PAGE_MAX: usize = 1_000;

/// `from` (a sequence, default the first kept) and `limit` (1..=1000, default 100).
fn dead_letters_query(from: Option<&str>, limit: Option<&str>) -> Result<(u64, usize), String> {
    let from = match from {
        None => 0,
        Some(f) => f
            .parse::<u64>()
            .map_err(|_| format!("from must be a sequence number, not {f:?}"))?,
    };
    let limit = match limit {
        None => 100,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=DEAD_LETTERS_PAGE_MAX).contains(n))
            .ok_or_else(|| format!("limit must be 1..={DEAD_LETTERS_PAGE_MAX}, not {l:?}"))?,
    };
    Ok((from, limit))
}

/// Notifications the push dispatcher gave up on (issue 17 item 5): a page of the
/// dead-letter topic, oldest first, each the notification as the webhook last saw it with
/// its id, attempts and `dropped_at`; `next_seq` is where the next page starts.
async fn push_dead_letters(req: &Request, m: &MessagingAdmin) -> Response {
    use crate::messaging::push::dispatcher::DEAD_LETTER_TOPIC;
    let (from, limit) = match dead_letters_query(req.query("from"), req.query("limit")) {
        Ok(q) => q,
        Err(e) => return Response::error(400, &e),
    };
    match m
        .engine
        .read(DEAD_LETTER_TOPIC, 0, from, limit, false)
        .await
    {
        Ok(page) => {
            let letters: Vec<Value> = page
                .records
                .iter()
                .take(limit)
                .map(|r| {
                    let mut v = serde_json::from_slice::<Value>(&r.payload)
                        .unwrap_or_else(|_| json!({"undecodable": true}));
                    v["seq"] = json!(r.seq);
                    v
                })
                .collect();
            let next = letters
                .last()
                .and_then(|v| v["seq"].as_u64())
                .map_or(page.next_seq.max(from), |s| s + 1);
            pretty(
                200,
                &json!({
                    "topic": DEAD_LETTER_TOPIC,
                    "first_seq": page.first_seq,
                    "next_seq": next,
                    "end_seq": page.next_seq,
                    "dead_letters": letters,
                }),
            )
        }
        Err(e) => unavailable(&e),
    }
}

// ---- gateway, replication, overview --------------------------------------------------------

/// Every shard's gateway numbers added up, and how many shards did not answer.
pub async fn gateway_totals(gw: &GatewayCtx) -> (GatewayStats, usize) {
    let mut total = GatewayStats::default();
    let mut missing = 0;
    for r in gw.reports(ADMIN_MESH_TIMEOUT_MS).await {
        match r {
            Some(s) => total.add(&s),
            None => missing += 1,
        }
    }
    (total, missing)
}

/// The `/gateway/stats` body: the §11.4 fields, plus `shards_missing` when a shard did
/// not answer (its share is then absent from every number).
pub fn gateway_json(total: &GatewayStats, missing: usize) -> Value {
    let mut v = serde_json::to_value(total).expect("plain counters serialise");
    if missing > 0 {
        v["shards_missing"] = json!(missing);
    }
    v
}

async fn gateway_section(m: &MessagingAdmin) -> Option<Value> {
    let gw = m.gateway.as_ref()?;
    let (total, missing) = gateway_totals(gw).await;
    Some(gateway_json(&total, missing))
}

async fn gateway_stats(m: &MessagingAdmin) -> Response {
    match gateway_section(m).await {
        Some(v) => pretty(200, &v),
        None => Response::error(
            404,
            "the gateway is off (messaging.gateway.enabled = false)",
        ),
    }
}

/// `/replication` on a node that does not replicate: says so, never pretends.
pub fn replication_json() -> Value {
    json!({"role": "standalone", "replicated": false, "warning": STANDALONE_WARNING})
}

/// `/replication` of this node: standalone, or with `cluster.enabled` the Raft group of
/// each partition's slot as this node sees it.
async fn replication_of(ctx: &AdminCtx, m: &MessagingAdmin) -> Result<Value, StreamError> {
    let Some(view) = ctx.plane.cluster_view() else {
        return Ok(replication_json());
    };
    let (topics, truncated) = topics_within_budget(m.engine.topics());
    let partitions = m.engine.partition_stats(topics).await?;
    let report = ctx.plane.gather_stats().merged().await;
    let mut v = raft_replication_json(&view, &report.raft, &partitions);
    if truncated {
        v["truncated"] = json!(true);
    }
    Ok(v)
}

/// The messaging plane on the slot groups (docs/clustering.md): per partition, its slot's
/// leader (a member name, `""` while none is known), term, commit and applied index on
/// this node, the entries the furthest-behind follower lacks when this node leads
/// (`follower_lag`, else 0), and this node's copy's `next_seq`.
pub fn raft_replication_json(
    view: &ClusterView,
    raft: &[SlotStatus],
    partitions: &[PartitionStats],
) -> Value {
    let by_slot: std::collections::HashMap<u16, &SlotStatus> =
        raft.iter().map(|s| (s.slot, s)).collect();
    let rows: Vec<Value> = partitions
        .iter()
        .map(|p| {
            let slot = boltq_shards::partition_slot(&p.topic, p.partition);
            let s = by_slot.get(&slot);
            json!({
                "topic": p.topic,
                "partition": p.partition,
                "slot": slot,
                "leader": s.and_then(|s| s.leader).map(|id| view.member_name(id)).unwrap_or_default(),
                "term": s.map_or(0, |s| s.term),
                "commit": s.map_or(0, |s| s.commit),
                "applied": s.map_or(0, |s| s.applied),
                "follower_lag": s.map_or(0, |s| s.lag),
                "next_seq": p.next_seq,
            })
        })
        .collect();
    let led = raft
        .iter()
        .filter(|s| s.leader == Some(view.node_id))
        .count();
    let leaderless = raft.iter().filter(|s| s.leader.is_none()).count();
    json!({
        "role": "raft",
        "replicated": true,
        "node_id": view.name,
        "members": view.members.iter().map(|m| m.1.clone()).collect::<Vec<_>>(),
        "slots": {"hosted": raft.len(), "led": led, "without_leader": leaderless},
        "partitions": rows,
    })
}

/// The overview of §11.4. A section is `null` when its component is off: presence and
/// signals with the gateway, push with `messaging.push.enabled` (or the gateway, whose
/// mesh messages carry the push numbers).
pub fn overview_json(
    streams: Value,
    engine: &EngineStats,
    gateway: Option<Value>,
    census: Option<(&GatewayStats, &CensusTotals, &str, &str)>,
    replication: Value,
) -> Value {
    let (presence, signals, push) = match census {
        Some((g, c, node, region)) => (
            presence_json(c, node, region),
            signals_json(g, c),
            c.push.as_ref().map_or(Value::Null, push_json),
        ),
        None => (Value::Null, Value::Null, Value::Null),
    };
    json!({
        "streams": streams,
        "engine": engine,
        "presence": presence,
        "gateway": gateway.unwrap_or(Value::Null),
        "signals": signals,
        "push": push,
        "replication": replication,
    })
}

/// The overview of this node; in a cluster with the gateway on, also a `cluster` section
/// with every member's gateway numbers and their totals ([`members_gateway`]).
async fn overview(ctx: &AdminCtx, m: &MessagingAdmin) -> Response {
    let streams = match streams_json(m).await {
        Ok(v) => v,
        Err(e) => return unavailable(&e),
    };
    let replication = match replication_of(ctx, m).await {
        Ok(v) => v,
        Err(e) => return unavailable(&e),
    };
    let engine = m.engine.stats().await;
    let Some(gw) = &m.gateway else {
        return pretty(
            200,
            &overview_json(streams, &engine, None, None, replication),
        );
    };
    let (total, missing) = gateway_totals(gw).await;
    let census = census_totals(gw).await;
    let census_part = Some((&total, &census, m.node.as_str(), m.region.as_str()));
    let gateway = gateway_json(&total, missing);
    let cluster = match ctx.plane.cluster_view() {
        Some(view) => {
            let members = members_gateway::gather(&view, gateway.clone(), &m.members).await;
            Some(members_gateway::cluster_gateway_json(&members))
        }
        None => None,
    };
    let mut v = overview_json(streams, &engine, Some(gateway), census_part, replication);
    if let Some(cluster) = cluster {
        v["cluster"] = cluster;
    }
    pretty(200, &v)
}

// ---- /presence -----------------------------------------------------------------------------

/// Every shard's census added up (presence of the users each owns, typing listeners, push).
#[derive(Debug, Default, Clone)]
pub struct CensusTotals {
    pub sessions: u64,
    pub users_online: u64,
    /// In the order of [`PRESENCE_STATES`].
    pub by_state: [u64; 3],
    pub watches: u64,
    pub signal_topics: u64,
    pub signal_listeners: u64,
    /// `None` when push is off.
    pub push: Option<PushStats>,
    /// Shards that did not answer: their share is absent from every number.
    pub shards_missing: usize,
}

fn add_push(total: &mut PushStats, o: &PushStats) {
    total.scanned += o.scanned;
    total.sent += o.sent;
    total.failed += o.failed;
    total.dropped += o.dropped;
    total.suppressed += o.suppressed;
    total.read += o.read;
    total.skipped += o.skipped;
    total.watching += o.watching;
}

/// Adds up shard censuses (`None`: a shard that did not answer).
pub fn add_censuses(shards: &[Option<ShardCensus>]) -> CensusTotals {
    let mut t = CensusTotals::default();
    for s in shards {
        let Some(s) = s else {
            t.shards_missing += 1;
            continue;
        };
        t.sessions += s.sessions;
        t.users_online += s.users_online;
        for (sum, n) in t.by_state.iter_mut().zip(s.by_state) {
            *sum += n;
        }
        t.watches += s.watches;
        t.signal_topics += s.signal_topics;
        t.signal_listeners += s.signal_listeners;
        if let Some(p) = &s.push {
            add_push(t.push.get_or_insert_with(PushStats::default), p);
        }
    }
    t
}

pub async fn census_totals(gw: &GatewayCtx) -> CensusTotals {
    add_censuses(&gw.censuses(ADMIN_MESH_TIMEOUT_MS).await)
}

/// The `/presence` body of §11.4: `users` (online users), `sessions` (bound devices),
/// `by_node`, `by_region` (only with a region configured), `by_state` (devices per
/// state), `watchers` (watch pairs), and `shards_missing` when a shard was silent.
pub fn presence_json(c: &CensusTotals, node: &str, region: &str) -> Value {
    let mut by_state = Map::new();
    for (s, n) in PRESENCE_STATES.iter().zip(c.by_state) {
        by_state.insert(s.as_str().to_string(), json!(n));
    }
    let mut by_region = Map::new();
    if !region.is_empty() {
        by_region.insert(region.to_string(), json!(c.sessions));
    }
    let mut v = json!({
        "users": c.users_online,
        "sessions": c.sessions,
        "by_node": {node: c.sessions},
        "by_region": by_region,
        "by_state": by_state,
        "watchers": c.watches,
    });
    if c.shards_missing > 0 {
        v["shards_missing"] = json!(c.shards_missing);
    }
    v
}

/// The answer of `/presence?user=`.
pub fn user_presence_json(p: &UserPresence) -> Value {
    let devices: Vec<Value> = p
        .devices
        .iter()
        .map(|d| json!({"device_id": d.device, "state": d.state.as_str(), "since_ns": d.since_ns}))
        .collect();
    json!({
        "user_id": p.user,
        "online": p.online,
        "state": p.state.as_str(),
        "devices": devices,
    })
}

/// The overview's `signals` section (§11.4).
pub fn signals_json(g: &GatewayStats, c: &CensusTotals) -> Value {
    json!({
        "published": g.signals_published,
        "delivered": g.signals_out,
        "dropped": g.signal_drops,
        "rate_limited": g.signals_limited,
        "held_back": g.signals_held_back,
        "topics": c.signal_topics,
        "subscribers": c.signal_listeners,
    })
}

/// The overview's `push` section: the §11.4 fields, the two skip counters, and `lag`
/// (pointers read but not settled).
pub fn push_json(p: &PushStats) -> Value {
    json!({
        "scanned": p.scanned,
        "suppressed": p.suppressed,
        "sent": p.sent,
        "failed": p.failed,
        "dropped": p.dropped,
        "watching": p.watching,
        "read": p.read,
        "skipped": p.skipped,
        "lag": crate::messaging::push::unsettled(p),
    })
}

/// Checks the `user` parameter of `/presence`.
pub fn presence_user(user: &str) -> Result<&str, String> {
    if user.is_empty() {
        return Err("user must not be empty".into());
    }
    if user.len() > USER_ID_BYTES_MAX {
        return Err(format!("user is longer than {USER_ID_BYTES_MAX} bytes"));
    }
    Ok(user)
}

async fn presence(req: &Request, m: &MessagingAdmin) -> Response {
    let Some(gw) = &m.gateway else {
        return Response::error(
            404,
            "presence is off: the gateway is off (messaging.gateway.enabled = false)",
        );
    };
    if let Some(user) = req.query("user") {
        let user = match presence_user(user) {
            Ok(u) => u,
            Err(e) => return Response::error(400, &e),
        };
        return match gw.user_presence(user, ADMIN_MESH_TIMEOUT_MS).await {
            Some(p) => pretty(200, &user_presence_json(&p)),
            None => Response::error(503, "the shard owning this user did not answer"),
        };
    }
    let c = census_totals(gw).await;
    pretty(200, &presence_json(&c, &m.node, &m.region))
}

// ---- numbers for /metrics ------------------------------------------------------------------

/// What `/metrics` adds for the messaging plane, gathered from every shard.
#[derive(Debug, Default, Clone)]
pub struct MessagingNumbers {
    pub node: String,
    /// By shard id; `None` for a shard that did not answer.
    pub engine: Vec<Option<EngineStats>>,
    /// Every shard's gateway numbers added up; `None` when the gateway is off.
    pub gateway: Option<GatewayStats>,
    /// Presence, typing listeners and push, added up; `None` when the gateway is off.
    pub census: Option<CensusTotals>,
}

pub async fn gather_numbers(m: &MessagingAdmin) -> MessagingNumbers {
    let (gateway, census) = match &m.gateway {
        Some(gw) => (
            Some(gateway_totals(gw).await.0),
            Some(census_totals(gw).await),
        ),
        None => (None, None),
    };
    MessagingNumbers {
        node: m.node.clone(),
        engine: m.engine.stats_per_shard().await,
        gateway,
        census,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(topic: &str, partition: u32, first: u64, next: u64, bytes: u64) -> PartitionStats {
        PartitionStats {
            topic: topic.into(),
            partition,
            first_seq: first,
            next_seq: next,
            bytes,
        }
    }

    #[test]
    fn topics_group_partitions_and_sum_bytes() {
        let t = topics_json(&[
            part("a", 0, 1, 4, 100),
            part("a", 1, 3, 3, 50),
            part("b", 0, 1, 1, 0),
        ]);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0]["name"], "a");
        assert_eq!(t[0]["total_bytes"], 150);
        assert_eq!(t[0]["partitions"][0]["records"], 3);
        assert_eq!(t[0]["partitions"][1]["records"], 0);
        assert_eq!(t[0]["partitions"][1]["first_seq"], 3);
        assert_eq!(t[1]["partitions"][0]["id"], 0);
        assert_eq!(t[1]["total_bytes"], 0);
    }

    #[test]
    fn the_topic_list_is_cut_at_the_partition_budget() {
        let topics = vec![
            ("a".to_string(), 16),
            ("b".to_string(), ADMIN_PARTITIONS_MAX as u32 - 16),
            ("c".to_string(), 1),
        ];
        let (kept, cut) = topics_within_budget(topics);
        assert!(cut);
        assert_eq!(kept.len(), 2);
        let (kept, cut) = topics_within_budget(vec![("a".to_string(), 1)]);
        assert!(!cut);
        assert_eq!(kept.len(), 1);
    }

    #[test]
    fn cursor_query_defaults_and_rejects() {
        assert_eq!(
            cursor_query(Some("chat.inbox.bob"), None, None),
            Ok(CursorQuery {
                topic: "chat.inbox.bob".into(),
                partition: 0,
                group: PUSH_DISPATCHER_GROUP.into()
            })
        );
        assert_eq!(
            cursor_query(None, None, None),
            Err("topic is required".into())
        );
        assert_eq!(
            cursor_query(Some("t"), Some("-1"), None),
            Err("partition must be a non-negative integer".into())
        );
        assert!(cursor_query(Some("t"), Some("x"), None).is_err());
        assert!(cursor_query(Some("a..b"), None, None).is_err());
        let long = "g".repeat(CURSOR_COMPONENT_BYTES_MAX + 1);
        assert!(cursor_query(Some("t"), None, Some(&long)).is_err());
        assert_eq!(
            cursor_query(Some("t"), Some("3"), Some("user:bob"))
                .unwrap()
                .partition,
            3
        );
    }

    #[test]
    fn cursors_report_watermark_and_saturating_lag() {
        let q = cursor_query(Some("t"), None, Some("user:bob")).unwrap();
        let c = GroupCursors {
            members: vec![("laptop".into(), 10), ("phone".into(), 42)],
            bounds: Some((1, 50)),
        };
        let v = cursors_json(&q, &c);
        assert_eq!(v["watermark"], 10);
        assert_eq!(v["lag"], 40);
        assert_eq!(v["members"]["phone"], 42);
        // A cursor ahead of the partition (state behind after a crash): lag 0, not a wrap.
        let ahead = GroupCursors {
            members: vec![("phone".into(), 60)],
            bounds: Some((1, 50)),
        };
        assert_eq!(cursors_json(&q, &ahead)["lag"], 0);
        // No members: no watermark, no lag; no partition: no bounds.
        let none = GroupCursors::default();
        let v = cursors_json(&q, &none);
        assert!(v.get("watermark").is_none());
        assert!(v.get("lag").is_none());
        assert!(v.get("next_seq").is_none());
        assert_eq!(v["members"], json!({}));
    }

    #[test]
    fn gateway_totals_serialise_every_field_and_flag_missing_shards() {
        let mut a = GatewayStats {
            connections: 2,
            attached: 1,
            ..Default::default()
        };
        a.add(&GatewayStats {
            connections: 3,
            sessions: 4,
            ..Default::default()
        });
        let v = gateway_json(&a, 0);
        assert_eq!(v["connections"], 5);
        assert_eq!(v["sessions"], 4);
        assert_eq!(v["attached"], 1);
        for f in [
            "resumed",
            "auth_failures",
            "forbidden",
            "frames_in",
            "frames_out",
            "records_out",
            "slow_client_drops",
        ] {
            assert_eq!(v[f], 0, "{f}");
        }
        assert!(v.get("shards_missing").is_none());
        assert_eq!(gateway_json(&a, 1)["shards_missing"], 1);
    }

    #[test]
    fn replication_in_a_cluster_names_each_partitions_slot_group() {
        let view = ClusterView {
            node_id: 2,
            name: "n2".into(),
            raft_addr: "h2:9100".into(),
            members: vec![
                (1, "n1".into(), "h1:9100".into()),
                (2, "n2".into(), "h2:9100".into()),
            ],
            clients: Default::default(),
        };
        let slot = boltq_shards::partition_slot("chat.dm.a", 3);
        let other = boltq_shards::partition_slot("chat.dm.b", 0);
        let status = |slot, leader, lag| SlotStatus {
            slot,
            voters: vec![1, 2],
            learners: vec![],
            leader,
            term: 7,
            commit: 40,
            applied: 39,
            lag,
            quiescent: false,
        };
        let raft = [status(slot, Some(2), 5), status(other, None, 0)];
        let part = |topic: &str, partition| PartitionStats {
            topic: topic.into(),
            partition,
            first_seq: 1,
            next_seq: 12,
            bytes: 100,
        };
        let v = raft_replication_json(&view, &raft, &[part("chat.dm.a", 3), part("chat.dm.b", 0)]);
        assert_eq!(v["role"], "raft");
        assert_eq!(v["replicated"], true);
        assert_eq!(
            v["slots"],
            json!({"hosted": 2, "led": 1, "without_leader": 1})
        );
        assert_eq!(
            v["partitions"][0],
            json!({"topic": "chat.dm.a", "partition": 3, "slot": slot, "leader": "n2",
                   "term": 7, "commit": 40, "applied": 39, "follower_lag": 5, "next_seq": 12})
        );
        assert_eq!(v["partitions"][1]["leader"], "", "no leader known");
    }

    #[test]
    fn replication_says_standalone_and_not_replicated() {
        let v = replication_json();
        assert_eq!(v["role"], "standalone");
        assert!(v["warning"].as_str().unwrap().contains("not replicated"));
        let o = overview_json(
            json!({"topics": []}),
            &EngineStats::default(),
            None,
            None,
            replication_json(),
        );
        assert_eq!(o["replication"]["role"], "standalone");
        assert!(o["gateway"].is_null());
        assert!(o["presence"].is_null());
        assert!(o["signals"].is_null());
        assert!(o["push"].is_null());
    }

    fn shard(sessions: u64, by_state: [u64; 3], push: Option<PushStats>) -> ShardCensus {
        ShardCensus {
            sessions,
            users_online: sessions.min(1),
            by_state,
            watches: 1,
            signal_topics: 1,
            signal_listeners: 2,
            push,
        }
    }

    #[test]
    fn censuses_add_up_and_count_silent_shards() {
        let p = PushStats {
            scanned: 4,
            sent: 1,
            failed: 2,
            ..Default::default()
        };
        let t = add_censuses(&[
            Some(shard(2, [1, 1, 0], Some(p.clone()))),
            None,
            Some(shard(1, [0, 0, 1], Some(p))),
        ]);
        assert_eq!(t.sessions, 3);
        assert_eq!(t.users_online, 2);
        assert_eq!(t.by_state, [1, 1, 1]);
        assert_eq!(t.signal_listeners, 4);
        assert_eq!(t.shards_missing, 1);
        let push = t.push.as_ref().unwrap();
        assert_eq!((push.scanned, push.sent, push.failed), (8, 2, 4));
        // Push off on every shard: no push section at all, not zeros.
        assert!(add_censuses(&[Some(shard(0, [0; 3], None))]).push.is_none());
    }

    #[test]
    fn presence_body_has_the_spec_fields() {
        let t = add_censuses(&[Some(shard(2, [1, 1, 0], None)), None]);
        let v = presence_json(&t, "n1", "eu");
        assert_eq!(v["users"], 1);
        assert_eq!(v["sessions"], 2);
        assert_eq!(v["by_node"]["n1"], 2);
        assert_eq!(v["by_region"]["eu"], 2);
        assert_eq!(v["by_state"], json!({"online": 1, "away": 1, "offline": 0}));
        assert_eq!(v["watchers"], 1);
        assert_eq!(v["shards_missing"], 1);
        // No region configured: sessions without one are not counted in by_region.
        assert_eq!(presence_json(&t, "n1", "")["by_region"], json!({}));
        assert!(presence_user("").is_err());
        assert!(presence_user(&"u".repeat(USER_ID_BYTES_MAX + 1)).is_err());
        assert_eq!(presence_user("bob"), Ok("bob"));
    }

    #[test]
    fn overview_fills_presence_signals_and_push() {
        use crate::messaging::presence::PresenceState;
        let g = GatewayStats {
            signals_published: 3,
            signals_out: 5,
            signal_drops: 1,
            signals_limited: 2,
            signals_held_back: 4,
            ..Default::default()
        };
        let p = PushStats {
            scanned: 5,
            sent: 2,
            suppressed: 1,
            ..Default::default()
        };
        let t = add_censuses(&[Some(shard(1, [0, 1, 0], Some(p)))]);
        let o = overview_json(
            json!({}),
            &EngineStats::default(),
            None,
            Some((&g, &t, "n", "")),
            replication_json(),
        );
        assert_eq!(o["presence"]["sessions"], 1);
        assert_eq!(
            o["signals"],
            json!({"published": 3, "delivered": 5, "dropped": 1, "rate_limited": 2,
                   "held_back": 4, "topics": 1, "subscribers": 2})
        );
        assert_eq!(o["push"]["sent"], 2);
        assert_eq!(o["push"]["lag"], 2);
        let u = user_presence_json(&UserPresence {
            user: "bob".into(),
            online: true,
            state: PresenceState::Away,
            devices: vec![crate::messaging::gateway::DevicePresence {
                device: "phone".into(),
                state: PresenceState::Away,
                since_ns: 7,
            }],
        });
        assert_eq!(u["state"], "away");
        assert_eq!(u["devices"][0]["device_id"], "phone");
        assert_eq!(u["devices"][0]["since_ns"], 7);
    }
}
