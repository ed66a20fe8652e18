//! `hello` (§2.5.1): the first frame of a connection. Binds the device, creates or resumes
//! the session (here or on the shard that holds it), answers `welcome`, and restarts a
//! resumed session's subscriptions.

use super::access::allowed;
use super::resolve::cursor_key;
use super::subscribe::start_subscription;
use crate::messaging::gateway::connection::Connection;
use crate::messaging::gateway::frame::{self, ErrorCode, Request};
use crate::messaging::gateway::session::{Resume, SessionState, SubKey};
use crate::messaging::gateway::{text, GatewayCtx};
use crate::messaging::identity::acl::Action;
use crate::messaging::topic;
use base64::Engine as _;
use std::rc::Rc;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
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
    let device = match hello_device(token_device, device_id) {
        Ok(device) => device,
        Err(m) => {
            c.send_error(&id, ErrorCode::BadRequest, m);
            c.out
                .close(frame::close::POLICY, frame::close::POLICY_REASON, true);
            return false;
        }
    };
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
    super::presence::bind_presence(c);
    if was_resumed {
        restore_subscriptions(c, state).await;
    }
    true
}

/// The device a `hello` binds: the frame's `device_id`, else the token's. Refused, with the
/// message to send, when the two disagree or the result is not a valid id.
fn hello_device(token_device: String, device_id: String) -> Result<String, &'static str> {
    if !token_device.is_empty() && !device_id.is_empty() && device_id != token_device {
        return Err("device_id differs from the token's device");
    }
    let device = if device_id.is_empty() {
        token_device
    } else {
        device_id
    };
    if device.is_empty() || !topic::valid_id(&device) {
        return Err("device_id is required (1-128 of A-Z a-z 0-9 _ @ + -)");
    }
    Ok(device)
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
        boltq_io::store::now_ns(),
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
    // Another shard may hold it (the kernel picks the accepting shard), or, in a cluster,
    // another node (the load balancer picks it).
    let state = match gw.engine_take_remote(sid, secret, user).await {
        Some(state) => state,
        None => gw.take_from_peers(sid, secret, user).await?,
    };
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

#[cfg(test)]
mod tests {
    use super::hello_device;

    fn device(token: &str, frame: &str) -> Result<String, &'static str> {
        hello_device(token.to_string(), frame.to_string())
    }

    #[test]
    fn the_frame_device_wins_the_token_device_fills_in() {
        assert_eq!(device("", "phone").unwrap(), "phone");
        assert_eq!(device("phone", "").unwrap(), "phone");
        assert_eq!(device("phone", "phone").unwrap(), "phone");
    }

    #[test]
    fn a_device_other_than_the_tokens_is_refused() {
        let e = device("phone", "laptop").unwrap_err();
        assert!(e.contains("differs from the token"), "{e}");
    }

    #[test]
    fn a_missing_or_invalid_device_is_refused() {
        for (token, frame) in [("", ""), ("", "has space"), ("bad/slash", "")] {
            let e = device(token, frame).unwrap_err();
            assert!(
                e.starts_with("device_id is required"),
                "{token:?} {frame:?}: {e}"
            );
        }
    }
}
