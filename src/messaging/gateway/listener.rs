//! The gateway's own listener (`messaging.gateway.port` ≠ 0): the WebSocket path and a
//! liveness route for load balancers, nothing of the admin API.

use super::GatewayCtx;
use crate::http::{encode_response, read_request, Response};
use boltq_io::listener::Conn;
use futures_lite::AsyncWriteExt;
use std::future::Future;
use std::rc::Rc;

fn text(status: u16, body: &str) -> Response {
    Response {
        status,
        content_type: "text/plain; charset=utf-8",
        body: body.as_bytes().to_vec(),
        headers: Vec::new(),
    }
}

/// Serves one connection of the dedicated listener: `GET /healthz` → `200 ok`, the gateway
/// path → the WebSocket, anything else → 404.
pub async fn serve(mut conn: Conn, gw: Rc<GatewayCtx>, stop: impl Future<Output = ()>) {
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut stop = std::pin::pin!(stop);
    let mut out = Vec::new();
    loop {
        let req = match read_request(&mut conn, &mut buf, stop.as_mut()).await {
            Ok(Some(req)) => req,
            Ok(None) => return,
            Err(response) => {
                crate::http::refuse(&mut conn, &response).await;
                return;
            }
        };
        if req.path == gw.settings.path {
            let leftover = std::mem::take(&mut buf);
            super::upgrade::serve(conn, req, leftover, gw).await;
            return;
        }
        let response = match (req.method.as_str(), req.path.as_str()) {
            ("GET" | "HEAD", "/healthz") if gw.closing.get() => text(503, "shutting down"),
            ("GET" | "HEAD", "/healthz") => text(200, "ok"),
            _ => text(404, "not found"),
        };
        out.clear();
        encode_response(&response, req.method == "HEAD", req.close, &mut out);
        if conn.write_all(&out).await.is_err() || req.close {
            return;
        }
    }
}
