//! The per-slot command log: every broker command that changed state, in apply order.
//! Replaying it into a fresh broker rebuilds the slot exactly (the broker is deterministic
//! and every command carries the time it was applied at). [`record`] is the format of one
//! entry: binary for the hot commands, JSON for the rest and for logs written before.

pub mod record;

use crate::queue::broker::{Broker, Command};
use boltq_io::{LogRef, Record, Store};
use bytes::Bytes;

/// Records read per step while replaying.
const REPLAY_BATCH_RECORDS: usize = 4096;

/// Appends `cmd` to the slot's log; returns the journal position to wait for and the bytes
/// written. `past_backlog`: also when the journal's backlog is at its limit
/// (`Store::append_past_backlog`), for commands applied whatever the backlog.
pub fn append(
    store: &Store,
    log: &LogRef,
    cmd: &Command,
    past_backlog: bool,
) -> Result<(u64, u64), String> {
    let mut payload = Vec::new();
    record::encode(cmd, &mut payload);
    let bytes = payload.len() as u64;
    let mut record = Record {
        payload: Bytes::from(payload),
        ..Default::default()
    };
    // The record's time is the command's own where it has one: the clock is read once per
    // request, not again here.
    let at_ns = cmd.time_ns().unwrap_or_else(boltq_io::store::now_ns);
    let appended = if past_backlog {
        store.append_past_backlog(log, &mut record, at_ns)
    } else {
        store.append(log, &mut record, at_ns)
    };
    appended.map(|a| (a.lsn, bytes)).map_err(|e| e.to_string())
}

/// What a replay did.
pub struct Replayed {
    pub commands: u64,
    /// Payload bytes replayed: the log's size past the snapshot, for the compaction rule.
    pub bytes: u64,
}

/// Applies every command of the slot's log from `from` on to `broker`.
pub async fn replay(
    store: &Store,
    log: &LogRef,
    from: u64,
    broker: &mut Broker,
) -> Result<Replayed, String> {
    if from < log.first_seq() {
        return Err(format!(
            "{}: commands from {from} are needed but the log starts at {}",
            log.name(),
            log.first_seq()
        ));
    }
    let log_name = log.name();
    broker.set_replaying(true);
    let done = replay_from(store, log, &log_name, from, broker).await;
    broker.set_replaying(false);
    done
}

async fn replay_from(
    store: &Store,
    log: &LogRef,
    log_name: &str,
    from: u64,
    broker: &mut Broker,
) -> Result<Replayed, String> {
    let mut from = from;
    let mut done = Replayed {
        commands: 0,
        bytes: 0,
    };
    loop {
        let records = store
            .read(log, from, REPLAY_BATCH_RECORDS, usize::MAX)
            .await
            .map_err(|e| e.to_string())?;
        let Some(last) = records.last() else { break };
        from = last.seq + 1;
        for r in &records {
            replay_record(log_name, r.seq, &r.payload, broker)?;
            done.commands += 1;
            done.bytes += r.payload.len() as u64;
        }
    }
    Ok(done)
}

/// One step of [`replay`]: decodes record `seq` of log `log_name` and applies it. The
/// error names the record, e.g. `record 17 of queue/slot-003/wal: truncated headers at
/// byte 42`.
fn replay_record(
    log_name: &str,
    seq: u64,
    payload: &[u8],
    broker: &mut Broker,
) -> Result<(), String> {
    let cmd = record::decode(payload).map_err(|e| format!("record {seq} of {log_name}: {e}"))?;
    broker.apply(&cmd);
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::queue::broker::{BrokerConfig, ConsumerRef};
    use crate::queue::message::{IdGenerator, Message};
    use boltq_io::testutil::Rng;

    /// A message as a publish makes it, with a fixed id (snapshot tests too).
    pub(crate) fn message(topic: &str) -> Message {
        Message {
            id: IdGenerator::new([1; 7]).next(0),
            topic: topic.into(),
            payload: Bytes::from_static(b"1"),
            extras: None,
            timestamp_ns: 0,
            retry: 0,
            max_retry: 0,
            priority: 0,
            delay_ns: 0,
            ttl_ns: 0,
            deliver_at_ns: 0,
            expires_at_ns: 0,
        }
    }

    /// A busy slot's commands: publishes (work queue and durable topic), consumes, acks and
    /// nacks of recent ids, ticks past ack deadlines and TTLs, and the rare commands.
    fn workload(seed: u64) -> Vec<Command> {
        let mut rng = Rng::new(seed);
        let mut ids = IdGenerator::new([2; 7]);
        let mut published = Vec::new();
        let mut now_ns = 1_000i64;
        let consumer = ConsumerRef { shard: 0, conn: 1 };
        let mut cmds = vec![Command::Subscribe {
            topic: "t".into(),
            sub_id: "s".into(),
            durable: true,
            consumer,
            now_ns,
        }];
        for _ in 0..3_000 {
            now_ns += rng.below(100) as i64;
            let queue = ["a", "b"][rng.below(2) as usize];
            let recent = |rng: &mut Rng, published: &Vec<_>| {
                let back = 1 + rng.below(8.min(published.len() as u64)) as usize;
                published[published.len() - back]
            };
            let cmd = match rng.below(20) {
                0..=5 => {
                    let mut msg = message(queue);
                    msg.id = ids.next(0);
                    msg.timestamp_ns = now_ns;
                    msg.max_retry = 2;
                    msg.priority = rng.below(12) as i64 - 1;
                    if rng.below(4) == 0 {
                        msg.edit_extras(|e| {
                            e.headers.insert("k".into(), rng.below(9).to_string());
                        });
                    }
                    if rng.below(5) == 0 {
                        msg.ttl_ns = 500;
                        msg.expires_at_ns = now_ns + 500;
                    }
                    published.push(msg.id);
                    Command::Publish { msg }
                }
                6 => {
                    let mut msg = message("t");
                    msg.id = ids.next(0);
                    msg.timestamp_ns = now_ns;
                    Command::PublishTopic { msg }
                }
                7..=10 => Command::Consume {
                    queue: queue.into(),
                    consumer,
                    max: 1 + rng.below(3) as u32,
                    now_ns,
                },
                11..=12 if !published.is_empty() => Command::Ack {
                    id: recent(&mut rng, &published),
                    now_ns,
                },
                13 if !published.is_empty() => Command::Nack {
                    id: recent(&mut rng, &published),
                    now_ns,
                },
                14..=16 => {
                    now_ns += rng.below(1_500) as i64;
                    Command::Tick { now_ns }
                }
                17 => Command::DeadLetterRequeue {
                    queue: queue.into(),
                    limit: 2,
                    now_ns,
                },
                18 => Command::Disconnect { consumer },
                _ => Command::DisconnectAll,
            };
            cmds.push(cmd);
        }
        cmds
    }

    /// A log whose records are partly old JSON (`serde_json::to_vec`, as before binary
    /// records) and partly new records replays to exactly the state the commands made.
    #[test]
    fn a_log_mixing_old_json_and_binary_records_replays_exactly() {
        let cfg = BrokerConfig {
            ack_timeout_ns: 1_000,
            retry_backoff_base_ns: 0,
            retry_backoff_max_ns: 0,
            ..BrokerConfig::default()
        };
        for seed in 1..=4 {
            let cmds = workload(seed);
            let mut rng = Rng::new(seed ^ 0xABCD);
            let mut live = Broker::new(cfg.clone());
            let mut log = Vec::new();
            for cmd in &cmds {
                live.apply(cmd);
                let old_json = rng.below(2) == 0;
                log.push(if old_json {
                    serde_json::to_vec(cmd).unwrap()
                } else {
                    let mut out = Vec::new();
                    record::encode(cmd, &mut out);
                    out
                });
            }
            let binary = log.iter().filter(|r| r[0] < b' ').count();
            assert!(binary > 1_000 && log.len() - binary > 1_000, "{binary}");

            let mut replayed = Broker::new(cfg.clone());
            for (seq, payload) in log.iter().enumerate() {
                replay_record("queue/slot-003/wal", seq as u64, payload, &mut replayed).unwrap();
            }
            let state = |b: &Broker| serde_json::to_string(&b.snapshot()).unwrap();
            assert_eq!(state(&replayed), state(&live), "seed {seed}");
            assert_eq!(replayed.stats(), live.stats(), "seed {seed}");
            let stats = live.stats();
            let held: u64 = stats
                .queues
                .values()
                .chain(stats.dead_letters.values())
                .sum();
            assert!(
                held + stats.pending_count > 0,
                "a non-trivial state: {stats:?}"
            );
        }
    }

    #[test]
    fn a_record_that_does_not_decode_is_named_in_the_error() {
        let mut broker = Broker::new(BrokerConfig::default());
        let mut payload = Vec::new();
        record::encode(&Command::Publish { msg: message("q") }, &mut payload);
        payload.truncate(88);
        let err = replay_record("queue/slot-003/wal", 17, &payload, &mut broker).unwrap_err();
        assert_eq!(
            err,
            "record 17 of queue/slot-003/wal: truncated headers at byte 86"
        );
    }

    /// Issue 13 item 5: with `storage.journal_file_bytes` at least
    /// `JOURNAL_FILE_BYTES_FOR_ANY_RECORD`, the store takes any record up to
    /// `BODY_BYTES_MAX`; every command a request can produce encodes within that, so its
    /// append is never refused for its size after the broker applied it. The worst cases:
    /// the largest payload with the longest names, the most headers the binary form keeps,
    /// and the JSON fallback (one header more) with a payload whose every byte escapes.
    #[test]
    fn the_largest_commands_a_request_can_make_fit_any_record() {
        use crate::queue::protocol::{reply, request};
        use std::collections::BTreeMap;
        let body_max = reply::MESSAGE_BODY_BYTES_MAX;
        let names = |msg: &mut Message| {
            msg.topic = "t".repeat(request::NAME_BYTES_MAX).into();
            msg.edit_extras(|e| e.exchange = "e".repeat(request::NAME_BYTES_MAX));
            msg.edit_extras(|e| {
                e.routing_key = "\"".repeat(crate::queue::broker::exchange::ROUTING_KEY_BYTES_MAX)
            });
        };
        let headers = |n: usize| -> BTreeMap<String, String> {
            (0..n).map(|i| (format!("{i:x}"), String::new())).collect()
        };
        let mut cases = Vec::new();
        let mut big = message("q");
        names(&mut big);
        big.payload = Bytes::from("x".repeat(body_max));
        cases.push(("payload", big));
        for (name, n) in [
            ("binary headers", record::HEADERS_MAX),
            ("json headers", record::HEADERS_MAX + 1),
        ] {
            let mut m = message("q");
            names(&mut m);
            m.edit_extras(|e| e.headers = headers(n));
            let room = body_max - reply::headers_json_len(m.headers());
            // A JSON string of escaped quotes: every byte after the first escapes again.
            let mut payload = String::from("\"");
            while payload.len() + 3 <= room {
                payload.push_str("\\\"");
            }
            payload.push('"');
            m.payload = Bytes::from(payload);
            cases.push((name, m));
        }
        let limit = boltq_io::record::BODY_BYTES_MAX - boltq_io::record::BODY_FIXED_BYTES;
        for (name, msg) in cases {
            for cmd in [
                Command::Publish { msg: msg.clone() },
                Command::PublishTopic { msg: msg.clone() },
            ] {
                let mut out = Vec::new();
                record::encode(&cmd, &mut out);
                assert!(
                    out.len() <= limit,
                    "{name}: {} bytes, records take {limit}",
                    out.len()
                );
            }
        }
    }
}
