//! Outbound URLs: `http://` and `https://` split into what a request needs, query-value
//! encoding, and `Location` resolution for redirects.

use super::error::HttpError;
use std::fmt;
use std::net::Ipv6Addr;

/// Longest URL accepted, in bytes.
pub const URL_BYTES_MAX: usize = 8 * 1024;

/// An absolute URL split into what a request needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedUrl {
    /// `https://`: the connection is TLS, verified against the trusted CAs.
    pub tls: bool,
    /// Lower-case name or IP literal (IPv6 without brackets).
    pub host: String,
    pub port: u16,
    /// Starts with `/`; the fragment is removed.
    pub path_and_query: String,
}

impl ParsedUrl {
    /// The `Host` header value: the port only when it is not the scheme's default.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == default_port(self.tls) {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    pub fn scheme(&self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }

    /// Same scheme, host and port: credentials may follow a redirect there.
    pub(super) fn same_origin(&self, other: &ParsedUrl) -> bool {
        self.tls == other.tls && self.host == other.host && self.port == other.port
    }
}

impl fmt::Display for ParsedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}{}",
            self.scheme(),
            self.authority(),
            self.path_and_query
        )
    }
}

fn default_port(tls: bool) -> u16 {
    if tls {
        443
    } else {
        80
    }
}

/// Parses an absolute `http://` or `https://` URL. Credentials in the URL are refused (the
/// `Authorization` header is the way to send them).
pub fn parse_url(url: &str) -> Result<ParsedUrl, HttpError> {
    if url.len() > URL_BYTES_MAX {
        return Err(HttpError::Url(format!("URL is over {URL_BYTES_MAX} bytes")));
    }
    let (scheme, rest) = url.split_once("://").ok_or_else(|| {
        HttpError::Url(format!(
            "{url:?} is not an absolute http:// or https:// URL"
        ))
    })?;
    let tls = if scheme.eq_ignore_ascii_case("https") {
        true
    } else if scheme.eq_ignore_ascii_case("http") {
        false
    } else {
        return Err(HttpError::Url(format!(
            "{url:?}: scheme {scheme:?} is not supported; use http:// or https://"
        )));
    };
    let rest = rest.split('#').next().unwrap_or_default();
    let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    if authority.contains('@') {
        return Err(HttpError::Url(format!(
            "{url:?}: credentials in the URL are not supported; configure the Authorization header"
        )));
    }
    let (host, port) = split_authority(authority, default_port(tls))
        .map_err(|m| HttpError::Url(format!("{url:?}: {m}")))?;
    let path_and_query = match path.as_bytes().first() {
        None => "/".to_string(),
        Some(b'?') => format!("/{path}"),
        Some(_) => path.to_string(),
    };
    if path_and_query.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(HttpError::Url(format!(
            "{url:?}: spaces and control characters must be percent-encoded"
        )));
    }
    Ok(ParsedUrl {
        tls,
        host,
        port,
        path_and_query,
    })
}

/// `host[:port]` or `[v6][:port]` → (host, port); `default_port` when absent.
fn split_authority(authority: &str, default_port: u16) -> Result<(String, u16), String> {
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (v6, after) = bracketed.split_once(']').ok_or("unclosed [ in the host")?;
        let v6: Ipv6Addr = v6
            .parse()
            .map_err(|_| format!("{v6:?} is not an IPv6 address"))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or("junk after the IPv6 address")?),
        };
        (v6.to_string(), port)
    } else {
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
        if !host.chars().all(valid) {
            return Err(format!("{host:?} is not a valid host name"));
        }
        (host.to_ascii_lowercase(), port)
    };
    if host.is_empty() {
        return Err("the host is empty".to_string());
    }
    let port = match port {
        None | Some("") => default_port,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(format!("{p:?} is not a valid port")),
        },
    };
    Ok((host, port))
}

/// Percent-encodes one query value: RFC 3986 unreserved characters stay, every other byte
/// becomes `%XX` (a space is `%20`, which every server decodes, rather than `+`).
pub fn percent_encode_query(value: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xf)] as char);
        }
    }
    out
}

/// Resolves a `Location` header against the URL that answered with it. A redirect from
/// `https://` to `http://` is refused: following it would send the request in plain text.
pub(super) fn resolve_location(base: &ParsedUrl, location: &str) -> Result<ParsedUrl, HttpError> {
    let lower = location.get(..8).unwrap_or(location).to_ascii_lowercase();
    let next = if lower.starts_with("http://") || lower.starts_with("https://") {
        parse_url(location)?
    } else if let Some(rest) = location.strip_prefix("//") {
        parse_url(&format!("{}://{rest}", base.scheme()))?
    } else {
        let path = if location.starts_with('/') {
            location.to_string()
        } else {
            let path_only = base.path_and_query.split('?').next().unwrap_or("/");
            let dir = &path_only[..path_only.rfind('/').map_or(0, |i| i + 1)];
            format!("{dir}{location}")
        };
        parse_url(&format!("{}://{}{path}", base.scheme(), base.authority()))?
    };
    if base.tls && !next.tls {
        return Err(HttpError::Url(format!(
            "redirect from {base} to plain-text {next} refused"
        )));
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> ParsedUrl {
        parse_url(s).unwrap()
    }

    #[test]
    fn parse_url_splits_host_port_and_path() {
        let u = url("http://Example.COM:8080/a/b?x=1#frag");
        assert_eq!(u.host, "example.com");
        assert_eq!(u.port, 8080);
        assert_eq!(u.path_and_query, "/a/b?x=1");
        assert_eq!(u.to_string(), "http://example.com:8080/a/b?x=1");
        let u = url("HTTP://10.0.0.1");
        assert_eq!(
            (u.host.as_str(), u.port, u.path_and_query.as_str()),
            ("10.0.0.1", 80, "/")
        );
        assert_eq!(u.authority(), "10.0.0.1");
        assert_eq!(url("http://h?q=1").path_and_query, "/?q=1");
        assert_eq!(url("http://h:/").port, 80);
        let v6 = url("http://[::1]:9000/x");
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 9000));
        assert_eq!(v6.authority(), "[::1]:9000");
    }

    #[test]
    fn https_urls_default_to_port_443_and_keep_their_scheme() {
        let u = url("HTTPS://h.example/x");
        assert!(u.tls);
        assert_eq!((u.port, u.authority()), (443, "h.example".to_string()));
        assert_eq!(u.to_string(), "https://h.example/x");
        let u = url("https://h:80/");
        assert_eq!(u.authority(), "h:80");
        assert!(!url("http://h:443/").same_origin(&url("https://h:443/")));
    }

    #[test]
    fn parse_url_refuses_what_it_cannot_serve() {
        let err = |s: &str| match parse_url(s) {
            Err(HttpError::Url(m)) => m,
            other => panic!("{s}: {other:?}"),
        };
        assert!(err("ftp://h/x").contains("scheme"));
        assert!(err("h/x").contains("absolute"));
        assert!(err("http://user:pw@h/").contains("credentials"));
        assert!(err("http:///x").contains("empty"));
        assert!(err("http://h:0/").contains("port"));
        assert!(err("http://h:70000/").contains("port"));
        assert!(err("http://h:+80/").contains("port"));
        assert!(err("http://h o/").contains("host"));
        assert!(err("http://[::1/").contains("unclosed"));
        assert!(err("http://[nope]/").contains("IPv6"));
        assert!(err("http://h/a b").contains("percent-encoded"));
        assert!(err("http://h/a\r\nX: y").contains("percent-encoded"));
        let long = format!("http://h/{}", "a".repeat(URL_BYTES_MAX));
        assert!(err(&long).contains("over"));
    }

    #[test]
    fn percent_encoding_keeps_only_unreserved_bytes() {
        assert_eq!(percent_encode_query("aZ09-._~"), "aZ09-._~");
        assert_eq!(
            percent_encode_query("a b/c?d=e&f+g#%"),
            "a%20b%2Fc%3Fd%3De%26f%2Bg%23%25"
        );
        assert_eq!(percent_encode_query("é"), "%C3%A9");
        assert_eq!(percent_encode_query(""), "");
    }

    #[test]
    fn locations_resolve_against_the_answering_url() {
        let base = url("http://h:81/a/b?q=1");
        assert_eq!(
            resolve_location(&base, "/c").unwrap().to_string(),
            "http://h:81/c"
        );
        assert_eq!(
            resolve_location(&base, "c?x").unwrap().to_string(),
            "http://h:81/a/c?x"
        );
        assert_eq!(
            resolve_location(&base, "//o/p").unwrap().to_string(),
            "http://o/p"
        );
        assert_eq!(
            resolve_location(&base, "HTTP://o:2/").unwrap().to_string(),
            "http://o:2/"
        );
        assert_eq!(
            resolve_location(&base, "https://o/").unwrap().to_string(),
            "https://o/"
        );
        let secure = url("https://h/a");
        assert_eq!(
            resolve_location(&secure, "//o/p").unwrap().to_string(),
            "https://o/p"
        );
        assert_eq!(
            resolve_location(&secure, "/b").unwrap().to_string(),
            "https://h/b"
        );
        assert!(matches!(
            resolve_location(&secure, "http://h/b"),
            Err(HttpError::Url(m)) if m.contains("plain-text")
        ));
    }
}
