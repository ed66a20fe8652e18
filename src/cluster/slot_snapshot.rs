//! A slot's Raft snapshot: both planes' state of the slot at one applied index.
//!
//! ```text
//! "BQSLOT1\n" | queue_len u64 | the broker's snapshot body (queue_len bytes)
//!             | the messaging slot's snapshot (messaging::slot::snapshot) to the end
//! ```
//!
//! Snapshots written before the messaging plane was replicated are a broker body alone
//! (they start with the broker's own magic, never with this one) and read as a slot with
//! no messaging state, so a cluster's existing images stay readable.

use crate::messaging::slot::{StreamSlot, StreamSlotConfig};
use crate::queue::broker::{Broker, BrokerConfig, BrokerSnapshot};
use crate::queue::server::snapshot as body;

pub const MAGIC: &[u8; 8] = b"BQSLOT1\n";

/// Both planes' state of a slot.
pub fn encode(broker: &Broker, streams: &StreamSlot) -> Result<Vec<u8>, String> {
    let mut streams_bytes = Vec::new();
    streams.encode_snapshot(&mut streams_bytes);
    encode_parts(&broker.snapshot(), &streams_bytes)
}

/// [`encode`] from the broker's snapshot and the messaging slot's encoded snapshot.
pub fn encode_parts(broker: &BrokerSnapshot, streams: &[u8]) -> Result<Vec<u8>, String> {
    // By name: members of an older build, during a rolling upgrade, read it too.
    let queue = body::encode_named(broker)?;
    let mut out = Vec::with_capacity(MAGIC.len() + 8 + queue.len() + streams.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(queue.len() as u64).to_le_bytes());
    out.extend_from_slice(&queue);
    out.extend_from_slice(streams);
    Ok(out)
}

/// The state a snapshot's bytes hold (a new one for the empty snapshot at index 0).
pub fn decode(
    data: &[u8],
    broker_cfg: &BrokerConfig,
    streams_cfg: &StreamSlotConfig,
) -> Result<(Broker, StreamSlot), String> {
    if data.is_empty() {
        return Ok((
            Broker::new(broker_cfg.clone()),
            StreamSlot::new(streams_cfg.clone()),
        ));
    }
    let Some(rest) = data.strip_prefix(MAGIC.as_slice()) else {
        let broker = Broker::try_restore(body::decode(data)?, broker_cfg.clone())?;
        return Ok((broker, StreamSlot::new(streams_cfg.clone())));
    };
    let Some((len, rest)) = rest.split_first_chunk::<8>() else {
        return Err("slot snapshot cut before its queue length".into());
    };
    let queue_len = usize::try_from(u64::from_le_bytes(*len))
        .ok()
        .filter(|&n| n <= rest.len())
        .ok_or_else(|| {
            format!(
                "slot snapshot's queue part is longer than the {} bytes left",
                rest.len()
            )
        })?;
    let (queue, streams) = rest.split_at(queue_len);
    let broker = Broker::try_restore(body::decode(queue)?, broker_cfg.clone())?;
    let streams = StreamSlot::decode_snapshot(streams, streams_cfg.clone())?;
    Ok((broker, streams))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messaging::slot::{Append, StreamCommand};
    use crate::queue::broker::Command;
    use crate::queue::message::IdGenerator;

    fn cfg() -> BrokerConfig {
        BrokerConfig::default()
    }

    #[test]
    fn both_planes_come_back_and_a_broker_only_snapshot_still_reads() {
        let mut broker = Broker::new(cfg());
        let mut msg = crate::queue::server::wal::tests::message("jobs");
        msg.id = IdGenerator::new(*b"slotsnp").next(3);
        let _ = broker.apply(&Command::Publish { msg });
        let mut streams = StreamSlot::new(StreamSlotConfig::default());
        let _ = streams.apply(&StreamCommand::Append(Append {
            topic: "chat.dm.a".into(),
            partition: 0,
            now_ns: 1,
            dedup: None,
            key: Default::default(),
            headers: vec![],
            payload: bytes::Bytes::from_static(b"hi"),
            fanout: vec!["bob".into()],
        }));
        let data = encode(&broker, &streams).expect("encode");
        let (b, s) = decode(&data, &cfg(), &StreamSlotConfig::default()).expect("decode");
        assert_eq!(
            body::encode(b.snapshot()).expect("body"),
            body::encode(broker.snapshot()).expect("body")
        );
        assert_eq!(s.position("chat.dm.a", 0).next_seq, 2);

        let old = body::encode(broker.snapshot()).expect("body");
        let (b, s) = decode(&old, &cfg(), &StreamSlotConfig::default()).expect("old format");
        assert_eq!(body::encode(b.snapshot()).expect("body"), old);
        assert!(s.is_empty());

        for cut in [
            MAGIC.len(),
            MAGIC.len() + 4,
            MAGIC.len() + 8,
            data.len() - 1,
        ] {
            assert!(
                decode(&data[..cut], &cfg(), &StreamSlotConfig::default()).is_err(),
                "cut at {cut}"
            );
        }
    }
}
