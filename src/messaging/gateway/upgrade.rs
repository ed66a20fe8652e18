//! The HTTP side of opening a gateway connection (spec/messaging-edge.md §2.1): shutdown
//! check, credential, token or shared key, origin policy, then the RFC 6455 handshake.
//! Everything is decided before the upgrade, so a refused client gets a plain HTTP status
//! and the server has spent no WebSocket state on it.

use super::GatewayCtx;
use crate::http::{encode_response, Request, Response};
use crate::messaging::identity::principal::Principal;
use boltq_io::listener::Conn;
use futures_lite::AsyncWriteExt;
use std::rc::Rc;

fn text(status: u16, body: &str) -> Response {
    Response {
        status,
        content_type: "text/plain; charset=utf-8",
        body: format!("{body}\n").into_bytes(),
        headers: Vec::new(),
    }
}

/// The credential of §2.1 step 2: `Authorization` (a `Bearer ` prefix, any case, is
/// stripped), else the `token` query parameter.
pub fn credential(req: &Request) -> Option<String> {
    if let Some(h) = req.header("authorization").filter(|h| !h.is_empty()) {
        let v = match h.get(..7) {
            Some(p) if p.eq_ignore_ascii_case("bearer ") => &h[7..],
            _ => h,
        };
        return Some(v.trim().to_string());
    }
    req.query
        .iter()
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.clone())
        .filter(|v| !v.is_empty())
}

/// Whether `origin` may open a connection: an empty list allows all; otherwise the whole
/// header must equal an entry, ignoring ASCII case. Native clients send no Origin.
pub fn origin_allowed(allowed: &[String], origin: Option<&str>) -> bool {
    match origin {
        None => true,
        Some(_) if allowed.is_empty() => true,
        Some(o) => allowed.iter().any(|a| a.eq_ignore_ascii_case(o)),
    }
}

/// `Sec-WebSocket-Accept` for a client key (RFC 6455 §4.2.2), as tungstenite derives it.
pub fn accept_key(client_key: &str) -> String {
    async_tungstenite::tungstenite::handshake::derive_accept_key(client_key.as_bytes())
}

/// Decides who the client is, or the response refusing it.
pub fn authenticate(req: &Request, gw: &GatewayCtx) -> Result<Principal, Response> {
    if gw.closing.get() {
        return Err(text(503, "gateway shutting down"));
    }
    let Some(cred) = credential(req) else {
        return Err(text(401, "unauthorized"));
    };
    if let Some(key) = gw.settings.shared_key.as_deref() {
        if crate::config::secret::secret_matches(key, &cred) {
            return Ok(Principal::anonymous());
        }
    }
    match gw.verifier.verify(&cred, super::now_s()) {
        Ok(p) => Ok(p),
        Err(e) => {
            gw.stats.borrow_mut().auth_failures += 1;
            log::debug!("[gateway] token refused: {e}");
            Err(text(401, "unauthorized"))
        }
    }
}

/// Serves a request for the gateway path: refuses it with a status, or upgrades and runs
/// the connection until it ends. `leftover` holds bytes read past the request.
pub async fn serve(mut conn: Conn, req: Request, leftover: Vec<u8>, gw: Rc<GatewayCtx>) {
    let refuse = |r: Response| {
        let mut out = Vec::new();
        encode_response(&r, false, true, &mut out);
        out
    };
    let principal = match authenticate(&req, &gw) {
        Ok(p) => p,
        Err(r) => {
            let _ = conn.write_all(&refuse(r)).await;
            return;
        }
    };
    if !origin_allowed(&gw.settings.allowed_origins, req.header("origin")) {
        let _ = conn
            .write_all(&refuse(text(403, "origin not allowed")))
            .await;
        return;
    }
    let upgrade_ok = req.method == "GET"
        && req
            .header("upgrade")
            .is_some_and(|u| u.eq_ignore_ascii_case("websocket"))
        && req.header("sec-websocket-version") == Some("13");
    let Some(key) = req.header("sec-websocket-key").filter(|_| upgrade_ok) else {
        let _ = conn
            .write_all(&refuse(text(400, "expected a WebSocket upgrade")))
            .await;
        return;
    };
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
        accept_key(key)
    );
    if conn.write_all(response.as_bytes()).await.is_err() {
        return;
    }
    // The request's headers are not kept for the connection's life.
    drop(req);
    // The connection's life runs in its own task, so the HTTP server's task (sized for
    // every admin route) ends here: an idle WebSocket then costs only what it uses.
    // Shutdown finds it in `gw.conns`.
    let life = super::connection::open(conn, leftover, principal, gw).await;
    boltq_shards::spawn(life).detach();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)], query: &[(&str, &str)]) -> Request {
        Request {
            method: "GET".into(),
            path: "/ws".into(),
            query: query
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            headers: headers
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            body: Vec::new(),
            close: false,
        }
    }

    #[test]
    fn accept_key_matches_rfc_6455_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn credential_prefers_the_header_and_strips_bearer_in_any_case() {
        assert_eq!(
            credential(&req(&[("authorization", "Bearer abc")], &[])).as_deref(),
            Some("abc")
        );
        assert_eq!(
            credential(&req(&[("authorization", "bearer abc")], &[])).as_deref(),
            Some("abc")
        );
        assert_eq!(
            credential(&req(&[("authorization", "abc")], &[])).as_deref(),
            Some("abc")
        );
        assert_eq!(
            credential(&req(&[("authorization", "h")], &[("token", "q")])).as_deref(),
            Some("h")
        );
        assert_eq!(
            credential(&req(&[], &[("token", "q")])).as_deref(),
            Some("q")
        );
        assert_eq!(credential(&req(&[], &[])), None);
    }

    #[test]
    fn origin_policy() {
        let list = vec!["https://app.example".to_string()];
        assert!(origin_allowed(&[], Some("https://evil.example")));
        assert!(origin_allowed(&list, None));
        assert!(origin_allowed(&list, Some("HTTPS://APP.example")));
        assert!(!origin_allowed(&list, Some("https://app.example.evil")));
    }
}
