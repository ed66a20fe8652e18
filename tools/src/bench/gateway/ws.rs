//! The client side of WebSocket (RFC 6455) that the generator needs, as pure functions over
//! byte buffers: the `ws://` URL, the upgrade request and the check of its answer, client
//! frames (always masked) and server frames (never masked).
//!
//! Why not the blocking `boltq::client::gateway::GatewayClient`: it owns a socket and blocks,
//! so it needs a thread per connection, and 10,000 devices would mean 10,000 threads with
//! their stacks and a scheduler thrashing between them on one core. These functions let one
//! epoll loop drive every connection of its thread.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

/// Longest answer head to an upgrade request; past it the answer is refused.
pub const RESPONSE_HEAD_BYTES_MAX: usize = 16 * 1024;
/// Most headers in the answer to an upgrade request.
pub const RESPONSE_HEADERS_MAX: usize = 32;
/// Largest message (all fragments together) accepted from the server. Live record batches
/// are bounded by about 256 KiB of stored bytes (a single larger record travels alone, up
/// to the server's record limit); base64 makes them a third larger.
pub const MESSAGE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Largest payload of a control frame (RFC 6455 §5.5).
pub const CONTROL_PAYLOAD_BYTES_MAX: usize = 125;
/// Longest URL accepted by [`parse_url`].
pub const URL_BYTES_MAX: usize = 2048;

/// Frame opcodes (RFC 6455 §5.2).
pub mod opcode {
    pub const CONTINUATION: u8 = 0x0;
    pub const TEXT: u8 = 0x1;
    pub const BINARY: u8 = 0x2;
    pub const CLOSE: u8 = 0x8;
    pub const PING: u8 = 0x9;
    pub const PONG: u8 = 0xA;
}

/// Where a gateway listens: `ws://host:port/path` or `wss://…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// `wss://`: WebSocket over TLS.
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl Url {
    /// `host:port`, what the socket connects to and the `Host` header says.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Parses `ws://host[:port][/path]` or `wss://…` (port 80 or 443 by default, path `/` by
/// default).
pub fn parse_url(url: &str) -> Result<Url, String> {
    if url.len() > URL_BYTES_MAX {
        return Err(format!("URL longer than {URL_BYTES_MAX} bytes"));
    }
    let (tls, rest) = match url.split_once("://") {
        Some(("ws", rest)) => (false, rest),
        Some(("wss", rest)) => (true, rest),
        _ => return Err(format!("{url:?} is not a ws:// or wss:// URL")),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("unclosed [ in {url:?}"))?;
        match after.strip_prefix(':') {
            Some(p) => (host, Some(p)),
            None if after.is_empty() => (host, None),
            None => return Err(format!("bad authority in {url:?}")),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(format!("no host in {url:?}"));
    }
    let port = match port {
        Some(p) => p.parse().map_err(|_| format!("bad port in {url:?}"))?,
        None if tls => 443,
        None => 80,
    };
    Ok(Url {
        tls,
        host: host.to_string(),
        port,
        path: path.to_string(),
    })
}

/// The `Sec-WebSocket-Key` for 16 random bytes.
pub fn upgrade_key(random: [u8; 16]) -> String {
    STANDARD.encode(random)
}

/// The `Sec-WebSocket-Accept` a server must answer to `key`.
pub fn accept_for(key: &str) -> String {
    async_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes())
}

/// The upgrade request, authenticated with `Authorization: Bearer <token>`.
pub fn upgrade_request(url: &Url, token: &str, key: &str) -> Vec<u8> {
    format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\
         Authorization: Bearer {token}\r\n\r\n",
        url.path,
        url.authority()
    )
    .into_bytes()
}

/// Checks the answer to an upgrade request sent with `key`: `Ok(None)` while the head is
/// incomplete, `Ok(Some(head_len))` for a valid `101` (bytes after the head are already
/// WebSocket frames), `Err` with the status and a preview of the body otherwise.
pub fn check_upgrade_answer(buf: &[u8], key: &str) -> Result<Option<usize>, String> {
    let mut headers = [httparse::EMPTY_HEADER; RESPONSE_HEADERS_MAX];
    let mut answer = httparse::Response::new(&mut headers);
    let head_len = match answer.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > RESPONSE_HEAD_BYTES_MAX => {
            return Err(format!(
                "upgrade answer head longer than {RESPONSE_HEAD_BYTES_MAX} bytes"
            ))
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("upgrade answer is not HTTP: {e}")),
    };
    let code = answer.code.unwrap_or(0);
    if code != 101 {
        let body = String::from_utf8_lossy(&buf[head_len..buf.len().min(head_len + 200)]);
        let body = body.trim();
        return Err(format!(
            "upgrade refused: HTTP {code} {}{}",
            answer.reason.unwrap_or(""),
            if body.is_empty() {
                String::new()
            } else {
                format!(" ({body})")
            }
        ));
    }
    let header = |name: &str| {
        answer
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
    };
    if !header("upgrade").is_some_and(|v| v.eq_ignore_ascii_case("websocket")) {
        return Err("101 without Upgrade: websocket".into());
    }
    if header("sec-websocket-accept").as_deref() != Some(accept_for(key).as_str()) {
        return Err("101 with a wrong Sec-WebSocket-Accept".into());
    }
    Ok(Some(head_len))
}

/// Appends one complete (FIN) client frame: header, mask key, masked payload.
pub fn encode_client_frame(op: u8, payload: &[u8], mask: [u8; 4], out: &mut Vec<u8>) {
    debug_assert!(op < 0x10, "opcodes are four bits");
    out.push(0x80 | op);
    let len = payload.len();
    if len < 126 {
        out.push(0x80 | len as u8);
    } else if len <= u16::MAX as usize {
        out.push(0x80 | 126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0x80 | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i & 3]));
}

/// One frame from the server, borrowed from the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    pub fin: bool,
    pub opcode: u8,
    pub payload: &'a [u8],
}

/// Decodes the frame at the start of `buf`: `Ok(None)` until it is complete, else the frame
/// and the bytes it used. Refuses what a server must not send: masked frames, reserved bits
/// (no extension is negotiated), unknown opcodes, fragmented or long control frames, and
/// frames over [`MESSAGE_BYTES_MAX`].
pub fn decode_server_frame(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, String> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let (b0, b1) = (buf[0], buf[1]);
    if b0 & 0x70 != 0 {
        return Err("frame with reserved bits set".into());
    }
    if b1 & 0x80 != 0 {
        return Err("masked frame from the server".into());
    }
    let fin = b0 & 0x80 != 0;
    let op = b0 & 0x0F;
    let (len, mut at) = match b1 & 0x7F {
        126 => match buf.get(2..4) {
            Some(b) => (u16::from_be_bytes([b[0], b[1]]) as u64, 4),
            None => return Ok(None),
        },
        127 => match buf.get(2..10) {
            Some(b) => (u64::from_be_bytes(b.try_into().expect("8 bytes")), 10),
            None => return Ok(None),
        },
        n => (n as u64, 2),
    };
    match op {
        opcode::CONTINUATION | opcode::TEXT | opcode::BINARY => {}
        opcode::CLOSE | opcode::PING | opcode::PONG => {
            if !fin || len > CONTROL_PAYLOAD_BYTES_MAX as u64 {
                return Err(format!("bad control frame (opcode {op}, {len} bytes)"));
            }
        }
        other => return Err(format!("unknown opcode {other}")),
    }
    if len > MESSAGE_BYTES_MAX as u64 {
        return Err(format!("frame of {len} bytes (limit {MESSAGE_BYTES_MAX})"));
    }
    let len = len as usize;
    if buf.len() < at + len {
        return Ok(None);
    }
    let payload = &buf[at..at + len];
    at += len;
    Ok(Some((
        Frame {
            fin,
            opcode: op,
            payload,
        },
        at,
    )))
}

/// The status code of a Close frame's payload (1005 "no status" when it has none).
pub fn close_code(payload: &[u8]) -> (u16, String) {
    match payload {
        [a, b, reason @ ..] => (
            u16::from_be_bytes([*a, *b]),
            String::from_utf8_lossy(reason).into_owned(),
        ),
        _ => (1005, String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq_io::testutil::Rng;

    fn server_frame(fin: bool, op: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![(if fin { 0x80 } else { 0 }) | op];
        let len = payload.len();
        if len < 126 {
            out.push(len as u8);
        } else if len <= 65535 {
            out.push(126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            out.push(127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn urls() {
        let u = parse_url("ws://127.0.0.1:9090/ws").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 9090, "/ws")
        );
        assert_eq!(u.authority(), "127.0.0.1:9090");
        let u = parse_url("ws://example").unwrap();
        assert_eq!((u.port, u.path.as_str()), (80, "/"));
        let u = parse_url("ws://[::1]:7/x?y=1").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("::1", 7, "/x?y=1")
        );
        assert_eq!(u.authority(), "[::1]:7");
        assert!(!u.tls);
        let u = parse_url("wss://example/ws").unwrap();
        assert_eq!((u.tls, u.port, u.path.as_str()), (true, 443, "/ws"));
        for bad in [
            "http://x/ws",
            "wss:/x/ws",
            "ws://:80/",
            "ws://x:port/",
            "x",
            "ws://[::1/",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn accept_matches_the_rfc_example() {
        // RFC 6455 §1.3.
        assert_eq!(
            accept_for("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn upgrade_answers() {
        let key = "dGhlIHNhbXBsZSBub25jZQ==";
        let ok = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                   Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n\x81\x00";
        let head = ok.len() - 2;
        assert_eq!(check_upgrade_answer(ok, key), Ok(Some(head)));
        assert_eq!(check_upgrade_answer(&ok[..head - 1], key), Ok(None));
        let wrong = String::from_utf8_lossy(ok).replace("s3pP", "AAAA");
        assert!(check_upgrade_answer(wrong.as_bytes(), key).is_err());
        let refused = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 12\r\n\r\nunauthorized";
        let e = check_upgrade_answer(refused, key).unwrap_err();
        assert!(e.contains("401") && e.contains("unauthorized"), "{e}");
        let huge = vec![b'a'; RESPONSE_HEAD_BYTES_MAX + 1];
        assert!(check_upgrade_answer(&huge, key).is_err());
        let mut long = b"HTTP/1.1 101 OK\r\nX: ".to_vec();
        long.extend(vec![b'a'; RESPONSE_HEAD_BYTES_MAX]);
        assert!(check_upgrade_answer(&long, key).is_err());
    }

    #[test]
    fn request_names_the_path_host_key_and_token() {
        let url = parse_url("ws://h:1/ws").unwrap();
        let r = String::from_utf8(upgrade_request(&url, "T", "K")).unwrap();
        assert!(r.starts_with("GET /ws HTTP/1.1\r\nHost: h:1\r\n"), "{r}");
        assert!(r.contains("Sec-WebSocket-Key: K\r\n") && r.contains("Bearer T\r\n"));
        assert!(r.ends_with("\r\n\r\n"));
    }

    /// Client frames unmask back to the payload, with each of the three length encodings.
    #[test]
    fn client_frames_round_trip() {
        let mut rng = Rng::new(7);
        for len in [0usize, 1, 125, 126, 65535, 65536, 70000] {
            let payload: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
            let mask = (rng.next_u64() as u32).to_be_bytes();
            let mut out = Vec::new();
            encode_client_frame(opcode::TEXT, &payload, mask, &mut out);
            assert_eq!(out[0], 0x81);
            assert!(out[1] & 0x80 != 0, "client frames are masked");
            let (len_field, at) = match out[1] & 0x7F {
                126 => (u16::from_be_bytes([out[2], out[3]]) as usize, 4),
                127 => (
                    u64::from_be_bytes(out[2..10].try_into().unwrap()) as usize,
                    10,
                ),
                n => (n as usize, 2),
            };
            assert_eq!(len_field, len);
            let key = &out[at..at + 4];
            let body: Vec<u8> = out[at + 4..]
                .iter()
                .enumerate()
                .map(|(i, b)| b ^ key[i & 3])
                .collect();
            assert_eq!(body, payload);
        }
    }

    /// Any server frame decodes whole, and every strict prefix of it is incomplete.
    #[test]
    fn server_frames_decode_and_prefixes_wait() {
        let mut rng = Rng::new(11);
        for _ in 0..200 {
            let len = match rng.below(3) {
                0 => rng.below(126) as usize,
                1 => 126 + rng.below(1000) as usize,
                _ => 65536 + rng.below(1000) as usize,
            };
            let payload: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
            let fin = rng.below(2) == 0;
            let op = [opcode::TEXT, opcode::BINARY, opcode::CONTINUATION][rng.below(3) as usize];
            let mut wire = server_frame(fin, op, &payload);
            let whole = wire.len();
            wire.extend_from_slice(b"next");
            let (f, used) = decode_server_frame(&wire).unwrap().unwrap();
            assert_eq!(
                (f.fin, f.opcode, f.payload, used),
                (fin, op, &payload[..], whole)
            );
            let cut = rng.below(whole as u64) as usize;
            assert_eq!(decode_server_frame(&wire[..cut]).unwrap(), None);
        }
    }

    #[test]
    fn forbidden_server_frames_are_refused() {
        let masked = [0x81u8, 0x81, 1, 2, 3, 4, 5];
        assert!(decode_server_frame(&masked).is_err());
        assert!(decode_server_frame(&[0xC1, 0x00]).is_err(), "RSV1");
        assert!(decode_server_frame(&[0x83, 0x00]).is_err(), "opcode 3");
        assert!(decode_server_frame(&server_frame(false, opcode::PING, b"")).is_err());
        assert!(decode_server_frame(&server_frame(true, opcode::PING, &[0; 126])).is_err());
        let mut huge = vec![0x81, 127];
        huge.extend_from_slice(&(MESSAGE_BYTES_MAX as u64 + 1).to_be_bytes());
        assert!(decode_server_frame(&huge).is_err());
        let ping = server_frame(true, opcode::PING, b"hi");
        let (f, _) = decode_server_frame(&ping).unwrap().unwrap();
        assert_eq!((f.opcode, f.payload), (opcode::PING, &b"hi"[..]));
    }

    #[test]
    fn close_codes() {
        assert_eq!(close_code(&[0x03, 0xE8]), (1000, String::new()));
        assert_eq!(close_code(b"\x0f\xa1x"), (4001, "x".to_string()));
        assert_eq!(close_code(&[]), (1005, String::new()));
    }
}
