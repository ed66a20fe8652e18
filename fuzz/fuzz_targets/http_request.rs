//! Fuzzes the admin HTTP request parser, `boltq::http::parse_request`, the way a
//! connection uses it: the input is the bytes a client sent, and requests are parsed one
//! after another from the front of the buffer (pipelining) until the parser needs more
//! bytes or refuses a request. No mode byte: every byte is client data.
//!
//! Checked on every input, beyond "never panics":
//! - a parsed request used at least one and at most the given bytes; its head is within
//!   `HEAD_BYTES_MAX`, its body within `BODY_BYTES_MAX` and is exactly the bytes just before
//!   the end of what it used; it has at most `HEADERS_MAX` headers, lower-cased names, a
//!   method, and a path without the query string;
//! - its framing was unambiguous: no `Transfer-Encoding`, at most one `Content-Length`, all
//!   digits, equal to the body's length (RFC 9112 §6.3; anything else invites request
//!   smuggling behind a proxy);
//! - parsing does not depend on what follows or on how the bytes arrived: the same bytes
//!   without what follows the request parse to the same request, and a strict prefix of a
//!   request (one byte short, or cut in the middle) is `Partial`, never a refusal or a
//!   different request;
//! - `Partial` is only returned while the buffer is below `HEAD_BYTES_MAX + BODY_BYTES_MAX`
//!   (a connection's buffer stays bounded);
//! - a refusal is a 4xx/5xx the server knows (400, 413, 431, 501) with a JSON body
//!   `{"error": "<non-empty text>"}`, and `encode_response` turns it into a well-formed
//!   HTTP/1.1 response with the right `Content-Length` and `Connection: close`.
#![no_main]

use boltq::http::{
    encode_response, parse_request, Parsed, Request, Response, BODY_BYTES_MAX, HEADERS_MAX,
    HEAD_BYTES_MAX,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let mut data = input;
    while !data.is_empty() {
        match parse_request(data) {
            Parsed::Request(req, used) => {
                check_request(data, &req, used);
                data = &data[used..];
            }
            Parsed::Partial => {
                assert!(data.len() < HEAD_BYTES_MAX + BODY_BYTES_MAX);
                return;
            }
            Parsed::Refused(r) => {
                check_refusal(&r);
                return;
            }
        }
    }
});

fn check_request(data: &[u8], req: &Request, used: usize) {
    assert!(
        used > 0 && used <= data.len(),
        "used {used} of {}",
        data.len()
    );
    let body_len = req.body.len();
    assert!(body_len <= BODY_BYTES_MAX);
    assert!(body_len < used);
    assert_eq!(&data[used - body_len..used], req.body.as_slice());
    assert!(
        used - body_len <= HEAD_BYTES_MAX,
        "head of {} bytes",
        used - body_len
    );
    assert!(req.headers.len() <= HEADERS_MAX);
    for (name, _) in &req.headers {
        assert!(!name.bytes().any(|b| b.is_ascii_uppercase()), "{name:?}");
    }
    assert!(!req.method.is_empty());
    assert!(!req.path.contains('?'), "{:?}", req.path);
    // Unambiguous framing: no Transfer-Encoding, at most one Content-Length, all digits, and
    // the body is exactly that long (no length means no body).
    assert!(req.header("transfer-encoding").is_none());
    let lengths: Vec<&str> = req
        .headers
        .iter()
        .filter(|(k, _)| k == "content-length")
        .map(|(_, v)| v.as_str())
        .collect();
    match lengths.as_slice() {
        [] => assert_eq!(body_len, 0),
        [v] => {
            assert!(
                !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()),
                "{v:?}"
            );
            assert_eq!(v.parse::<usize>().ok(), Some(body_len), "{v:?}");
        }
        more => panic!("several Content-Length headers accepted: {more:?}"),
    }

    // The same bytes without what follows: the same request.
    match parse_request(&data[..used]) {
        Parsed::Request(again, used_again) => {
            assert_eq!(used_again, used);
            assert_same(req, &again);
        }
        other => panic!("the request's own bytes parse differently: {other:?}"),
    }
    // Bytes that arrive in pieces: a strict prefix waits for more.
    for cut in [used - 1, used / 2] {
        if cut > 0 {
            let p = parse_request(&data[..cut]);
            assert!(
                matches!(p, Parsed::Partial),
                "prefix of {cut} of {used} bytes: {p:?}"
            );
        }
    }
}

fn assert_same(a: &Request, b: &Request) {
    assert_eq!(a.method, b.method);
    assert_eq!(a.path, b.path);
    assert_eq!(a.query, b.query);
    assert_eq!(a.headers, b.headers);
    assert_eq!(a.body, b.body);
    assert_eq!(a.close, b.close);
}

fn check_refusal(r: &Response) {
    assert!(
        matches!(r.status, 400 | 413 | 431 | 501),
        "status {}",
        r.status
    );
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("refusal body is JSON");
    let obj = v.as_object().expect("refusal body is an object");
    assert_eq!(obj.len(), 1);
    assert!(!obj["error"].as_str().expect("error is a string").is_empty());

    let mut out = Vec::new();
    encode_response(r, false, true, &mut out);
    let head_end = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    let head = std::str::from_utf8(&out[..head_end]).expect("the head is text");
    assert!(
        head.starts_with(&format!("HTTP/1.1 {} ", r.status)),
        "{head:?}"
    );
    assert!(
        head.contains(&format!("\r\nContent-Length: {}\r\n", r.body.len())),
        "{head:?}"
    );
    assert!(head.contains("\r\nConnection: close\r\n"), "{head:?}");
    // Every header line is `Name: value` with no stray CR or LF.
    for line in head.trim_end_matches("\r\n").split("\r\n").skip(1) {
        let (name, _) = line.split_once(": ").expect("a header line");
        assert!(
            !name.is_empty() && !name.contains(['\r', '\n', ' ']),
            "{line:?}"
        );
    }
    assert_eq!(&out[head_end..], r.body.as_slice());
}
