//! One function per client operation (spec/messaging-edge.md §2.5).

use super::connection::Connection;
use super::frame::{self, ConversationKind, ErrorCode, Request, SentOut};
use super::session::{Resume, SessionState, SubKey};
use super::{subscription, text, GatewayCtx};
use crate::messaging::cursor::CursorKey;
use crate::messaging::engine::mesh::{AppendReq, StreamError};
use crate::messaging::engine::READ_RECORDS_MAX;
use crate::messaging::identity::acl::{Action, Decision, MembershipQuestion};
use crate::messaging::identity::principal::Principal;
use crate::messaging::topic::{self, Namespace};
use crate::messaging::{fanout, membership};
use base64::Engine as _;
use bytes::Bytes;
use std::collections::HashMap;
use std::rc::Rc;

/// Names the server sets on every conversation record and pointer; a client's values for
/// them are dropped (spec §18 G41).
pub const RESERVED_HEADERS: [&str; 8] = [
    "client_msg_id",
    "conv_partition",
    "conv_seq",
    "conversation",
    "kind",
    "message_id",
    "pointer",
    "sender",
];

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn now_ns() -> i64 {
    boltq_io::store::now_ns()
}

/// Handles the first frame: only `hello` is accepted. Returns whether to keep reading.
pub async fn hello_first(c: &Rc<Connection>, req: Request) -> bool {
    let Request::Hello {
        id,
        version,
        device_id,
        resume,
        ..
    } = req
    else {
        c.send_error(req.id(), ErrorCode::BadRequest, "first frame must be hello");
        c.out.close(
            frame::close::PROTOCOL_ERROR,
            frame::close::PROTOCOL_ERROR_REASON,
            true,
        );
        return false;
    };
    if version != 0 && version != frame::PROTOCOL_VERSION {
        let m = format!("protocol version {version} not supported (server speaks 1)");
        c.send_error(&id, ErrorCode::UnsupportedVersion, &m);
        c.out.close(
            frame::close::UNSUPPORTED_VERSION,
            frame::close::UNSUPPORTED_VERSION_REASON,
            true,
        );
        return false;
    }
    let token_device = c.principal.borrow().device_id.clone();
    if !token_device.is_empty() && !device_id.is_empty() && device_id != token_device {
        c.send_error(
            &id,
            ErrorCode::BadRequest,
            "device_id differs from the token's device",
        );
        c.out
            .close(frame::close::POLICY, frame::close::POLICY_REASON, true);
        return false;
    }
    let device = if device_id.is_empty() {
        token_device
    } else {
        device_id
    };
    if device.is_empty() || !topic::valid_id(&device) {
        c.send_error(
            &id,
            ErrorCode::BadRequest,
            "device_id is required (1-128 of A-Z a-z 0-9 _ @ + -)",
        );
        c.out
            .close(frame::close::POLICY, frame::close::POLICY_REASON, true);
        return false;
    }
    *c.device.borrow_mut() = device.clone();
    let user = c.user();
    let new_secret = b64(&c.gw.random_bytes::<32>());
    let resumed = match resume.split_once('.') {
        Some((sid, secret)) if !sid.is_empty() => {
            take_session(&c.gw, sid, secret, &user, &new_secret, c.id)
                .await
                .map(|s| (sid.to_string(), s))
        }
        _ => None,
    };
    let (sid, state, was_resumed) = match resumed {
        Some((sid, mut state)) => {
            state.device = device.clone();
            c.gw.stats.borrow_mut().resumed += 1;
            (sid, state, true)
        }
        None => {
            let sid = b64(&c.gw.random_bytes::<16>());
            let state = SessionState {
                user: user.clone(),
                device: device.clone(),
                ..Default::default()
            };
            c.gw.sessions.borrow_mut().create(
                sid.clone(),
                new_secret.as_bytes(),
                state.clone(),
                c.id,
            );
            (sid, state, false)
        }
    };
    *c.session.borrow_mut() = Some(sid.clone());
    let token = format!("{sid}.{new_secret}");
    c.send_frame(text(|o| frame::welcome(o, &id, &sid, &token, was_resumed)));
    if was_resumed {
        restore_subscriptions(c, state).await;
    }
    true
}

/// Finds the session here or on another shard, checks it and takes it over for `conn`.
async fn take_session(
    gw: &Rc<GatewayCtx>,
    sid: &str,
    secret: &str,
    user: &str,
    new_secret: &str,
    conn: u64,
) -> Option<SessionState> {
    let window_ns = gw.settings.resume_window.as_nanos() as i64;
    let local = gw.sessions.borrow_mut().resume(
        sid,
        secret.as_bytes(),
        user,
        new_secret.as_bytes(),
        conn,
        now_ns(),
        window_ns,
    );
    match local {
        Resume::Resumed { state, previous } => {
            if let Some(prev) = previous {
                close_taken_over(gw, prev);
            }
            return Some(state);
        }
        Resume::Fresh => {}
    }
    // Another shard may hold it (the kernel picks the accepting shard).
    let state = gw.engine_take_remote(sid, secret, user).await?;
    gw.sessions
        .borrow_mut()
        .create(sid.to_string(), new_secret.as_bytes(), state.clone(), conn);
    Some(state)
}

pub fn close_taken_over(gw: &GatewayCtx, conn: u64) {
    if let Some(out) = gw.conns.borrow().get(&conn) {
        out.close(
            frame::close::SESSION_TAKEN_OVER,
            frame::close::SESSION_TAKEN_OVER_REASON,
            false,
        );
    }
}

/// Restarts a resumed session's subscriptions at min(written to the old socket, committed
/// cursor), re-checking each against the ACL (spec §19 decision 4, §18 G6).
async fn restore_subscriptions(c: &Rc<Connection>, state: SessionState) {
    let mut positions: Vec<(SubKey, u64)> = state.positions.into_iter().collect();
    positions.sort();
    for (key, written) in positions {
        if !allowed(c, &key.0, Action::Read).await {
            c.gw.stats.borrow_mut().forbidden += 1;
            c.send_error(
                "",
                ErrorCode::Forbidden,
                &format!("access denied: {}", key.0),
            );
            continue;
        }
        let cursor = match cursor_key(c, &key) {
            Some(k) => c.gw.engine.cursor(k).await.ok().flatten(),
            None => None,
        };
        let start = cursor.map_or(written, |cur| cur.min(written));
        if let Err(e) = start_subscription(c, "", key.clone(), Some(start), false).await {
            log::warn!("[gateway] restoring {}/{}: {e}", key.0, key.1);
        }
    }
}

fn cursor_key(c: &Connection, key: &SubKey) -> Option<CursorKey> {
    let group = format!("user:{}", c.user());
    CursorKey::new(&key.0, key.1, &group, &c.device.borrow()).ok()
}

/// Dispatches one request of a connection that said hello.
pub async fn handle(c: &Rc<Connection>, req: Request) {
    if c.principal.borrow().is_expired(super::now_s()) {
        c.send_error(
            req.id(),
            ErrorCode::Unauthenticated,
            "token expired, reconnect with a fresh token",
        );
        c.out.close(
            frame::close::TOKEN_EXPIRED,
            frame::close::TOKEN_EXPIRED_REASON,
            true,
        );
        return;
    }
    match req {
        Request::Hello { id, .. } => c.send_frame(text(|o| {
            frame::error(
                o,
                &id,
                ErrorCode::Conflict,
                "session already established",
                false,
            )
        })),
        Request::Ping { id } => c.send_frame(text(|o| frame::pong(o, &id))),
        Request::Subscribe {
            id,
            topic,
            partition,
            from_seq,
        } => subscribe(c, &id, &topic, partition, from_seq).await,
        Request::Unsubscribe {
            id,
            topic,
            partition,
        } => unsubscribe(c, &id, &topic, partition),
        Request::History {
            id,
            topic,
            partition,
            from_seq,
            limit,
        } => history(c, &id, &topic, partition, from_seq, limit).await,
        Request::Send {
            id,
            conversation,
            kind,
            client_msg_id,
            payload,
            headers,
        } => {
            send(
                c,
                &id,
                &conversation,
                kind,
                &client_msg_id,
                payload,
                headers,
            )
            .await
        }
        Request::Commit {
            id,
            topic,
            partition,
            seq,
        } => commit(c, &id, &topic, partition, seq).await,
        Request::Publish {
            id,
            topic,
            key,
            headers,
            payload,
        } => publish(c, &id, &topic, &key, headers, payload).await,
        Request::Typing { id, .. } => c.send_error(
            &id,
            ErrorCode::UnsupportedVersion,
            "ephemeral signals are not configured",
        ),
        Request::Presence { id, .. } => c.send_frame(text(|o| frame::ack(o, &id))),
        Request::WatchPresence { id, .. } => c.send_error(
            &id,
            ErrorCode::UnsupportedVersion,
            "presence is not configured",
        ),
    }
}

/// Answers one membership question: direct conversations from their id, others from the
/// membership service (an error denies).
async fn answer(gw: &GatewayCtx, p: &Principal, q: &MembershipQuestion) -> Result<bool, ()> {
    let direct =
        q.topic.starts_with(topic::DIRECT_PREFIX) || q.topic.starts_with(topic::TYPING_PREFIX);
    if direct {
        if let Some([a, b]) = membership::direct_members(&q.group) {
            return Ok(a == p.user_id || b == p.user_id);
        }
        if q.topic.starts_with(topic::DIRECT_PREFIX) {
            return Ok(false);
        }
    }
    gw.membership
        .is_member(&p.tenant, &p.user_id, &q.group, now_ns())
        .await
        .map_err(|e| log::warn!("[gateway] membership: {e}"))
}

/// Whether the connection's principal may do `action` on `topic`.
pub async fn allowed(c: &Connection, topic_name: &str, action: Action) -> bool {
    let gw = &c.gw;
    let p = c.principal.borrow().clone();
    let now = super::now_s();
    let questions = gw.policy.membership_questions(&p, topic_name, action, now);
    let mut answers: HashMap<(String, String), Result<bool, ()>> = HashMap::new();
    for q in questions {
        let a = answer(gw, &p, &q).await;
        answers.insert((q.topic.clone(), q.group.clone()), a);
    }
    let decision = gw.policy.authorize(
        &p,
        topic_name,
        action,
        now,
        gw.settings.allow_anonymous,
        &mut |q: &MembershipQuestion| {
            answers
                .get(&(q.topic.clone(), q.group.clone()))
                .cloned()
                .unwrap_or(Err(()))
        },
    );
    decision == Decision::Allow
}

fn forbid(c: &Connection, id: &str) {
    c.gw.stats.borrow_mut().forbidden += 1;
    c.send_error(id, ErrorCode::Forbidden, "access denied");
}

/// Validates a topic named by a client and resolves the partition (one routine for every
/// op, spec §19 decision 17).
fn resolve(
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

fn internal(c: &Connection, id: &str, e: &StreamError) {
    match e {
        StreamError::InFlight => c.send_frame(text(|o| {
            frame::error(
                o,
                id,
                ErrorCode::Conflict,
                "duplicate send in flight, retry shortly",
                true,
            )
        })),
        StreamError::Limited(m) => c.send_frame(text(|o| {
            frame::error(o, id, ErrorCode::RateLimited, m, true)
        })),
        StreamError::Invalid(m) => c.send_error(id, ErrorCode::BadRequest, m),
        StreamError::Internal(m) => {
            log::warn!("[gateway] {m}");
            c.send_error(id, ErrorCode::Internal, "internal error; retry");
        }
    }
}

async fn subscribe(
    c: &Rc<Connection>,
    id: &str,
    topic_name: &str,
    partition: Option<u32>,
    from_seq: u64,
) {
    let Some((_, p)) = resolve(c, id, topic_name, partition) else {
        return;
    };
    if !allowed(c, topic_name, Action::Read).await {
        return forbid(c, id);
    }
    let key: SubKey = (topic_name.to_string(), p);
    let replacing = c.subs.borrow().contains_key(&key);
    if !replacing && c.subs.borrow().len() >= c.gw.settings.max_subscriptions {
        c.send_frame(text(|o| {
            frame::error(
                o,
                id,
                ErrorCode::RateLimited,
                "subscription limit reached",
                false,
            )
        }));
        return;
    }
    let from = if from_seq > 0 { Some(from_seq) } else { None };
    if let Err(e) = start_subscription(c, id, key, from, true).await {
        internal(c, id, &e);
    }
}

/// Starts streaming `key` at `from` (else the device's cursor, else the head); answers with
/// `gap` and `ack` when `reply`.
async fn start_subscription(
    c: &Rc<Connection>,
    id: &str,
    key: SubKey,
    from: Option<u64>,
    reply: bool,
) -> Result<(), StreamError> {
    let first = subscription::acquire(&c.gw, &key);
    let bounds = c.gw.engine.read(&key.0, key.1, u64::MAX, 1, first).await;
    let bounds = match bounds {
        Ok(b) => b,
        Err(e) => {
            subscription::release(&c.gw, &key);
            return Err(e);
        }
    };
    let from = match from {
        Some(f) => Some(f),
        None => match cursor_key(c, &key) {
            Some(k) => c.gw.engine.cursor(k).await.ok().flatten(),
            None => None,
        },
    };
    // A position past the head waits for nothing that can come: clamp it (spec §18 G14).
    let mut start = from.unwrap_or(bounds.next_seq).min(bounds.next_seq);
    if start < bounds.first_seq {
        c.send_frame(text(|o| {
            frame::gap(
                o,
                id,
                &key.0,
                key.1,
                bounds.first_seq,
                bounds.next_seq,
                "requested position was removed by retention",
            )
        }));
        start = bounds.first_seq;
    }
    if let Some(sid) = c.session.borrow().as_ref() {
        c.gw.sessions
            .borrow_mut()
            .set_position(sid, c.id, key.clone(), start);
    }
    if reply {
        c.send_frame(text(|o| {
            frame::subscribe_ack(
                o,
                id,
                &key.0,
                key.1,
                start,
                bounds.first_seq,
                bounds.next_seq,
            )
        }));
    }
    let task = boltq_shards::spawn(subscription::stream(Rc::clone(c), key.clone(), start));
    if let Some(old) = c.subs.borrow_mut().insert(key.clone(), task) {
        drop(old);
        subscription::release(&c.gw, &key);
    }
    Ok(())
}

fn unsubscribe(c: &Rc<Connection>, id: &str, topic_name: &str, partition: Option<u32>) {
    let p = match (topic::validate_topic(topic_name), partition) {
        (Ok(()), Some(p)) => Some(p),
        (Ok(()), None) => Namespace::of(topic_name).ok().map(|ns| {
            let count = c.gw.engine.partitions_of(topic_name, &ns);
            topic::partition_for(
                topic::partition_key(topic_name, &c.user()).as_bytes(),
                count,
            )
        }),
        _ => None,
    };
    if let Some(p) = p {
        let key = (topic_name.to_string(), p);
        if let Some(task) = c.subs.borrow_mut().remove(&key) {
            drop(task);
            subscription::release(&c.gw, &key);
        }
        if let Some(sid) = c.session.borrow().as_ref() {
            c.gw.sessions.borrow_mut().remove_position(sid, c.id, &key);
        }
    }
    c.send_frame(text(|o| frame::ack(o, id)));
}

async fn history(
    c: &Rc<Connection>,
    id: &str,
    topic_name: &str,
    partition: Option<u32>,
    from_seq: u64,
    limit: u32,
) {
    let Some((_, p)) = resolve(c, id, topic_name, partition) else {
        return;
    };
    if !allowed(c, topic_name, Action::Read).await {
        return forbid(c, id);
    }
    let cap = c.gw.settings.history_limit.max(1);
    let limit = if limit == 0 || limit > cap {
        cap
    } else {
        limit
    } as usize;
    match c
        .gw
        .engine
        .read(
            topic_name,
            p,
            from_seq,
            limit.min(READ_RECORDS_MAX.max(limit)),
            false,
        )
        .await
    {
        Ok(page) if page.gap && from_seq != 0 => c.send_frame(text(|o| {
            frame::gap(
                o,
                id,
                topic_name,
                p,
                page.first_seq,
                page.next_seq,
                "requested history was removed by retention",
            )
        })),
        Ok(page) => {
            let recs: Vec<frame::RecordOut<'_>> = page
                .records
                .iter()
                .map(frame::RecordOut::from_record)
                .collect();
            c.send_frame(text(|o| {
                frame::records(
                    o,
                    id,
                    topic_name,
                    p,
                    &recs,
                    Some((page.first_seq, page.next_seq)),
                )
            }))
        }
        Err(e) => internal(c, id, &e),
    }
}

fn clean_headers(headers: std::collections::BTreeMap<String, String>) -> Vec<(String, String)> {
    headers
        .into_iter()
        .filter(|(k, _)| !RESERVED_HEADERS.contains(&k.as_str()))
        .collect()
}

fn to_bytes_headers(h: Vec<(String, String)>) -> Vec<(Bytes, Bytes)> {
    let mut v: Vec<(Bytes, Bytes)> = h
        .into_iter()
        .map(|(k, v)| (Bytes::from(k), Bytes::from(v)))
        .collect();
    v.sort();
    v
}

#[allow(clippy::too_many_arguments)]
async fn send(
    c: &Rc<Connection>,
    id: &str,
    conversation: &str,
    kind: ConversationKind,
    client_msg_id: &str,
    payload: Vec<u8>,
    headers: std::collections::BTreeMap<String, String>,
) {
    let is_group = kind == ConversationKind::Group;
    let topic_name = topic::conversation_topic(is_group, conversation);
    let Some((_, p)) = resolve(c, id, &topic_name, None) else {
        return;
    };
    if !allowed(c, &topic_name, Action::Write).await {
        return forbid(c, id);
    }
    let p_user = c.principal.borrow().clone();
    let members: Vec<String> = if is_group {
        match c.gw.membership.members(&p_user.tenant, conversation).await {
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
    let message_id: String =
        c.gw.random_bytes::<16>()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
    let mut server = vec![
        ("message_id".to_string(), message_id.clone()),
        ("sender".to_string(), p_user.user_id.clone()),
        ("kind".to_string(), kind.as_str().to_string()),
        ("conversation".to_string(), conversation.to_string()),
    ];
    if !client_msg_id.is_empty() {
        server.push(("client_msg_id".to_string(), client_msg_id.to_string()));
    }
    let mut all = clean_headers(headers);
    all.extend(server.iter().cloned());
    let pointer_members = match fanout::plan(&members, c.gw.settings.fanout_on_write_limit) {
        fanout::Strategy::OnWrite(m) => m,
        fanout::Strategy::OnRead => Vec::new(),
    };
    let req = AppendReq {
        topic: topic_name.clone(),
        partition: p,
        key: Bytes::from(conversation.to_string()),
        headers: to_bytes_headers(all),
        payload: Bytes::from(payload),
        user: p_user.user_id.clone(),
        dedup: (!client_msg_id.is_empty())
            .then(|| (conversation.to_string(), client_msg_id.to_string())),
        pointer_members,
        pointer_headers: server,
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

async fn publish(
    c: &Rc<Connection>,
    id: &str,
    topic_name: &str,
    key: &str,
    headers: std::collections::BTreeMap<String, String>,
    payload: Vec<u8>,
) {
    let ns = match topic::validate_topic(topic_name).and_then(|()| Namespace::of(topic_name)) {
        Ok(ns) => ns,
        Err(e) => return c.send_error(id, ErrorCode::BadRequest, &e.to_string()),
    };
    if ns.is_conversation() || matches!(ns, Namespace::Inbox { .. }) {
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
        pointer_headers: Vec::new(),
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

async fn commit(c: &Rc<Connection>, id: &str, topic_name: &str, partition: Option<u32>, seq: u64) {
    let Some((_, p)) = resolve(c, id, topic_name, partition) else {
        return;
    };
    if !allowed(c, topic_name, Action::Read).await {
        return forbid(c, id);
    }
    let Some(key) = cursor_key(c, &(topic_name.to_string(), p)) else {
        return c.send_error(id, ErrorCode::BadRequest, "invalid cursor key");
    };
    match c.gw.engine.commit(key, seq).await {
        Ok(()) => c.send_frame(text(|o| frame::ack(o, id))),
        Err(StreamError::Invalid(m)) => c.send_error(id, ErrorCode::NotFound, &m),
        Err(e) => internal(c, id, &e),
    }
}
