//! A path whose connections leave the listener's request loop for another protocol (the
//! gateway's WebSocket on the admin port). The listener only knows the path and a handler;
//! whoever wires the listeners decides what, if anything, is mounted there.

use super::request::Request;
use boltq_io::listener::Conn;
use std::future::Future;
use std::pin::Pin;

/// What a take-over handler runs: the connection for as long as it lives.
pub type TakeoverFuture = Pin<Box<dyn Future<Output = ()>>>;

type Handler = Box<dyn Fn(Conn, Request, Vec<u8>) -> TakeoverFuture>;

/// The handler of one path: given the connection, the request for the path, and the bytes
/// read past that request.
pub struct Takeover {
    path: String,
    handler: Handler,
}

impl Takeover {
    pub fn new(
        path: impl Into<String>,
        handler: impl Fn(Conn, Request, Vec<u8>) -> TakeoverFuture + 'static,
    ) -> Takeover {
        Takeover {
            path: path.into(),
            handler: Box::new(handler),
        }
    }

    /// Whether `req` is for this handler's path (the query string plays no part).
    pub fn claims(&self, req: &Request) -> bool {
        req.path == self.path
    }

    /// Hands the connection over.
    pub fn serve(&self, conn: Conn, req: Request, leftover: Vec<u8>) -> TakeoverFuture {
        (self.handler)(conn, req, leftover)
    }
}

impl std::fmt::Debug for Takeover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Takeover")
            .field("path", &self.path)
            .finish()
    }
}
