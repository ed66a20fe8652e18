//! Outbound requests and answers: the types callers build and get back, the checks that
//! keep a caller's header from breaking the framing, and the hyper request they become.

use super::error::HttpError;
use super::url::ParsedUrl;
use bytes::Bytes;
use http_body_util::Full;

/// Most headers a caller may add to one request.
pub const REQUEST_HEADERS_MAX: usize = 32;

/// Headers the client writes itself; a caller setting them could break the framing.
const OWN_HEADERS: [&str; 4] = ["host", "content-length", "transfer-encoding", "connection"];

/// The request methods the outbound calls need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }

    fn to_hyper(self) -> hyper::Method {
        match self {
            Method::Get => hyper::Method::GET,
            Method::Post => hyper::Method::POST,
            Method::Put => hyper::Method::PUT,
            Method::Delete => hyper::Method::DELETE,
        }
    }
}

/// One outbound request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: Method,
    pub url: ParsedUrl,
    /// Sent as given; `Host`, `Content-Length`, `Transfer-Encoding` and `Connection` are
    /// the client's own and refused here.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpRequest {
    pub fn get(url: ParsedUrl) -> HttpRequest {
        HttpRequest {
            method: Method::Get,
            url,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }
}

/// A successful (2xx) answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }
}

pub(super) fn header_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// The hyper request for `req`, origin-form target: `Host`, the caller's headers, and
/// `Content-Length` when there is a body or the method normally carries one.
pub(super) fn to_hyper(req: &HttpRequest) -> Result<hyper::Request<Full<Bytes>>, HttpError> {
    if req.headers.len() > REQUEST_HEADERS_MAX {
        return Err(HttpError::Malformed(format!(
            "request has over {REQUEST_HEADERS_MAX} headers"
        )));
    }
    let mut builder = hyper::Request::builder()
        .method(req.method.to_hyper())
        .uri(req.url.path_and_query.as_str())
        .header("host", req.url.authority());
    for (name, value) in &req.headers {
        check_request_header(name, value)?;
        builder = builder.header(name.as_str(), value.as_str());
    }
    if !req.body.is_empty() || matches!(req.method, Method::Post | Method::Put) {
        builder = builder.header("content-length", req.body.len());
    }
    builder
        .body(Full::new(Bytes::from(req.body.clone())))
        .map_err(|e| HttpError::Malformed(format!("request: {e}")))
}

fn check_request_header(name: &str, value: &str) -> Result<(), HttpError> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(HttpError::Malformed(format!(
            "request header name {name:?} is not a valid token"
        )));
    }
    if OWN_HEADERS.iter().any(|h| name.eq_ignore_ascii_case(h)) {
        return Err(HttpError::Malformed(format!(
            "request header {name} is set by the client itself"
        )));
    }
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(HttpError::Malformed(format!(
            "request header {name} holds a line break or NUL"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::url::parse_url;
    use super::*;

    fn url(s: &str) -> ParsedUrl {
        parse_url(s).unwrap()
    }

    #[test]
    fn requests_carry_host_headers_and_length() {
        let mut req = HttpRequest::get(url("http://h:8080/p?q=1"));
        req.headers
            .push(("Accept".into(), "application/json".into()));
        let r = to_hyper(&req).unwrap();
        assert_eq!(
            (r.method().as_str(), r.uri().to_string()),
            ("GET", "/p?q=1".into())
        );
        assert_eq!(r.headers()["host"], "h:8080");
        assert_eq!(r.headers()["accept"], "application/json");
        assert!(r.headers().get("content-length").is_none());
        req.method = Method::Post;
        req.body = b"{}".to_vec();
        let r = to_hyper(&req).unwrap();
        assert_eq!(r.method(), hyper::Method::POST);
        assert_eq!(r.headers()["content-length"], "2");
        req.body.clear();
        assert_eq!(to_hyper(&req).unwrap().headers()["content-length"], "0");
    }

    #[test]
    fn request_headers_that_could_break_framing_are_refused() {
        for (name, value) in [
            ("X-A", "a\r\nEvil: 1"),
            ("X-A", "a\nb"),
            ("Bad Name", "v"),
            ("", "v"),
            ("content-length", "5"),
            ("Host", "other"),
            ("Transfer-Encoding", "chunked"),
            ("Connection", "close"),
        ] {
            let mut req = HttpRequest::get(url("http://h/"));
            req.headers.push((name.into(), value.into()));
            assert!(
                matches!(to_hyper(&req), Err(HttpError::Malformed(_))),
                "{name:?}: {value:?}"
            );
        }
        let mut req = HttpRequest::get(url("http://h/"));
        req.headers = vec![("X".into(), "v".into()); REQUEST_HEADERS_MAX + 1];
        assert!(matches!(to_hyper(&req), Err(HttpError::Malformed(_))));
    }
}
