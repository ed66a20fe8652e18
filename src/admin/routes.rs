//! Route table of the admin server.

use crate::server::state::ServerState;

/// A response ready to be written.
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Response {
    fn json(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: "application/json",
            body: body.as_bytes().to_vec(),
        }
    }
}

/// Answers one request. `method` and `path` come straight from the parsed request line.
pub fn route(method: &str, path: &str, state: &ServerState) -> Response {
    let path = path.split('?').next().unwrap_or("");
    if method != "GET" && method != "HEAD" {
        return Response::json(405, r#"{"error":"method not allowed"}"#);
    }
    match path {
        "/livez" => Response::json(200, r#"{"status":"alive"}"#),
        "/readyz" if state.is_ready() => Response::json(200, r#"{"status":"ready"}"#),
        "/readyz" => Response::json(503, r#"{"status":"not ready"}"#),
        _ => Response::json(404, r#"{"error":"not found"}"#),
    }
}
