//! Cursor commits and lookups, answered by the partition's owner (whose slot holds the
//! cursor log), so a commit never crosses to a third shard.

use super::mesh::{StreamError, StreamMsg, StreamReply};
use super::Engine;
use crate::messaging::cursor::CursorKey;

impl Engine {
    pub async fn commit(&self, key: CursorKey, seq: u64) -> Result<(), StreamError> {
        let dest = self.owner(key.topic(), key.partition());
        match self.ask(dest, StreamMsg::Commit { key, seq }).await? {
            StreamReply::Committed(r) => r,
            other => Err(StreamError::Internal(format!("unexpected reply {other:?}"))),
        }
    }

    pub async fn cursor(&self, key: CursorKey) -> Result<Option<u64>, StreamError> {
        let dest = self.owner(key.topic(), key.partition());
        match self.ask(dest, StreamMsg::CursorGet { key }).await? {
            StreamReply::Cursor(c) => Ok(c),
            other => Err(StreamError::Internal(format!("unexpected reply {other:?}"))),
        }
    }

    pub(super) async fn commit_owned(&self, key: CursorKey, seq: u64) -> Result<(), StreamError> {
        if !self.topic_exists(key.topic()) {
            return Err(StreamError::Invalid(format!(
                "no such topic {:?}",
                key.topic()
            )));
        }
        if let Some(replication) = self.replication() {
            return self.commit_replicated(replication, key, seq).await;
        }
        let pkey = (key.topic().to_string(), key.partition());
        let next_seq = self.open_owned(&pkey).await?.published_next.get();
        self.stats.borrow_mut().cursor_commits += 1;
        self.cursors.commit(&self.store, key, seq, next_seq).await
    }
}
