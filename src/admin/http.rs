//! The admin listener's connection loop: requests through the admin routes, server-sent
//! events, and the take-over path the server may mount (the gateway's WebSocket). The
//! HTTP codec itself is `crate::http`.

use super::router::{self, AdminCtx};
use crate::http::{encode_response, read_request};
use boltq_io::listener::Conn;
use futures_lite::AsyncWriteExt;
use std::future::Future;
use std::rc::Rc;

/// Serves requests on `conn` until the client closes, a deadline passes, an error, or
/// `stop` resolves while the connection waits for a new request (shutdown must not wait for
/// idle keep-alive clients).
pub async fn serve(mut conn: Conn, ctx: Rc<AdminCtx>, stop: impl Future<Output = ()>) {
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut stop = std::pin::pin!(stop);
    let mut out = Vec::new();
    loop {
        let req = match read_request(&mut conn, &mut buf, stop.as_mut()).await {
            Ok(Some(req)) => req,
            Ok(None) => return,
            Err(mut response) => {
                // No request to read an `Origin` from: only `"*"` lets a browser see it.
                ctx.cors.apply(None, &mut response);
                crate::http::refuse(&mut conn, &response).await;
                return;
            }
        };
        if let Some(takeover) = ctx.takeover.as_ref().filter(|t| t.claims(&req)) {
            // E.g. the gateway's WebSocket: it owns the connection from here on, and no
            // admin timeout applies to it.
            let leftover = std::mem::take(&mut buf);
            takeover.serve(conn, req, leftover).await;
            return;
        }
        if req.path == "/subscribe" && req.method == "GET" {
            // Server-sent events take over the connection until the client leaves.
            Box::pin(router::serve_events(conn, &req, ctx, stop.as_mut())).await;
            return;
        }
        // Boxed: route futures are large, and this connection's task lives as long as the
        // connection (a gateway WebSocket for days) — it should not carry their space.
        let mut response = Box::pin(router::route(&req, &ctx)).await;
        ctx.cors.apply(req.header("origin"), &mut response);
        out.clear();
        encode_response(&response, req.method == "HEAD", req.close, &mut out);
        if conn.write_all(&out).await.is_err() || req.close {
            return;
        }
    }
}
