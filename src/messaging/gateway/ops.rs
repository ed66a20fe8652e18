//! One function per client operation (spec/messaging-edge.md §2.5).

use super::connection::Connection;
use super::frame::{self, ConversationKind, ErrorCode, Request, SentOut};
use super::session::{Resume, SessionState, SubKey};
use super::{subscription, text, GatewayCtx};
use crate::messaging::cursor::CursorKey;
use crate::messaging::engine::mesh::{AppendReq, StreamError};
use crate::messaging::engine::READ_RECORDS_MAX;
use crate::messaging::fanout::RESERVED_HEADERS;
use crate::messaging::identity::acl::{Action, Decision, MembershipQuestion};
use crate::messaging::identity::principal::Principal;
use crate::messaging::presence::{self, PresenceMsg, Watcher};
use crate::messaging::signals::{self, Signal, SignalMsg};
use crate::messaging::topic::{self, Namespace};
use crate::messaging::{fanout, membership};
use base64::Engine as _;
use bytes::Bytes;
use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;

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
    bind_presence(c);
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
        Request::Ping { id } => {
            heartbeat(c);
            c.send_frame(text(|o| frame::pong(o, &id)))
        }
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
        Request::Typing {
            id,
            conversation,
            typing: on,
        } => typing(c, &id, &conversation, on).await,
        Request::Presence { id, state } => {
            set_presence(c, state);
            c.send_frame(text(|o| frame::ack(o, &id)))
        }
        Request::WatchPresence { id, users } => watch_presence(c, &id, users).await,
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

/// A fresh message id: 16 random bytes as 32 lower-case hex digits, written into one
/// string of the final size (no string per byte).
fn new_message_id(gw: &GatewayCtx) -> String {
    use std::fmt::Write as _;
    let bytes = gw.random_bytes::<16>();
    let mut id = String::with_capacity(2 * bytes.len());
    for b in bytes {
        write!(id, "{b:02x}").expect("writing to a String cannot fail");
    }
    id
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
    // Pointer records repeat the server's headers; without pointers nothing else needs
    // them, so they move into the record instead of being copied.
    let pointer_headers = if pointer_members.is_empty() {
        all.append(&mut server);
        Vec::new()
    } else {
        all.extend(server.iter().cloned());
        server
    };
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
        pointer_headers,
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

// ---- presence and typing (spec §2.5.7–§2.5.10, §9; docs/presence-and-typing.md) --------

/// Binds this device's presence at the user's owner shard; the anonymous principal has no
/// presence (§9.1 "Bind").
fn bind_presence(c: &Connection) {
    let user = c.user();
    if user.is_empty() || c.principal.borrow().anonymous {
        return;
    }
    let device = c.device.borrow().clone();
    c.gw.presence_to_owner(
        &user,
        PresenceMsg::Bind {
            user: user.clone(),
            device: device.clone(),
            conn: c.id,
        },
    );
    *c.presence.borrow_mut() = Some((user, device));
}

/// Refreshes this device's presence session (server ping tick, `ping` op).
pub fn heartbeat(c: &Connection) {
    if let Some((user, device)) = c.presence.borrow().clone() {
        let msg = PresenceMsg::Heartbeat {
            user: user.clone(),
            device,
            conn: c.id,
        };
        c.gw.presence_to_owner(&user, msg);
    }
}

/// The `presence` op: sets this device's state (no ACL; unbound connections are ignored).
fn set_presence(c: &Connection, state: crate::messaging::presence::PresenceState) {
    if let Some((user, device)) = c.presence.borrow().clone() {
        let msg = PresenceMsg::State {
            user: user.clone(),
            device,
            conn: c.id,
            state,
        };
        c.gw.presence_to_owner(&user, msg);
    }
}

/// The `watch_presence` op: every user checked as read on `presence.<user>` first (a
/// denial leaves the previous set active), then the new set replaces the old one, the ack
/// goes out, and each watched user's owner sends one snapshot (§19 decision 19).
async fn watch_presence(c: &Rc<Connection>, id: &str, users: Vec<String>) {
    if users.len() > presence::WATCHED_USERS_PER_CONNECTION_MAX {
        let m = format!(
            "users has {} entries; the limit is {}",
            users.len(),
            presence::WATCHED_USERS_PER_CONNECTION_MAX
        );
        return c.send_error(id, ErrorCode::BadRequest, &m);
    }
    if let Some(bad) = users.iter().find(|u| !topic::valid_id(u)) {
        let m = format!("invalid user id {bad:?}");
        return c.send_error(id, ErrorCode::BadRequest, &m);
    }
    for user in &users {
        if !allowed(c, &format!("presence.{user}"), Action::Read).await {
            return forbid(c, id);
        }
    }
    let new: BTreeSet<String> = users.into_iter().collect();
    let old = {
        let mut watching = c.gw.ephemeral.watching.borrow_mut();
        let old = watching.remove(&c.id).unwrap_or_default();
        if !new.is_empty() {
            watching.insert(c.id, new.clone());
        }
        old
    };
    let watcher = Watcher {
        shard: c.gw.engine.shard().id(),
        conn: c.id,
    };
    for user in old.difference(&new) {
        let msg = PresenceMsg::Unwatch {
            user: user.clone(),
            watcher,
        };
        c.gw.presence_to_owner(user, msg);
    }
    c.send_frame(text(|o| frame::ack(o, id)));
    for user in &new {
        let msg = PresenceMsg::Watch {
            user: user.clone(),
            watcher,
        };
        c.gw.presence_to_owner(user, msg);
    }
}

/// The `typing` op (§2.5.7): write access to `typing.<conversation>`, an implicit listen on
/// first use, one token of the sender's budget, then the signal goes to the topic's owner.
async fn typing(c: &Rc<Connection>, id: &str, conversation: &str, on: bool) {
    let topic_name = topic::typing_topic(conversation);
    if let Err(e) = topic::validate_topic(&topic_name) {
        return c.send_error(id, ErrorCode::BadRequest, &e.to_string());
    }
    if !allowed(c, &topic_name, Action::Write).await {
        return forbid(c, id);
    }
    listen_typing(c, &topic_name);
    let user = c.user();
    let Ok(granted) = take_signal_token(c, &signals::limiter_key(&user, c.id)).await else {
        return c.send_error(id, ErrorCode::Internal, "rate limiter unreachable; retry");
    };
    if !granted {
        c.gw.stats.borrow_mut().signals_limited += 1;
        return c.send_frame(text(|o| {
            frame::error(
                o,
                id,
                ErrorCode::RateLimited,
                "typing signals are rate limited",
                true,
            )
        }));
    }
    let kind = if on {
        signals::KIND_TYPING
    } else {
        signals::KIND_STOP_TYPING
    };
    let signal = Signal {
        topic: topic_name.clone(),
        sender: user,
        kind: kind.to_string(),
        headers: Vec::new(),
        payload: Vec::new(),
        at_ns: now_ns(),
    };
    let payload_max = c.gw.ephemeral.settings.borrow().signals.max_payload as usize;
    if let Err(e) = signals::validate(&signal, payload_max) {
        return c.send_error(id, ErrorCode::BadRequest, &e.to_string());
    }
    c.gw.signal_to_owner(&topic_name, SignalMsg::Publish(signal));
    c.send_frame(text(|o| frame::ack(o, id)));
}

/// Listens to a typing topic on this connection's first signal there; past
/// `TOPICS_PER_CONNECTION_MAX` the connection simply does not listen (§2.5.7 step 4:
/// subscription errors are ignored).
fn listen_typing(c: &Connection, topic_name: &str) {
    {
        let mut topics = c.typing.borrow_mut();
        if topics.contains(topic_name) || topics.len() >= signals::TOPICS_PER_CONNECTION_MAX {
            return;
        }
        topics.insert(topic_name.to_string());
    }
    let listener = signals::Listener {
        shard: c.gw.engine.shard().id(),
        conn: c.id,
        user: c.user(),
    };
    let msg = SignalMsg::Listen {
        topic: topic_name.to_string(),
        listener,
    };
    c.gw.signal_to_owner(topic_name, msg);
}

/// Asks the shard owning `key`'s bucket for one token (here when this shard owns it).
async fn take_signal_token(c: &Connection, key: &str) -> Result<bool, ()> {
    let shard = &c.gw.port;
    let owner = presence::owner_of_user(key, shard.count());
    if owner == shard.id() {
        return Ok(c.gw.take_signal_token(key));
    }
    let msg = super::GatewayMsg::Signal(SignalMsg::Take {
        key: key.to_string(),
    });
    match shard.request(owner, msg, SIGNAL_TOKEN_TIMEOUT_MS).await {
        Ok(super::GatewayMsg::Signal(SignalMsg::Taken(ok))) => Ok(ok),
        _ => Err(()),
    }
}

/// How long a `typing` op waits for the rate limiter on another shard.
pub const SIGNAL_TOKEN_TIMEOUT_MS: u64 = 1_000;

/// Leaves the ephemeral path at disconnect: unbinds presence at once (§19 decision 1; the
/// owner ignores it if a newer connection holds the device), drops the watches and the
/// typing listens.
pub fn leave_ephemeral(c: &Connection) {
    if let Some((user, device)) = c.presence.borrow_mut().take() {
        let msg = PresenceMsg::Unbind {
            user: user.clone(),
            device,
            conn: c.id,
        };
        c.gw.presence_to_owner(&user, msg);
    }
    let watched = c.gw.ephemeral.watching.borrow_mut().remove(&c.id);
    let watcher = Watcher {
        shard: c.gw.engine.shard().id(),
        conn: c.id,
    };
    for user in watched.unwrap_or_default() {
        let msg = PresenceMsg::Unwatch {
            user: user.clone(),
            watcher,
        };
        c.gw.presence_to_owner(&user, msg);
    }
    let topics = std::mem::take(&mut *c.typing.borrow_mut());
    for t in topics {
        let msg = SignalMsg::Unlisten {
            topic: t.clone(),
            shard: c.gw.engine.shard().id(),
            conn: c.id,
        };
        c.gw.signal_to_owner(&t, msg);
    }
}
