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
        (_, Outcome::Error(_)) | (_, Outcome::Empty) => false,
        (Command::Tick { .. }, Outcome::Ticked { changed }) => *changed,
        // Live (non-durable) subscriptions and disconnects only touch connection state,
        // which does not survive a restart anyway.
        (Command::Subscribe { durable, .. }, _) => *durable,
        (Command::Disconnect { .. }, _) => false,
        _ => true,
    }
}

/// Appends `cmd` to the slot's log; returns the journal position to wait for.
pub fn append(store: &Store, log: &LogRef, cmd: &Command) -> Result<u64, String> {
    let payload = serde_json::to_vec(cmd).map_err(|e| format!("encode command: {e}"))?;
    let mut record = Record {
        payload: Bytes::from(payload),
        ..Default::default()
    };
    store
        .append(log, &mut record, boltq_io::store::now_ns())
        .map(|a| a.lsn)
        .map_err(|e| e.to_string())
}

/// Applies every command of the slot's log to `broker`, then ends the live subscriptions
/// the log mentions (their connections belonged to an earlier process).
pub async fn replay(store: &Store, log: &LogRef, broker: &mut Broker) -> Result<u64, String> {
    let mut from = log.first_seq();
    let mut applied = 0u64;
    let mut consumers = std::collections::HashSet::new();
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
            if let Command::Subscribe { consumer, .. } = &cmd {
                consumers.insert(*consumer);
            }
            broker.apply(&cmd);
            applied += 1;
        }
    }
    for consumer in consumers {
        broker.apply(&Command::Disconnect { consumer });
    }
    Ok(applied)
}
