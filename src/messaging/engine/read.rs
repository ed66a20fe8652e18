//! Reads of a partition page from its owner, and the watch that keeps this shard's mirror
//! fed with the partition's new records until its last subscriber leaves.

use super::mesh::{ReadOk, StreamError, StreamMsg, StreamReply};
use super::mirror::PartitionKey;
use super::{Engine, READ_BYTES_MAX, READ_RECORDS_MAX};
use boltq_io::log::ReadError;

impl Engine {
    /// Reads a page of a partition from its owner; with `watch`, the owner also starts
    /// pushing the partition's new records to this shard's mirror.
    pub async fn read(
        &self,
        topic: &str,
        partition: u32,
        from: u64,
        records_max: usize,
        watch: bool,
    ) -> Result<ReadOk, StreamError> {
        let msg = StreamMsg::Read {
            topic: topic.to_string(),
            partition,
            from,
            records_max: records_max.clamp(1, READ_RECORDS_MAX.max(records_max)),
            bytes_max: READ_BYTES_MAX,
            watch,
        };
        match self.ask(self.owner(topic, partition), msg).await? {
            StreamReply::Read(r) => {
                if let Ok(ok) = &r {
                    self.mirror.borrow_mut().learn_bounds(
                        &(topic.to_string(), partition),
                        ok.first_seq,
                        ok.next_seq,
                    );
                }
                r
            }
            other => Err(StreamError::Internal(format!("unexpected reply {other:?}"))),
        }
    }

    /// The last local subscriber of a partition left: stop its tail notifications.
    pub fn unwatch(&self, topic: &str, partition: u32) {
        let msg = StreamMsg::Unwatch {
            topic: topic.to_string(),
            partition,
        };
        let _ = self.shard.send(self.owner(topic, partition), msg);
    }

    pub(super) async fn read_owned(
        &self,
        key: &PartitionKey,
        from: u64,
        records_max: usize,
        bytes_max: usize,
    ) -> Result<ReadOk, StreamError> {
        if let Some(refused) = self.incomplete_refusal(key) {
            return Err(refused);
        }
        if !self.topic_exists(&key.0) {
            // Not created yet: an empty partition that starts at 1.
            return Ok(ReadOk {
                records: Vec::new(),
                first_seq: 1,
                next_seq: 1,
                gap: false,
            });
        }
        let part = self.open_owned(key).await?;
        let first_seq = part.log.first_seq();
        let next_seq = part.published_next.get();
        let mut from = if from == 0 { first_seq } else { from };
        let gap = from < first_seq;
        if gap {
            from = first_seq;
        }
        if from >= next_seq {
            return Ok(ReadOk {
                records: Vec::new(),
                first_seq,
                next_seq,
                gap,
            });
        }
        let records_max = records_max.min((next_seq - from) as usize);
        match self
            .store
            .read(&part.log, from, records_max, bytes_max)
            .await
        {
            Ok(mut records) => {
                records.retain(|r| r.seq < next_seq);
                Ok(ReadOk {
                    records,
                    first_seq,
                    next_seq,
                    gap,
                })
            }
            Err(ReadError::Truncated { first_seq, .. }) => Ok(ReadOk {
                records: Vec::new(),
                first_seq,
                next_seq,
                gap: true,
            }),
            Err(e) => {
                log::error!("[stream] reading {}/{}: {e}", key.0, key.1);
                Err(StreamError::Internal("could not read the partition".into()))
            }
        }
    }
}
