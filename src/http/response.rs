//! Outgoing responses of the listeners: the type, its constructors, and the encoder.

/// A response ready to be written.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// Extra headers (e.g. `Cache-Control`).
    pub headers: Vec<(&'static str, String)>,
}

impl Response {
    /// A JSON body followed by a newline, as v1 sends.
    pub fn json(status: u16, value: &serde_json::Value) -> Response {
        let mut body = serde_json::to_vec(value).expect("a Value always serialises");
        body.push(b'\n');
        Response::text(status, "application/json", body)
    }

    pub fn error(status: u16, message: &str) -> Response {
        Response::json(status, &serde_json::json!({ "error": message }))
    }

    pub fn text(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            content_type,
            body: body.into(),
            headers: Vec::new(),
        }
    }
}

/// Appends the response's bytes. No CORS headers of its own: the admin listener puts the
/// ones a request's origin may see among `r.headers` (`admin::cors`, issue 17; v1 wrote
/// `Access-Control-Allow-Origin: *` here for every answer, the gateway's too).
pub fn encode_response(r: &Response, head_only: bool, close: bool, out: &mut Vec<u8>) {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len(),
    );
    for (k, v) in &r.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    out.extend_from_slice(head.as_bytes());
    if !head_only {
        out.extend_from_slice(&r.body);
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        307 => "Temporary Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}
