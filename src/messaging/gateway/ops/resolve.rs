//! What a request's topic names: its namespace and partition (one routine for every op,
//! spec §19 decision 17), and the device's cursor key on it.

use crate::messaging::cursor::CursorKey;
use crate::messaging::gateway::connection::Connection;
use crate::messaging::gateway::frame::ErrorCode;
use crate::messaging::gateway::session::SubKey;
use crate::messaging::topic::{self, Namespace};

/// Validates a topic named by a client and resolves the partition (one routine for every
/// op, spec §19 decision 17).
pub(super) fn resolve(
    c: &Connection,
    id: &str,
    topic_name: &str,
    partition: Option<u32>,
) -> Option<(Namespace, u32)> {
    let ns = match topic::validate_topic(topic_name).and_then(|()| Namespace::of(topic_name)) {
        Ok(ns) => ns,
        Err(e) => {
            c.send_error(id, ErrorCode::BadRequest, &e.to_string());
            return None;
        }
    };
    let count = c.gw.engine.partitions_of(topic_name, &ns);
    match topic::resolve_partition(topic_name, partition, &c.user(), count) {
        Ok(p) => Some((ns, p)),
        Err(e) => {
            c.send_error(id, ErrorCode::NotFound, &e.to_string());
            None
        }
    }
}

pub(super) fn cursor_key(c: &Connection, key: &SubKey) -> Option<CursorKey> {
    let group = format!("user:{}", c.user());
    CursorKey::new(&key.0, key.1, &group, &c.device.borrow()).ok()
}
