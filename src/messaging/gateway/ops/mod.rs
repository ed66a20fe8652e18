//! One file per client operation (spec/messaging-edge.md §2.5), and [`handle`], which
//! dispatches a decoded request to it. Shared steps live beside them: `access` (the ACL
//! question), `resolve` (topic and partition, cursor keys), `reply` (engine errors as
//! error frames), `headers` (client headers into a record), `leave` (disconnect).

mod access;
mod commit;
mod headers;
mod hello;
mod history;
mod leave;
mod ping;
mod presence;
mod publish;
mod reply;
mod resolve;
mod send;
mod subscribe;
mod typing;
mod unsubscribe;
mod watch_presence;

pub use access::allowed;
pub use hello::{close_taken_over, hello_first};
pub use leave::leave_ephemeral;
pub use presence::heartbeat;
pub use typing::SIGNAL_TOKEN_TIMEOUT_MS;

use super::connection::Connection;
use super::frame::{self, ErrorCode, Request};
use super::text;
use std::rc::Rc;

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
        Request::Ping { id } => ping::ping(c, &id),
        Request::Subscribe {
            id,
            topic,
            partition,
            from_seq,
        } => subscribe::subscribe(c, &id, &topic, partition, from_seq).await,
        Request::Unsubscribe {
            id,
            topic,
            partition,
        } => unsubscribe::unsubscribe(c, &id, &topic, partition),
        Request::History {
            id,
            topic,
            partition,
            from_seq,
            limit,
        } => history::history(c, &id, &topic, partition, from_seq, limit).await,
        Request::Send {
            id,
            conversation,
            kind,
            client_msg_id,
            payload,
            headers,
        } => {
            send::send(
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
        } => commit::commit(c, &id, &topic, partition, seq).await,
        Request::Publish {
            id,
            topic,
            key,
            headers,
            payload,
        } => publish::publish(c, &id, &topic, &key, headers, payload).await,
        Request::Typing {
            id,
            conversation,
            typing: on,
        } => typing::typing(c, &id, &conversation, on).await,
        Request::Presence { id, state } => presence::presence(c, &id, state),
        Request::WatchPresence { id, users } => watch_presence::watch_presence(c, &id, users).await,
    }
}
