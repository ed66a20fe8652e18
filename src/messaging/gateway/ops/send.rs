//! `send` (§2.5.5): a message into a conversation, its pointers into the members' inboxes
//! (fan-out on write up to the limit), deduplicated by `client_msg_id`.

use super::access::{allowed, forbid};
use super::headers::{clean_headers, new_message_id, to_bytes_headers};
use super::reply::internal;
use super::resolve::resolve;
use crate::messaging::engine::mesh::AppendReq;
use crate::messaging::gateway::connection::Connection;
use crate::messaging::gateway::frame::{self, ConversationKind, ErrorCode, SentOut};
use crate::messaging::gateway::text;
use crate::messaging::identity::acl::Action;
use crate::messaging::{fanout, membership, topic};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::rc::Rc;

#[allow(clippy::too_many_arguments)]
pub(super) async fn send(
    c: &Rc<Connection>,
    id: &str,
    conversation: &str,
    kind: ConversationKind,
    client_msg_id: &str,
    payload: Vec<u8>,
    headers: BTreeMap<String, String>,
) {
    let is_group = kind == ConversationKind::Group;
    let topic_name = topic::conversation_topic(is_group, conversation);
    let Some((_, p)) = resolve(c, id, &topic_name, None) else {
        return;
    };
    if !allowed(c, &topic_name, Action::Write).await {
        return forbid(c, id);
    }
    let user_id = c.user();
    let members: Vec<String> = if is_group {
        let tenant = c.principal.borrow().tenant.clone();
        match c.gw.membership.members(&tenant, conversation).await {
            Ok(m) => m,
            Err(e) => {
                log::warn!("[gateway] member list of {conversation}: {e}");
                return c.send_error(id, ErrorCode::Internal, "member lookup failed; retry");
            }
        }
    } else {
        match membership::direct_members(conversation) {
            Some(pair) => pair.to_vec(),
            None => Vec::new(),
        }
    };
    if members.is_empty() {
        return c.send_error(id, ErrorCode::NotFound, "conversation has no members");
    }
    let message_id = new_message_id(&c.gw);
    let mut server = vec![
        ("message_id".to_string(), message_id),
        ("sender".to_string(), user_id.clone()),
        ("kind".to_string(), kind.as_str().to_string()),
        ("conversation".to_string(), conversation.to_string()),
    ];
    if !client_msg_id.is_empty() {
        server.push(("client_msg_id".to_string(), client_msg_id.to_string()));
    }
    let mut all = clean_headers(headers);
    let pointer_members = match fanout::plan(&members, c.gw.settings.fanout_on_write_limit) {
        fanout::Strategy::OnWrite(m) => m,
        fanout::Strategy::OnRead => Vec::new(),
    };
    // Pointers repeat these from the record (`fanout::copied_headers`).
    all.append(&mut server);
    let req = AppendReq {
        topic: topic_name.clone(),
        partition: p,
        key: Bytes::from(conversation.to_string()),
        headers: to_bytes_headers(all),
        payload: Bytes::from(payload),
        user: user_id,
        dedup: (!client_msg_id.is_empty())
            .then(|| (conversation.to_string(), client_msg_id.to_string())),
        pointer_members,
    };
    c.gw.stats.borrow_mut().sends += 1;
    match c.gw.engine.append(req).await {
        Ok(ok) => c.send_frame(text(|o| {
            frame::sent(
                o,
                id,
                &SentOut {
                    message_id: &ok.coords.message_id,
                    client_msg_id,
                    topic: &ok.coords.topic,
                    partition: ok.coords.partition,
                    seq: ok.coords.seq,
                    timestamp_ns: ok.coords.timestamp_ns,
                    duplicate: ok.duplicate,
                },
            )
        })),
        Err(e) => internal(c, id, &e),
    }
}
