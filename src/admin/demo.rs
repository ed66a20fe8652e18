//! The browser chat demo (`messaging.gateway.demo = true`): a single page at `/demo/chat`,
//! the dependency-free JS gateway client it imports (`/demo/boltq-gateway.js`, the same file
//! as `clients/js/boltq-gateway.js`), and a dev-only route that mints gateway tokens,
//! `POST /demo/token {"user":"alice"}` → `{"token":…,"expires_at":…,"gateway":{…}}`.
//!
//! Trade-off: the token route hands a token for *any* user to whoever reaches the admin
//! listener, which is what makes the demo a one-command experience and exactly why it exists
//! only behind the flag (every `/demo/` path is 404 without it) and is documented as never
//! for production. The files are compiled into the binary like the dashboard: no build step,
//! nothing beside the server.

use crate::config::{Config, EnvLookup};
use crate::http::{Request, Response};
use crate::messaging::identity::token::{mint_hs256, Claims};
use crate::messaging::topic::valid_id;
use serde_json::{json, Value};

const INDEX_HTML: &str = include_str!("demo/index.html");
const CHAT_JS: &str = include_str!("demo/chat.js");
const CHAT_CSS: &str = include_str!("demo/chat.css");
/// The client module a chat app can copy; served from the one copy in `clients/js/`.
const GATEWAY_JS: &str = include_str!("../../clients/js/boltq-gateway.js");

/// Lifetime of a demo token. Short because it travels in the WebSocket URL (browsers cannot
/// set headers) and so lands in logs; the page mints a fresh one for every (re)connect.
pub const DEMO_TOKEN_TTL_S: i64 = 15 * 60;
/// Largest `POST /demo/token` body; `{"user":"<128 bytes>"}` fits with room to spare.
pub const DEMO_TOKEN_BODY_BYTES_MAX: usize = 1024;

/// Where the page finds the gateway, from `[messaging.gateway]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoGateway {
    /// 0: the gateway shares the admin listener, i.e. the page's own host and port.
    pub port: u16,
    pub path: String,
    /// `wss://` on the dedicated listener (with `port = 0` the page's own scheme decides).
    pub tls: bool,
}

/// Everything the demo routes need: the signing key and the gateway's address. Built once
/// per shard from the configuration; `None` when the demo is off.
#[derive(Clone)]
pub struct Demo {
    key_id: String,
    secret: Vec<u8>,
    /// Stamped as `iss` when the verifier requires one.
    issuer: String,
    gateway: DemoGateway,
}

impl std::fmt::Debug for Demo {
    /// Without the secret: a debug print must never leak the signing key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Demo")
            .field("key_id", &self.key_id)
            .field("issuer", &self.issuer)
            .field("gateway", &self.gateway)
            .finish_non_exhaustive()
    }
}

/// Why `POST /demo/token` refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DemoError {
    BodyTooLarge,
    NotJson,
    BadUser,
}

impl std::fmt::Display for DemoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DemoError::BodyTooLarge => {
                write!(f, "request body over {DEMO_TOKEN_BODY_BYTES_MAX} bytes")
            }
            DemoError::NotJson => write!(f, "expected a JSON object like {{\"user\":\"alice\"}}"),
            DemoError::BadUser => write!(f, "user must be 1-128 bytes of A-Z a-z 0-9 _ @ + -"),
        }
    }
}

impl Demo {
    /// The demo of `config`: `None` unless `messaging.gateway.demo` and the gateway are on
    /// and a signing key exists (validation guarantees the latter two when the flag is on).
    /// Signs with the first configured key, as the verifier's fallback for `kid`-less
    /// tokens is the first key too.
    pub fn from_config(config: &Config, env: EnvLookup) -> Option<Demo> {
        let m = &config.messaging;
        if !(m.gateway.demo && m.gateway.enabled) {
            return None;
        }
        let key = m.identity.keys.first()?;
        Some(Demo::new(
            key.id.clone(),
            key.resolve_secret(env).into_bytes(),
            m.identity.issuer.clone(),
            DemoGateway {
                port: m.gateway.port,
                path: m.gateway.path.clone(),
                tls: m.gateway.port != 0 && m.gateway.tls.enabled,
            },
        ))
    }

    pub fn new(key_id: String, secret: Vec<u8>, issuer: String, gateway: DemoGateway) -> Demo {
        assert!(!secret.is_empty(), "a demo signing key needs a secret");
        Demo {
            key_id,
            secret,
            issuer,
            gateway,
        }
    }

    /// Answers `POST /demo/token` with body `body` at `now_s`: the token for the requested
    /// user, its expiry and where the gateway is. Sans-IO: the route passes the clock in.
    pub fn mint(&self, body: &[u8], now_s: i64) -> Result<Value, DemoError> {
        let user = requested_user(body)?;
        let claims = Claims {
            sub: user.clone(),
            exp: Some(now_s + DEMO_TOKEN_TTL_S),
            iat: Some(now_s),
            iss: Some(self.issuer.clone()).filter(|i| !i.is_empty()),
            ..Claims::default()
        };
        let kid = Some(self.key_id.as_str()).filter(|k| !k.is_empty());
        Ok(json!({
            "user": user,
            "token": mint_hs256(kid, &self.secret, &claims),
            "expires_at": now_s + DEMO_TOKEN_TTL_S,
            "gateway": {
                "port": self.gateway.port,
                "path": self.gateway.path,
                "tls": self.gateway.tls,
            },
        }))
    }
}

/// The `user` of a token request: a valid id, the same alphabet as inbox and direct
/// conversation ids, so a minted token can always name its own inbox.
fn requested_user(body: &[u8]) -> Result<String, DemoError> {
    if body.len() > DEMO_TOKEN_BODY_BYTES_MAX {
        return Err(DemoError::BodyTooLarge);
    }
    let v: Value = serde_json::from_slice(body).map_err(|_| DemoError::NotJson)?;
    let Some(obj) = v.as_object() else {
        return Err(DemoError::NotJson);
    };
    match obj.get("user").and_then(Value::as_str) {
        Some(u) if valid_id(u) => Ok(u.to_string()),
        _ => Err(DemoError::BadUser),
    }
}

/// Whether `path` belongs to the demo (served, or 404 when the demo is off).
pub fn handles(path: &str) -> bool {
    path.starts_with("/demo/") || path == "/demo"
}

/// Answers one `/demo/…` request; `demo` is `None` when the flag is off, and then every
/// path is the same 404 as an unknown route, so nothing reveals the feature exists.
pub fn route(req: &Request, demo: Option<&Demo>, now_s: i64) -> Response {
    let Some(demo) = demo else {
        return not_found();
    };
    let get = req.method == "GET" || req.method == "HEAD";
    match (req.path.as_str(), get, req.method == "POST") {
        ("/demo" | "/demo/", true, _) => redirect("/demo/chat"),
        ("/demo/chat", true, _) => page(INDEX_HTML, "text/html; charset=utf-8"),
        ("/demo/chat.js", true, _) => page(CHAT_JS, "text/javascript; charset=utf-8"),
        ("/demo/chat.css", true, _) => page(CHAT_CSS, "text/css; charset=utf-8"),
        ("/demo/boltq-gateway.js", true, _) => page(GATEWAY_JS, "text/javascript; charset=utf-8"),
        ("/demo/token", _, true) => match demo.mint(&req.body, now_s) {
            Ok(v) => no_store(Response::json(200, &v)),
            Err(e) => Response::error(400, &e.to_string()),
        },
        (
            "/demo/chat"
            | "/demo/chat.js"
            | "/demo/chat.css"
            | "/demo/boltq-gateway.js"
            | "/demo/token",
            _,
            _,
        ) => Response::error(405, "method not allowed"),
        _ => not_found(),
    }
}

fn not_found() -> Response {
    Response::text(404, "text/plain; charset=utf-8", "404 page not found\n")
}

fn redirect(to: &str) -> Response {
    let mut r = Response::text(302, "text/plain; charset=utf-8", Vec::new());
    r.headers.push(("Location", to.to_string()));
    r
}

/// Static files: revalidated on every load, so a rebuilt binary's page never mixes with a
/// cached older client module.
fn page(body: &'static str, content_type: &'static str) -> Response {
    let mut r = Response::text(200, content_type, body);
    r.headers.push(("Cache-Control", "no-cache".to_string()));
    r
}

/// Tokens are credentials: never cached.
fn no_store(mut r: Response) -> Response {
    r.headers.push(("Cache-Control", "no-store".to_string()));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messaging::identity::token::Verifier;
    use boltq_io::testutil::Rng;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
    const NOW_S: i64 = 1_796_000_000;

    fn demo(issuer: &str) -> Demo {
        Demo::new(
            "k1".into(),
            SECRET.to_vec(),
            issuer.into(),
            DemoGateway {
                port: 0,
                path: "/ws".into(),
                tls: false,
            },
        )
    }

    fn req(method: &str, path: &str, body: &[u8]) -> Request {
        Request {
            method: method.into(),
            path: path.into(),
            body: body.to_vec(),
            ..Request::default()
        }
    }

    #[test]
    fn minted_token_verifies_as_the_user_and_expires_after_the_ttl() {
        for issuer in ["", "boltq-demo"] {
            let v = demo(issuer).mint(br#"{"user":"alice"}"#, NOW_S).unwrap();
            assert_eq!(v["user"], "alice");
            assert_eq!(v["expires_at"], NOW_S + DEMO_TOKEN_TTL_S);
            assert_eq!(
                v["gateway"],
                json!({"port": 0, "path": "/ws", "tls": false})
            );
            let verifier = Verifier::new(vec![("k1".into(), SECRET.to_vec())], issuer, 0).unwrap();
            let token = v["token"].as_str().unwrap();
            let p = verifier.verify(token, NOW_S).unwrap();
            assert_eq!(p.user_id, "alice");
            assert!(verifier
                .verify(token, NOW_S + DEMO_TOKEN_TTL_S + 1)
                .is_err());
        }
    }

    #[test]
    fn bad_user_ids_and_bodies_are_refused() {
        let d = demo("");
        for body in [
            &br#"{"user":""}"#[..],
            br#"{"user":"a.b"}"#,
            br#"{"user":"a:b"}"#,
            br#"{"user":"a b"}"#,
            br#"{"user":"*"}"#,
            br#"{"user":42}"#,
            br#"{}"#,
        ] {
            assert_eq!(d.mint(body, NOW_S), Err(DemoError::BadUser), "{body:?}");
        }
        let long = format!(r#"{{"user":"{}"}}"#, "a".repeat(129));
        assert_eq!(d.mint(long.as_bytes(), NOW_S), Err(DemoError::BadUser));
        let max = format!(r#"{{"user":"{}"}}"#, "a".repeat(128));
        assert!(d.mint(max.as_bytes(), NOW_S).is_ok());
        for body in [&b"user=alice"[..], b"[\"alice\"]", b""] {
            assert_eq!(d.mint(body, NOW_S), Err(DemoError::NotJson), "{body:?}");
        }
        let big = vec![b' '; DEMO_TOKEN_BODY_BYTES_MAX + 1];
        assert_eq!(d.mint(&big, NOW_S), Err(DemoError::BodyTooLarge));
    }

    #[test]
    fn random_bodies_never_panic_and_only_valid_ids_get_tokens() {
        let d = demo("");
        let mut rng = Rng::new(6);
        let alphabet = b"ab_@+-.: *\"{}\\\x00\xff";
        for _ in 0..2000 {
            let len = rng.below(12) as usize;
            let user: Vec<u8> = (0..len)
                .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
                .collect();
            let mut body = br#"{"user":""#.to_vec();
            body.extend_from_slice(&user);
            body.extend_from_slice(br#""}"#);
            match d.mint(&body, NOW_S) {
                Ok(v) => assert!(valid_id(v["user"].as_str().unwrap()), "{v}"),
                Err(e) => assert_ne!(e, DemoError::BodyTooLarge),
            }
        }
    }

    #[test]
    fn every_demo_path_is_404_when_the_demo_is_off() {
        for (method, path) in [
            ("GET", "/demo/chat"),
            ("GET", "/demo/boltq-gateway.js"),
            ("GET", "/demo/chat.js"),
            ("POST", "/demo/token"),
            ("GET", "/demo"),
        ] {
            let r = route(&req(method, path, br#"{"user":"alice"}"#), None, NOW_S);
            assert_eq!(r.status, 404, "{method} {path}");
        }
    }

    #[test]
    fn the_demo_serves_its_page_module_and_tokens() {
        let d = demo("");
        let page = route(&req("GET", "/demo/chat", b""), Some(&d), NOW_S);
        assert_eq!(
            (page.status, page.content_type),
            (200, "text/html; charset=utf-8")
        );
        assert!(String::from_utf8_lossy(&page.body).contains("chat.js"));
        let module = route(&req("GET", "/demo/boltq-gateway.js", b""), Some(&d), NOW_S);
        assert_eq!(module.status, 200);
        assert_eq!(module.body, GATEWAY_JS.as_bytes());
        let token = route(
            &req("POST", "/demo/token", br#"{"user":"bob"}"#),
            Some(&d),
            NOW_S,
        );
        assert_eq!(token.status, 200);
        assert!(token
            .headers
            .contains(&("Cache-Control", "no-store".to_string())));
        let bad = route(
            &req("POST", "/demo/token", br#"{"user":"b.b"}"#),
            Some(&d),
            NOW_S,
        );
        assert_eq!(bad.status, 400);
        let wrong = route(&req("GET", "/demo/token", b""), Some(&d), NOW_S);
        assert_eq!(wrong.status, 405);
        let missing = route(&req("GET", "/demo/nope", b""), Some(&d), NOW_S);
        assert_eq!(missing.status, 404);
    }

    #[test]
    fn debug_never_prints_the_secret() {
        let text = format!("{:?}", demo(""));
        assert!(!text.contains("0123456789abcdef"), "{text}");
    }
}
