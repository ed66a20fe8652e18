//! `/metrics`: Prometheus text (default) or JSON (`Accept: application/json`), built at
//! scrape time from every shard's report: broker counters and gauges from the slots, and
//! each shard's registry (latency histograms, HTTP and mesh counters), merged.
//!
//! The exposition lines themselves are written by [`super::prometheus`].

use super::messaging_routes::MessagingNumbers;
use super::prometheus::{Kind, TextWriter};
use crate::http::Response;
use crate::messaging::engine::{SEND_DELIVERED_METRIC, SEND_DURABLE_METRIC};
use crate::queue::server::dispatch::{CONSUME_WAIT_METRIC, PUBLISH_LATENCY_METRIC};
use crate::queue::server::mesh::ShardReport;
use boltq_shards::metrics::MetricsSnapshot;
use serde_json::{json, Map, Value};

/// Queues listed one by one in `boltq_queue_ready_messages{queue=…}`; beyond this the
/// per-queue series stop (the totals stay exact), so a scrape stays bounded.
pub const QUEUE_SERIES_MAX: usize = 1000;

/// Upper bounds (µs) of the buckets of the messaging latency histograms, exported in
/// seconds. From 0.5 ms (a group commit on a fast disk) to 10 s (a stalled device).
pub const LATENCY_BUCKETS_US: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];

/// Registry histograms (µs) exported as Prometheus histograms in seconds, not summaries.
const SECONDS_HISTOGRAMS: [&str; 2] = [SEND_DURABLE_METRIC, SEND_DELIVERED_METRIC];

/// The v1 counters, in v1's order, with their values.
fn v1_counters(r: &ShardReport) -> [(&'static str, &'static str, u64); 13] {
    let c = &r.counters;
    let metric = |name: &str| r.metrics.counter(name, &[]).unwrap_or(0);
    let snapshots = metric(crate::queue::server::replicated::SNAPSHOTS_METRIC);
    [
        (
            "messages_published",
            "Messages published (work queues, topics, exchanges)",
            c.published + c.published_topic,
        ),
        (
            "messages_consumed",
            "Messages handed to consumers",
            c.consumed,
        ),
        ("messages_acked", "Messages acknowledged", c.acked),
        (
            "messages_nacked",
            "Messages negatively acknowledged",
            c.nacked,
        ),
        (
            "retry_count",
            "Redeliveries after a NACK or ack timeout",
            c.retried,
        ),
        (
            "dead_letter_count",
            "Messages moved to a dead-letter queue",
            c.dead_lettered,
        ),
        (
            "raft_apply_count",
            "Raft entries applied by this node's replicas",
            metric(crate::queue::server::replicated::APPLIED_METRIC),
        ),
        ("snapshot_count", "Queue slot snapshots taken", snapshots),
        (
            "leader_changes",
            "Raft leader changes this node's replicas saw",
            metric(crate::queue::server::replicated::LEADER_CHANGES_METRIC),
        ),
        (
            "cache_hits",
            "Cache reads that found their key",
            metric("boltq_cache_hits"),
        ),
        (
            "cache_misses",
            "Cache reads that did not",
            metric("boltq_cache_misses"),
        ),
        ("cache_sets", "Cache writes", metric("boltq_cache_sets")),
        (
            "cache_deletes",
            "Cache deletes that removed a key",
            metric("boltq_cache_deletes"),
        ),
    ]
}

/// Gauges of the queue plane now.
fn gauges(r: &ShardReport) -> Vec<(&'static str, &'static str, i64)> {
    let s = &r.stats;
    vec![
        (
            "boltq_ready_messages",
            "Ready messages in all work queues",
            s.queues.values().sum::<u64>() as i64,
        ),
        (
            "boltq_pending_messages",
            "Consumed, not yet acked messages",
            s.pending_count as i64,
        ),
        (
            "boltq_delayed_messages",
            "Delayed or retry-waiting messages",
            s.delayed_count as i64,
        ),
        (
            "boltq_dead_letter_messages",
            "Messages in dead-letter queues",
            s.dead_letters.values().sum::<u64>() as i64,
        ),
        ("boltq_queues", "Work queues", s.queues.len() as i64),
        (
            "boltq_storage_bytes",
            "Bytes of every log (segments and in-memory tails)",
            r.storage_bytes as i64,
        ),
        (
            "boltq_journal_commit_rounds_total",
            "Group-commit rounds of the shard journals (one write each)",
            r.journal_commit_rounds as i64,
        ),
        (
            "boltq_journal_fsyncs_total",
            "fdatasyncs of the shard journals (one per round under fsync = always)",
            r.journal_syncs as i64,
        ),
        (
            "boltq_journal_files_created_inline_total",
            "Journal files a commit round had to create and zero itself (no pre-zeroed spare)",
            r.journal_files_created_inline as i64,
        ),
        (
            "boltq_tcp_connections",
            "Open TCP connections",
            r.connections as i64,
        ),
        (
            "boltq_scrape_shards_missing",
            "Shards whose numbers are missing from this scrape (they did not answer in time)",
            r.shards_missing as i64,
        ),
        (
            "boltq_publish_rejected_full_total",
            "Publishes refused because the queue was full",
            r.counters.rejected_full as i64,
        ),
        (
            "boltq_messages_expired_total",
            "Messages discarded when their TTL passed",
            r.counters.expired as i64,
        ),
        (
            "boltq_ack_timeouts_total",
            "Consumed messages whose ack timeout passed",
            r.counters.ack_timeouts as i64,
        ),
        (
            "boltq_queues_refused_total",
            "Commands refused because they would have created a queue past queue.queues_per_slot_max",
            r.counters.queues_refused as i64,
        ),
        (
            "boltq_queues_forgotten_total",
            "Queues forgotten once idle and empty (queue.idle_queue_ttl)",
            r.counters.queues_forgotten as i64,
        ),
        (
            "boltq_pushes_total",
            "Pub/sub deliveries to live subscribers",
            r.counters.pushed as i64,
        ),
    ]
}

pub fn render(
    report: &ShardReport,
    messaging: Option<&MessagingNumbers>,
    as_json: bool,
) -> Response {
    if as_json {
        let mut v = json_form(report);
        if let Some(m) = messaging {
            v["messaging"] = messaging_json(report, m);
        }
        return Response::json(200, &v);
    }
    let mut text = text_form(report);
    let mut w = TextWriter::new(&mut text);
    if let Some(m) = messaging {
        messaging_text(&mut w, report, m);
    }
    process_text(&mut w, &process_series());
    Response::text(200, "text/plain; version=0.0.4; charset=utf-8", text)
}

/// Numbers of the whole server process from procfs, read at scrape time, so a load test can
/// compare them before and after a run: resident memory, and the bytes the process caused to
/// be written to storage (`write_bytes` of `/proc/self/io`: journal, segments and the
/// journal's pre-zeroing alike). A procfs file that cannot be read leaves its series out
/// rather than reporting a made-up zero.
///
/// Plain std reads on the shard: procfs files are produced in memory by the kernel at read
/// time and never wait on a device, unlike the data files the shards only touch through
/// io_uring, and a scrape reads two small files.
fn process_series() -> Vec<(&'static str, &'static str, Kind, u64)> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let mut series = Vec::new();
    if let Some(kib) = read("/proc/self/status").and_then(|s| proc_field(&s, "VmRSS:")) {
        series.push((
            "process_resident_memory_bytes",
            "Resident memory of the server process",
            Kind::Gauge,
            kib * 1024,
        ));
    }
    if let Some(bytes) = read("/proc/self/io").and_then(|s| proc_field(&s, "write_bytes:")) {
        series.push((
            "process_disk_write_bytes_total",
            "Bytes the server process caused to be written to storage (procfs write_bytes)",
            Kind::Counter,
            bytes,
        ));
    }
    series
}

/// The first number after `key` at the start of a line of a procfs text file.
fn proc_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

fn process_text(w: &mut TextWriter, series: &[(&str, &str, Kind, u64)]) {
    for (name, help, kind, value) in series {
        w.single(name, help, *kind, &[], value);
    }
}

fn text_form(r: &ShardReport) -> String {
    let mut out = String::with_capacity(8 * 1024);
    let mut w = TextWriter::new(&mut out);
    for (name, help, value) in v1_counters(r) {
        w.single(&format!("boltq_{name}"), help, Kind::Counter, &[], value);
    }
    for (name, help, value) in gauges(r) {
        w.single(name, help, Kind::by_name(name), &[], value);
    }
    let ready = "boltq_queue_ready_messages";
    w.family(ready, Some("Ready messages per work queue"), Kind::Gauge);
    for (queue, n) in r.stats.queues.iter().take(QUEUE_SERIES_MAX) {
        w.sample(ready, &[("queue", queue)], n);
    }
    // The maps are ordered by name, then labels, so the series of one name are adjacent.
    for (key, value) in &r.metrics.counters {
        let v1_named = [
            crate::queue::server::replicated::APPLIED_METRIC,
            crate::queue::server::replicated::LEADER_CHANGES_METRIC,
        ];
        if key.name == crate::queue::server::replicated::SNAPSHOTS_METRIC
            || key.name.starts_with("boltq_cache_")
            || v1_named.contains(&key.name.as_str())
        {
            continue; // reported under their v1 names above
        }
        w.family(&key.name, None, Kind::Counter);
        w.sample(&key.name, &pairs(&key.labels), value);
    }
    for (key, value) in &r.metrics.gauges {
        w.family(&key.name, None, Kind::Gauge);
        w.sample(&key.name, &pairs(&key.labels), value);
    }
    for (key, h) in &r.metrics.histograms {
        if SECONDS_HISTOGRAMS.contains(&key.name.as_str()) {
            continue; // histograms in seconds, with the messaging numbers
        }
        let labels = pairs(&key.labels);
        w.family(&key.name, None, Kind::Summary);
        for q in [0.5, 0.9, 0.99, 0.999] {
            let quantile = q.to_string();
            let mut l = labels.clone();
            l.push(("quantile", &quantile));
            w.sample(&key.name, &l, h.value_at_quantile(q));
        }
        let sum = (h.mean() * h.len() as f64).round() as u64;
        w.sample(&format!("{}_sum", key.name), &labels, sum);
        w.sample(&format!("{}_count", key.name), &labels, h.len());
    }
    out
}

/// Owned label pairs as the writer takes them.
fn pairs(labels: &[(String, String)]) -> Vec<(&str, &str)> {
    labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Gateway counters and gauges of spec §13.1 (and the improvements it asks for).
fn gateway_series(
    g: &crate::messaging::gateway::GatewayStats,
) -> [(&'static str, &'static str, u64); 14] {
    [
        (
            "boltq_gateway_attached",
            "Sessions holding a socket",
            g.attached,
        ),
        (
            "boltq_gateway_sessions",
            "Sessions tracked: attached and resumable",
            g.sessions,
        ),
        (
            "boltq_gateway_connections_total",
            "Accepted gateway upgrades",
            g.connections,
        ),
        (
            "boltq_gateway_resumed_total",
            "Successful session resumes",
            g.resumed,
        ),
        (
            "boltq_gateway_auth_failures_total",
            "Credentials rejected before the upgrade",
            g.auth_failures,
        ),
        (
            "boltq_gateway_forbidden_total",
            "Operations denied by the ACL",
            g.forbidden,
        ),
        (
            "boltq_gateway_slow_client_drops_total",
            "Connections closed as slow readers",
            g.slow_client_drops,
        ),
        (
            "boltq_gateway_records_out_total",
            "Records delivered in live stream batches",
            g.records_out,
        ),
        (
            "boltq_gateway_frames_in_total",
            "Frames read after hello",
            g.frames_in,
        ),
        (
            "boltq_gateway_frames_out_total",
            "Frames handed to outbound queues",
            g.frames_out,
        ),
        (
            "boltq_gateway_sends_total",
            "Send operations accepted by the gateway",
            g.sends,
        ),
        (
            "boltq_relay_frames_sent_total",
            "Presence, typing and session frames sent to the other nodes of the cluster",
            g.relay_frames_out,
        ),
        (
            "boltq_relay_frames_received_total",
            "Presence, typing and session frames taken from the other nodes",
            g.relay_frames_in,
        ),
        (
            "boltq_relay_frames_refused_total",
            "Frames from the other nodes refused as unreadable",
            g.relay_refused,
        ),
    ]
}

/// Presence and typing series of the node (label `node`): the §13.1 presence gauge and the
/// signal counters it asks for. Sessions are summed over shards: each user lives on one.
fn presence_series(
    g: &crate::messaging::gateway::GatewayStats,
    c: &super::messaging_routes::CensusTotals,
) -> [(&'static str, &'static str, u64); 8] {
    [
        (
            "boltq_presence_sessions_local",
            "Presence sessions (bound devices) held on this node",
            c.sessions,
        ),
        (
            "boltq_presence_online_users",
            "Users with at least one bound device",
            c.users_online,
        ),
        (
            "boltq_presence_watches",
            "Live presence watches (watched user, watching connection)",
            c.watches,
        ),
        (
            "boltq_signals_published_total",
            "Typing signals accepted and routed to their listeners",
            g.signals_published,
        ),
        (
            "boltq_signals_delivered_total",
            "Signal frames queued to listeners",
            g.signals_out,
        ),
        (
            "boltq_signals_dropped_total",
            "Signal frames dropped on full outbound queues",
            g.signal_drops,
        ),
        (
            "boltq_signals_rate_limited_total",
            "Typing requests refused by the per-user rate limit",
            g.signals_limited,
        ),
        (
            "boltq_signals_held_back_total",
            "Signals a topic's owner did not deliver: their sender passed its rate on the topic across nodes",
            g.signals_held_back,
        ),
    ]
}

/// Offline-push series of the node (label `node`), summed over the shards' dispatchers.
fn push_series(
    p: &crate::messaging::push::dispatcher::PushStats,
) -> [(&'static str, &'static str, u64); 6] {
    [
        (
            "boltq_push_scanned_total",
            "Inbox pointers read by the push dispatchers",
            p.scanned,
        ),
        (
            "boltq_push_sent_total",
            "Notifications acknowledged by the webhook (2xx)",
            p.sent,
        ),
        (
            "boltq_push_failed_total",
            "Webhook attempts that failed (each retry counts)",
            p.failed,
        ),
        (
            "boltq_push_dropped_total",
            "Notifications given up on after the last attempt (now in push.dead_letters)",
            p.dropped,
        ),
        (
            "boltq_push_suppressed_total",
            "Notifications skipped: the user had a live session",
            p.suppressed,
        ),
        (
            "boltq_push_lag_records",
            "Pointers read by the push dispatchers and not settled yet",
            crate::messaging::push::unsettled(p),
        ),
    ]
}

/// Stream-engine series per shard (label `shard`).
fn engine_shard_series(
    e: &crate::messaging::engine::stats::EngineStats,
) -> [(&'static str, &'static str, u64); 14] {
    [
        (
            "boltq_stream_appends_total",
            "Client-facing records appended and durable",
            e.appends,
        ),
        (
            "boltq_stream_pointer_appends_total",
            "Inbox pointers appended (fan-out on write)",
            e.pointer_appends,
        ),
        (
            "boltq_stream_pointer_failures_total",
            "Inbox pointers that could not be written",
            e.pointer_failures,
        ),
        (
            "boltq_stream_pointer_retries_total",
            "Inbox pointer appends tried again after one got no outcome (a leader change)",
            e.pointer_retries,
        ),
        (
            "boltq_stream_fan_outs_total",
            "In a cluster: sends whose inbox pointers this node began writing as the leader of their conversation's slot",
            e.fan_outs,
        ),
        (
            "boltq_stream_fan_outs_resumed_total",
            "Of those, sends taken over from the slot's outbox (an earlier leader did not report them written)",
            e.fan_outs_resumed,
        ),
        (
            "boltq_stream_outbox_sends",
            "In a cluster: sends in the outboxes of the slots this node leads, their inbox pointers not yet reported written",
            e.outbox_sends,
        ),
        (
            "boltq_stream_duplicates_total",
            "Idempotent sends answered from the dedup table",
            e.duplicates,
        ),
        (
            "boltq_stream_cursor_commits_total",
            "Cursor commits",
            e.cursor_commits,
        ),
        (
            "boltq_stream_tail_pending_records",
            "Records appended, not yet durable (the tail readers cannot see yet)",
            e.pending_records,
        ),
        (
            "boltq_stream_partitions_incomplete",
            "Partitions whose copy on this node has a hole and refuses reads until filled",
            e.partitions_incomplete,
        ),
        (
            "boltq_stream_records_skipped_total",
            "Records of a hole no peer still had (removed by retention): the copy restarted past them",
            e.records_skipped,
        ),
        (
            "boltq_stream_copies_filled_total",
            "Partition copies filled from peers after a snapshot caught this node up",
            e.copies_filled,
        ),
        (
            "boltq_stream_records_filled_total",
            "Records copied from peers to fill holes",
            e.records_filled,
        ),
    ]
}

/// The messaging plane's part of the text exposition: gateway series labelled `node`,
/// engine series labelled `shard`, process-wide gauges, and the two latency histograms.
fn messaging_text(w: &mut TextWriter, r: &ShardReport, m: &MessagingNumbers) {
    let node = [("node", m.node.as_str())];
    if let Some(g) = &m.gateway {
        for (name, help, value) in gateway_series(g) {
            w.single(name, help, Kind::by_name(name), &node, value);
        }
        if let Some(c) = &m.census {
            for (name, help, value) in presence_series(g, c) {
                w.single(name, help, Kind::by_name(name), &node, value);
            }
            if let Some(p) = &c.push {
                for (name, help, value) in push_series(p) {
                    w.single(name, help, Kind::by_name(name), &node, value);
                }
            }
        }
    }
    let shards: Vec<(String, &crate::messaging::engine::stats::EngineStats)> = m
        .engine
        .iter()
        .enumerate()
        .filter_map(|(i, e)| e.as_ref().map(|e| (i.to_string(), e)))
        .collect();
    for (i, (name, help, _)) in engine_shard_series(&Default::default())
        .into_iter()
        .enumerate()
    {
        w.family(name, Some(help), Kind::by_name(name));
        for (shard, e) in &shards {
            w.sample(name, &[("shard", shard)], engine_shard_series(e)[i].2);
        }
    }
    let mut total = crate::messaging::engine::stats::EngineStats::default();
    for (_, e) in &shards {
        total.add(e);
    }
    let missing = m.engine.len() - shards.len();
    for (name, help, value) in [
        ("boltq_stream_topics", "Stream topics", total.topics),
        (
            "boltq_stream_partitions_open",
            "Partitions open on their owner shards",
            total.partitions_open,
        ),
        (
            "boltq_stream_cursor_keys",
            "Cursors tracked",
            total.cursor_keys,
        ),
        (
            "boltq_stream_scrape_shards_missing",
            "Shards whose stream numbers are missing from this scrape",
            missing as u64,
        ),
    ] {
        w.single(name, help, Kind::Gauge, &[], value);
    }
    for (name, help) in [
        (
            SEND_DURABLE_METRIC,
            "Append to durable, seconds (the engine's append path)",
        ),
        (
            SEND_DELIVERED_METRIC,
            "Record timestamp to its frame queued for a device, seconds",
        ),
    ] {
        histogram_seconds(w, name, help, &r.metrics);
    }
}

/// One histogram (recorded in µs) in Prometheus histogram form, in seconds. Bucket
/// counts are exact to the histogram's precision (1 %): a value counts in the first
/// bucket whose bound is at or above the lowest value it is indistinguishable from.
fn histogram_seconds(w: &mut TextWriter, name: &str, help: &str, snapshot: &MetricsSnapshot) {
    let Some(h) = snapshot.histogram(name, &[]) else {
        return;
    };
    w.family(name, Some(help), Kind::Histogram);
    let bucket = format!("{name}_bucket");
    let mut counts = [0u64; LATENCY_BUCKETS_US.len()];
    for v in h.iter_recorded() {
        let lowest = h.lowest_equivalent(v.value_iterated_to());
        if let Some(i) = LATENCY_BUCKETS_US.iter().position(|b| lowest <= *b) {
            counts[i] += v.count_at_value();
        }
    }
    let mut cumulative = 0u64;
    for (bound, n) in LATENCY_BUCKETS_US.iter().zip(counts) {
        cumulative += n;
        let le = (*bound as f64 / 1e6).to_string();
        w.sample(&bucket, &[("le", &le)], cumulative);
    }
    w.sample(&bucket, &[("le", "+Inf")], h.len());
    let sum_s = h.mean() * h.len() as f64 / 1e6;
    w.sample(&format!("{name}_sum"), &[], sum_s);
    w.sample(&format!("{name}_count"), &[], h.len());
}

fn messaging_json(r: &ShardReport, m: &MessagingNumbers) -> Value {
    let mut total = crate::messaging::engine::stats::EngineStats::default();
    for e in m.engine.iter().flatten() {
        total.add(e);
    }
    let mut latency = Map::new();
    for (metric, key) in [
        (SEND_DURABLE_METRIC, "send_durable_us"),
        (SEND_DELIVERED_METRIC, "send_delivered_us"),
    ] {
        if let Some(h) = r.metrics.histogram(metric, &[]) {
            latency.insert(
                key.into(),
                json!({
                    "count": h.len(),
                    "p50": h.value_at_quantile(0.5),
                    "p99": h.value_at_quantile(0.99),
                    "max": h.max(),
                }),
            );
        }
    }
    let (presence, push) = match (&m.gateway, &m.census) {
        (Some(g), Some(c)) => (
            presence_series(g, c)
                .iter()
                .map(|(n, _, v)| (n.to_string(), json!(v)))
                .collect::<Map<String, Value>>()
                .into(),
            c.push.as_ref().map_or(Value::Null, |p| {
                push_series(p)
                    .iter()
                    .map(|(n, _, v)| (n.to_string(), json!(v)))
                    .collect::<Map<String, Value>>()
                    .into()
            }),
        ),
        _ => (Value::Null, Value::Null),
    };
    json!({
        "node": m.node,
        "gateway": m.gateway,
        "presence": presence,
        "push": push,
        "engine": total,
        "engine_per_shard": m.engine,
        "latency": latency,
    })
}

fn json_form(r: &ShardReport) -> Value {
    let mut o = Map::new();
    for (name, _, value) in v1_counters(r) {
        o.insert(name.to_string(), json!(value));
    }
    for (name, _, value) in gauges(r) {
        o.insert(name.trim_start_matches("boltq_").to_string(), json!(value));
    }
    o.insert("connections".into(), json!(r.connections));
    for (name, _, _, value) in process_series() {
        o.insert(name.into(), json!(value));
    }
    for (metric, key) in [
        (PUBLISH_LATENCY_METRIC, "publish_latency_us"),
        (CONSUME_WAIT_METRIC, "consume_wait_us"),
    ] {
        let Some(h) = r.metrics.histogram(metric, &[]) else {
            continue;
        };
        o.insert(
            key.into(),
            json!({
                "count": h.len(),
                "p50": h.value_at_quantile(0.5),
                "p90": h.value_at_quantile(0.9),
                "p99": h.value_at_quantile(0.99),
                "p999": h.value_at_quantile(0.999),
                "max": h.max(),
            }),
        );
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_series_come_from_procfs() {
        let status = "Name:\tboltq\nVmPeak:\t  9 kB\nVmRSS:\t    1976 kB\n";
        assert_eq!(proc_field(status, "VmRSS:"), Some(1976));
        assert_eq!(
            proc_field("rchar: 5\nwrite_bytes: 4096\n", "write_bytes:"),
            Some(4096)
        );
        assert_eq!(proc_field("VmRSS:\tlots\n", "VmRSS:"), None);
        assert_eq!(proc_field("", "VmRSS:"), None);
        let mut text = String::new();
        process_text(&mut TextWriter::new(&mut text), &process_series());
        // This test process is alive, so its resident memory is above zero.
        let rss = proc_field(&text, "process_resident_memory_bytes ").unwrap();
        assert!(rss > 0, "{text}");
        assert!(text.contains("# TYPE process_resident_memory_bytes gauge\n"));
    }

    #[test]
    fn text_keeps_v1_names_and_order_and_escapes_labels() {
        let mut r = ShardReport::default();
        r.counters.published = 3;
        r.counters.published_topic = 2;
        r.stats.queues.insert("a\"b".into(), 7);
        let text = text_form(&r);
        let names: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("# TYPE boltq_") && l.ends_with(" counter"))
            .take(13)
            .map(|l| l.split_whitespace().nth(2).unwrap())
            .collect();
        assert_eq!(names[0], "boltq_messages_published");
        assert_eq!(names[12], "boltq_cache_deletes");
        assert!(text.contains("\nboltq_messages_published 5\n"));
        let mut types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        let n = types.len();
        types.sort();
        types.dedup();
        assert_eq!(types.len(), n, "one TYPE line per metric name");
        assert!(text.contains("boltq_queue_ready_messages{queue=\"a\\\"b\"} 7"));
        let json = json_form(&r);
        assert_eq!(json["messages_published"], 5);
        assert_eq!(json["ready_messages"], 7);
    }

    #[test]
    fn messaging_series_and_latency_histograms_in_seconds() {
        use crate::messaging::engine::stats::EngineStats;
        use crate::messaging::gateway::GatewayStats;
        let registry = boltq_shards::metrics::Registry::default();
        let h = registry.histogram(SEND_DURABLE_METRIC, &[]);
        for us in [400, 1_000, 3_000, 20_000_000] {
            h.record(us);
        }
        registry.histogram(SEND_DELIVERED_METRIC, &[]).record(700);
        let r = ShardReport {
            metrics: registry.snapshot(),
            ..Default::default()
        };
        let m = MessagingNumbers {
            node: "n\"1".into(),
            engine: vec![
                Some(EngineStats {
                    appends: 2,
                    topics: 3,
                    ..Default::default()
                }),
                None,
            ],
            gateway: Some(GatewayStats {
                connections: 5,
                attached: 1,
                signals_limited: 4,
                relay_frames_in: 9,
                ..Default::default()
            }),
            census: Some(super::super::messaging_routes::CensusTotals {
                sessions: 3,
                users_online: 2,
                push: Some(crate::messaging::push::dispatcher::PushStats {
                    scanned: 6,
                    sent: 2,
                    failed: 1,
                    ..Default::default()
                }),
                ..Default::default()
            }),
        };
        let text = String::from_utf8(render(&r, Some(&m), false).body).unwrap();
        assert!(text.contains("boltq_gateway_connections_total{node=\"n\\\"1\"} 5\n"));
        assert!(text.contains("# TYPE boltq_gateway_attached gauge\n"));
        assert!(text.contains("# TYPE boltq_relay_frames_received_total counter\n"));
        assert!(text.contains("boltq_relay_frames_received_total{node=\"n\\\"1\"} 9\n"));
        assert!(text.contains("# TYPE boltq_presence_sessions_local gauge\n"));
        assert!(text.contains("boltq_presence_sessions_local{node=\"n\\\"1\"} 3\n"));
        assert!(text.contains("boltq_presence_online_users{node=\"n\\\"1\"} 2\n"));
        assert!(text.contains("# TYPE boltq_signals_rate_limited_total counter\n"));
        assert!(text.contains("boltq_signals_rate_limited_total{node=\"n\\\"1\"} 4\n"));
        assert!(text.contains("boltq_push_sent_total{node=\"n\\\"1\"} 2\n"));
        assert!(text.contains("boltq_push_failed_total{node=\"n\\\"1\"} 1\n"));
        assert!(text.contains("boltq_push_lag_records{node=\"n\\\"1\"} 4\n"));
        assert!(text.contains("boltq_stream_appends_total{shard=\"0\"} 2\n"));
        assert!(
            !text.contains("shard=\"1\""),
            "a silent shard has no series"
        );
        assert!(text.contains("boltq_stream_scrape_shards_missing 1\n"));
        assert!(text.contains("boltq_stream_topics 3\n"));
        let d = SEND_DURABLE_METRIC;
        assert!(text.contains(&format!("# TYPE {d} histogram\n")));
        assert!(
            !text.contains(&format!("{d}{{quantile")),
            "not also a summary"
        );
        assert!(text.contains(&format!("{d}_bucket{{le=\"0.0005\"}} 1\n")));
        assert!(text.contains(&format!("{d}_bucket{{le=\"0.001\"}} 2\n")));
        assert!(text.contains(&format!("{d}_bucket{{le=\"0.005\"}} 3\n")));
        assert!(text.contains(&format!("{d}_bucket{{le=\"10\"}} 3\n")));
        assert!(text.contains(&format!("{d}_bucket{{le=\"+Inf\"}} 4\n")));
        assert!(text.contains(&format!("{d}_count 4\n")));
        let sum = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{d}_sum ")))
            .unwrap()
            .parse::<f64>()
            .unwrap();
        assert!((sum - 20.0044).abs() < 0.3, "{sum}");
        assert!(text.contains(&format!("{SEND_DELIVERED_METRIC}_count 1\n")));
        let mut types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        let n = types.len();
        types.sort();
        types.dedup();
        assert_eq!(types.len(), n, "one TYPE line per metric name");
        let json: Value = serde_json::from_slice(&render(&r, Some(&m), true).body).unwrap();
        assert_eq!(json["messaging"]["gateway"]["connections"], 5);
        assert_eq!(json["messaging"]["push"]["boltq_push_scanned_total"], 6);
        assert_eq!(
            json["messaging"]["presence"]["boltq_presence_sessions_local"],
            3
        );
        assert_eq!(json["messaging"]["latency"]["send_durable_us"]["count"], 4);
    }

    /// A report with every kind of series: v1 counters, gauges, labelled registry counters
    /// and gauges, a summary, the seconds histograms and the messaging numbers.
    fn rich_report() -> (ShardReport, MessagingNumbers) {
        use crate::messaging::engine::stats::EngineStats;
        use crate::messaging::gateway::GatewayStats;
        let registry = boltq_shards::metrics::Registry::default();
        registry
            .counter("boltq_http_requests_total", &[("route", "/metrics")])
            .add(3);
        registry
            .counter("boltq_http_requests_total", &[("route", "/q\"x")])
            .add(1);
        registry.counter("boltq_cache_hits", &[]).add(9);
        registry.counter("boltq_snapshots_total", &[]).add(2);
        registry
            .gauge("boltq_mesh_queue_depth", &[("peer", "1")])
            .set(-4);
        let h = registry.histogram(PUBLISH_LATENCY_METRIC, &[("shard", "0")]);
        for us in [10, 20, 3_000] {
            h.record(us);
        }
        registry.histogram(SEND_DURABLE_METRIC, &[]).record(1_500);
        let mut r = ShardReport {
            metrics: registry.snapshot(),
            storage_bytes: 4096,
            connections: 2,
            ..Default::default()
        };
        r.counters.published = 3;
        r.counters.expired = 1;
        r.stats.queues.insert("a\\b\nc".into(), 7);
        r.stats.queues.insert("jobs".into(), 0);
        let m = MessagingNumbers {
            node: "n1".into(),
            engine: vec![
                None,
                Some(EngineStats {
                    appends: 2,
                    topics: 1,
                    ..Default::default()
                }),
            ],
            gateway: Some(GatewayStats {
                connections: 5,
                ..Default::default()
            }),
            census: Some(super::super::messaging_routes::CensusTotals {
                sessions: 1,
                push: Some(crate::messaging::push::dispatcher::PushStats {
                    scanned: 6,
                    ..Default::default()
                }),
                ..Default::default()
            }),
        };
        (r, m)
    }

    /// Everything but the process series (procfs numbers move between two scrapes).
    fn without_process(text: &[u8]) -> String {
        String::from_utf8_lossy(text)
            .lines()
            .filter(|l| !l.contains("process_"))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    #[test]
    fn registry_series_summaries_and_histograms_are_byte_exact() {
        let (r, m) = rich_report();
        let text = without_process(&render(&r, Some(&m), false).body);
        let registry = "# HELP boltq_queue_ready_messages Ready messages per work queue
# TYPE boltq_queue_ready_messages gauge
boltq_queue_ready_messages{queue=\"a\\\\b\\nc\"} 7
boltq_queue_ready_messages{queue=\"jobs\"} 0
# TYPE boltq_http_requests_total counter
boltq_http_requests_total{route=\"/metrics\"} 3
boltq_http_requests_total{route=\"/q\\\"x\"} 1
# TYPE boltq_mesh_queue_depth gauge
boltq_mesh_queue_depth{peer=\"1\"} -4
# TYPE boltq_publish_reply_latency_us summary
boltq_publish_reply_latency_us{shard=\"0\",quantile=\"0.5\"} 20
boltq_publish_reply_latency_us{shard=\"0\",quantile=\"0.9\"} 3007
boltq_publish_reply_latency_us{shard=\"0\",quantile=\"0.99\"} 3007
boltq_publish_reply_latency_us{shard=\"0\",quantile=\"0.999\"} 3007
boltq_publish_reply_latency_us_sum{shard=\"0\"} 3030
boltq_publish_reply_latency_us_count{shard=\"0\"} 3
# HELP boltq_gateway_attached Sessions holding a socket
# TYPE boltq_gateway_attached gauge
boltq_gateway_attached{node=\"n1\"} 0
";
        assert!(text.contains(registry), "{text}");
        let engine = "# TYPE boltq_stream_records_filled_total counter
boltq_stream_records_filled_total{shard=\"1\"} 0
# HELP boltq_stream_topics Stream topics
# TYPE boltq_stream_topics gauge
boltq_stream_topics 1
";
        assert!(text.contains(engine), "{text}");
        let histogram = "# TYPE boltq_messaging_send_durable_seconds histogram
boltq_messaging_send_durable_seconds_bucket{le=\"0.0005\"} 0
boltq_messaging_send_durable_seconds_bucket{le=\"0.001\"} 0
boltq_messaging_send_durable_seconds_bucket{le=\"0.0025\"} 1
";
        assert!(text.contains(histogram), "{text}");
        let end = "boltq_messaging_send_durable_seconds_bucket{le=\"10\"} 1
boltq_messaging_send_durable_seconds_bucket{le=\"+Inf\"} 1
boltq_messaging_send_durable_seconds_sum 0.0015
boltq_messaging_send_durable_seconds_count 1
";
        assert!(text.ends_with(end), "{text}");
        assert!(text.starts_with(
            "# HELP boltq_messages_published Messages published (work queues, topics, exchanges)
# TYPE boltq_messages_published counter
boltq_messages_published 3
"
        ));
    }
}
