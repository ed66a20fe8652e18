//! The per-slot command log: every broker command that changed state, in apply order.
//! Replaying it into a fresh broker rebuilds the slot exactly (the broker is deterministic
//! and every command carries the time it was applied at).

use crate::queue::broker::{Broker, Command, Outcome};
use boltq_io::{LogRef, Record, Store};
use bytes::Bytes;

/// Records read per step while replaying.
const REPLAY_BATCH_RECORDS: usize = 4096;

/// Whether applying `cmd` with `outcome` changed durable state. Refusals, empty polls and
/// idle ticks change nothing, so they cost no log write.
pub fn must_log(cmd: &Command, outcome: &Outcome) -> bool {
    match (cmd, outcome) {
        (_, Outcome::Error(_)) | (_, Outcome::Empty) | (_, Outcome::PublishedLive) => false,
        (Command::Tick { .. }, Outcome::Ticked { changed }) => *changed,
        // Live (non-durable) subscriptions and disconnects only touch connection state,
        // which does not survive a restart anyway.
        (Command::Subscribe { durable, .. }, _) => *durable,
        // A disconnect changes durable state only for a connection with a durable
        // subscription; the plane knows which (and logs those), the broker does not say.
        (Command::Disconnect { .. }, _) | (Command::DisconnectAll, _) => false,
        _ => true,
    }
}

/// Appends `cmd` to the slot's log; returns the journal position to wait for and the bytes
/// written.
pub fn append(store: &Store, log: &LogRef, cmd: &Command) -> Result<(u64, u64), String> {
    let payload = serde_json::to_vec(cmd).map_err(|e| format!("encode command: {e}"))?;
    let bytes = payload.len() as u64;
    let mut record = Record {
        payload: Bytes::from(payload),
        ..Default::default()
    };
    store
        .append(log, &mut record, boltq_io::store::now_ns())
        .map(|a| (a.lsn, bytes))
        .map_err(|e| e.to_string())
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
            let cmd: Command = serde_json::from_slice(&r.payload)
                .map_err(|e| format!("record {} of {} does not decode: {e}", r.seq, log.name()))?;
            broker.apply(&cmd);
            done.commands += 1;
            done.bytes += r.payload.len() as u64;
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::message::{IdGenerator, Message};

    fn message(topic: &str) -> Message {
        Message {
            id: IdGenerator::new([1; 7]).next(0),
            topic: topic.into(),
            payload: Bytes::from_static(b"1"),
            headers: Default::default(),
            timestamp_ns: 0,
            retry: 0,
            max_retry: 0,
            priority: 0,
            delay_ns: 0,
            ttl_ns: 0,
            deliver_at_ns: 0,
            expires_at_ns: 0,
            exchange: String::new(),
            routing_key: String::new(),
        }
    }

    #[test]
    fn a_topic_publish_is_logged_only_when_it_changed_durable_state() {
        let cmd = Command::PublishTopic {
            msg: message("news"),
        };
        assert!(must_log(&cmd, &Outcome::Published), "backlogged copy");
        assert!(!must_log(&cmd, &Outcome::PublishedLive), "live pushes only");
        assert!(!must_log(&cmd, &Outcome::Error("x".into())));
    }
}
