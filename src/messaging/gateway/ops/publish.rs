//! `publish` (§18 G28): a record into a stream topic, partitioned by its key (else the
//! user). Conversations go through `send`, inboxes are the server's.

use super::access::{allowed, forbid};
use super::headers::{clean_headers, to_bytes_headers};
use super::reply::internal;
use crate::messaging::engine::mesh::AppendReq;
use crate::messaging::gateway::connection::Connection;
use crate::messaging::gateway::frame::{self, ErrorCode};
use crate::messaging::gateway::text;
use crate::messaging::identity::acl::Action;
use crate::messaging::topic::{self, Namespace};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::rc::Rc;

pub(super) async fn publish(
    c: &Rc<Connection>,
    id: &str,
    topic_name: &str,
    key: &str,
    headers: BTreeMap<String, String>,
    payload: Vec<u8>,
) {
    let ns = match topic::validate_topic(topic_name).and_then(|()| Namespace::of(topic_name)) {
        Ok(ns) => ns,
        Err(e) => return c.send_error(id, ErrorCode::BadRequest, &e.to_string()),
    };
    if !publishable(&ns) {
        return c.send_error(
            id,
            ErrorCode::BadRequest,
            "use send for conversations; inboxes are written by the server",
        );
    }
    if !allowed(c, topic_name, Action::Write).await {
        return forbid(c, id);
    }
    let count = c.gw.engine.partitions_of(topic_name, &ns);
    let part_key = if key.is_empty() {
        c.user()
    } else {
        key.to_string()
    };
    let p = topic::partition_for(part_key.as_bytes(), count);
    let mut h = clean_headers(headers);
    h.push(("sender".to_string(), c.user()));
    let req = AppendReq {
        topic: topic_name.to_string(),
        partition: p,
        key: Bytes::from(key.to_string()),
        headers: to_bytes_headers(h),
        payload: Bytes::from(payload),
        user: c.user(),
        dedup: None,
        pointer_members: Vec::new(),
    };
    match c.gw.engine.append(req).await {
        Ok(ok) => c.send_frame(text(|o| {
            frame::published(
                o,
                id,
                &frame::PublishedOut {
                    topic: &ok.coords.topic,
                    partition: ok.coords.partition,
                    seq: ok.coords.seq,
                    timestamp_ns: ok.coords.timestamp_ns,
                },
            )
        })),
        Err(e) => internal(c, id, &e),
    }
}

/// Whether `publish` may write a topic of this namespace: not a conversation (that is
/// `send`, with its fan-out and dedup) and not an inbox (only the server writes those).
fn publishable(ns: &Namespace) -> bool {
    !(ns.is_conversation() || matches!(ns, Namespace::Inbox { .. }))
}

#[cfg(test)]
mod tests {
    use super::publishable;
    use crate::messaging::topic::Namespace;

    fn of(topic: &str) -> bool {
        publishable(&Namespace::of(topic).unwrap_or_else(|e| panic!("{topic}: {e}")))
    }

    #[test]
    fn conversations_and_inboxes_are_not_published_to() {
        assert!(!of("chat.direct.alice:bob"));
        assert!(!of("chat.group.team"));
        assert!(!of("chat.inbox.alice"));
    }

    #[test]
    fn other_topics_are() {
        assert!(of("match.alice"));
    }
}
