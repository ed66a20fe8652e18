//! CORS of the admin listener (`admin.cors_origins`, issue 17).
//!
//! v1 sent `Access-Control-Allow-Origin: *` on every answer, so any web page an operator
//! opened could call the admin API through their browser (purge queues, read messages;
//! with no API key, nothing stopped it). Now a response carries CORS headers only when the
//! request's `Origin` equals a configured origin, byte for byte, and then it echoes that
//! origin; `"*"` in the list restores v1's headers for every request. Clients that are not
//! browsers never send or read these headers, so they see no difference.

/// What the admin routes' answers say to browsers.
#[derive(Debug, Clone, Default)]
pub struct Cors {
    /// Origins allowed one by one (validated by config: `scheme://host[:port]`).
    origins: Vec<String>,
    /// `"*"` was configured: every request gets v1's headers.
    any: bool,
}

const ALLOW_METHODS: &str = "GET, POST, DELETE, OPTIONS";
const ALLOW_HEADERS: &str = "Content-Type, X-API-Key";

impl Cors {
    /// From `admin.cors_origins`.
    pub fn new(origins: &[String]) -> Cors {
        Cors {
            any: origins.iter().any(|o| o == "*"),
            origins: origins.iter().filter(|o| *o != "*").cloned().collect(),
        }
    }

    /// The `Access-Control-Allow-Origin` value for a request from `origin`: `*` when every
    /// origin is allowed, the origin itself when it is listed, else none.
    pub fn allow_origin<'a>(&self, origin: Option<&'a str>) -> Option<&'a str> {
        if self.any {
            return Some("*");
        }
        origin.filter(|o| self.origins.iter().any(|allowed| allowed == o))
    }

    /// Whether the answer depends on the request's `Origin` (some origins listed, not
    /// `*`): then every answer says `Vary: Origin`, so that a cache does not hand one
    /// origin's answer to another.
    fn varies(&self) -> bool {
        !self.any && !self.origins.is_empty()
    }

    /// The header lines for an answer to a request from `origin`, in the order v1 wrote
    /// them (they go first among a response's extra headers, where v1 had them).
    pub fn headers(&self, origin: Option<&str>) -> Vec<(&'static str, String)> {
        let mut lines = Vec::new();
        if let Some(allowed) = self.allow_origin(origin) {
            lines.push(("Access-Control-Allow-Origin", allowed.to_string()));
            lines.push(("Access-Control-Allow-Methods", ALLOW_METHODS.to_string()));
            lines.push(("Access-Control-Allow-Headers", ALLOW_HEADERS.to_string()));
        }
        if self.varies() {
            lines.push(("Vary", "Origin".to_string()));
        }
        lines
    }

    /// The lines of a server-sent event stream's head (v1 sent only the allowed origin
    /// there), each ending in CRLF.
    pub fn event_stream_lines(&self, origin: Option<&str>) -> String {
        let mut head = String::new();
        if let Some(allowed) = self.allow_origin(origin) {
            head.push_str(&format!("Access-Control-Allow-Origin: {allowed}\r\n"));
        }
        if self.varies() {
            head.push_str("Vary: Origin\r\n");
        }
        head
    }

    /// Puts this request's CORS lines in front of `response`'s own headers.
    pub fn apply(&self, origin: Option<&str>, response: &mut crate::http::Response) {
        let lines = self.headers(origin);
        response.headers.splice(0..0, lines);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cors(list: &[&str]) -> Cors {
        Cors::new(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn nothing_is_allowed_by_default() {
        let c = cors(&[]);
        assert!(c.headers(Some("https://evil.example")).is_empty());
        assert!(c.headers(None).is_empty());
        assert_eq!(c.event_stream_lines(Some("https://evil.example")), "");
    }

    #[test]
    fn a_listed_origin_is_echoed_and_only_an_exact_match() {
        let c = cors(&["https://ops.example"]);
        assert_eq!(
            c.headers(Some("https://ops.example")),
            vec![
                (
                    "Access-Control-Allow-Origin",
                    "https://ops.example".to_string()
                ),
                ("Access-Control-Allow-Methods", ALLOW_METHODS.to_string()),
                ("Access-Control-Allow-Headers", ALLOW_HEADERS.to_string()),
                ("Vary", "Origin".to_string()),
            ]
        );
        for other in [
            "https://ops.example.evil",
            "https://ops.example:443",
            "http://ops.example",
            "https://OPS.example",
            "null",
            "",
        ] {
            assert_eq!(
                c.headers(Some(other)),
                vec![("Vary", "Origin".to_string())],
                "{other:?}"
            );
        }
        assert_eq!(c.headers(None), vec![("Vary", "Origin".to_string())]);
        assert_eq!(
            c.event_stream_lines(Some("https://ops.example")),
            "Access-Control-Allow-Origin: https://ops.example\r\nVary: Origin\r\n"
        );
    }

    #[test]
    fn a_star_restores_v1s_headers_for_everyone() {
        let c = cors(&["https://ops.example", "*"]);
        for origin in [None, Some("https://anyone.example")] {
            let lines = c.headers(origin);
            assert_eq!(lines[0], ("Access-Control-Allow-Origin", "*".to_string()));
            assert_eq!(lines.len(), 3, "no Vary: the answer is the same for all");
        }
        assert_eq!(
            c.event_stream_lines(None),
            "Access-Control-Allow-Origin: *\r\n"
        );
    }
}
