//! Request frames built without a JSON library, and the few fields the generator reads out of
//! replies. The generator has to outrun the server on one core, so request bodies are
//! templates with the per-message part (the stamp) written in place, and replies are scanned
//! rather than parsed into values.
//!
//! The payload of every published message is a JSON string of exactly `size` bytes:
//!
//! ```text
//! "<send time: 16 hex digits><sequence: 16 hex digits>xxxx…"
//! ```
//!
//! The send time is nanoseconds of CLOCK_MONOTONIC (the intended send time in open loop), so
//! a consumer in the same process gets the end-to-end latency by subtraction.

use boltq::client::json::write_string;
use boltq::queue::protocol::frame::{HEADER_BYTES, PAYLOAD_BYTES_MAX as PAYLOAD_FRAME_BYTES_MAX};

/// Bytes of the stamp inside the payload string (without the quotes).
pub const STAMP_BYTES: usize = 32;
/// Smallest payload: the quotes around the stamp.
pub const PAYLOAD_BYTES_MIN: usize = STAMP_BYTES + 2;

/// A JSON string literal for `s`, quotes included.
pub fn json_str(s: &str) -> String {
    let mut out = String::new();
    write_string(&mut out, s);
    out
}

/// Largest payload a TCP scenario sends: the protocol's frame limit
/// (`frame::PAYLOAD_BYTES_MAX`, 4 MiB) less room for the JSON around the payload (names the
/// server caps at 1,024 bytes, a priority).
pub const PAYLOAD_BYTES_MAX: usize = 4_000_000;
const _: () = assert!(PAYLOAD_BYTES_MAX + 64 * 1024 <= PAYLOAD_FRAME_BYTES_MAX);

/// One request frame whose body is `head + <payload string> + tail`; the payload's size is
/// chosen per message.
#[derive(Clone, Debug)]
pub struct Template {
    code: u8,
    /// The JSON before the payload value.
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl Template {
    /// `body_head`/`body_tail` surround the payload value in the JSON body.
    pub fn new(code: u8, body_head: &str, body_tail: &str) -> Template {
        Template {
            code,
            head: body_head.as_bytes().to_vec(),
            tail: body_tail.as_bytes().to_vec(),
        }
    }

    /// Appends the frame for one message whose payload is `payload_bytes` long (quotes
    /// included, at least [`PAYLOAD_BYTES_MIN`]); `filler` holds at least
    /// `payload_bytes - PAYLOAD_BYTES_MIN` bytes (see [`filler`]).
    pub fn write(
        &self,
        out: &mut Vec<u8>,
        sent_ns: u64,
        seq: u64,
        payload_bytes: usize,
        filler: &[u8],
    ) {
        debug_assert!(payload_bytes >= PAYLOAD_BYTES_MIN);
        let body_len = self.head.len() + payload_bytes + self.tail.len();
        out.push(self.code);
        out.extend_from_slice(&(body_len as u32).to_le_bytes());
        out.extend_from_slice(&self.head);
        out.push(b'"');
        put_hex(out, sent_ns);
        put_hex(out, seq);
        out.extend_from_slice(&filler[..payload_bytes - PAYLOAD_BYTES_MIN]);
        out.push(b'"');
        out.extend_from_slice(&self.tail);
    }
}

/// Filler for payloads of up to `payload_bytes_max`: what follows the stamp, before the
/// closing quote, is a prefix of it.
pub fn filler(payload_bytes_max: usize) -> Vec<u8> {
    vec![b'x'; payload_bytes_max.saturating_sub(PAYLOAD_BYTES_MIN)]
}

/// A complete frame with a fixed body.
pub fn frame(code: u8, body: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
    boltq::queue::protocol::frame::encode(code, body.as_bytes(), &mut out);
    out
}

fn put_hex(out: &mut Vec<u8>, v: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for shift in (0..16).rev() {
        out.push(DIGITS[((v >> (shift * 4)) & 0xf) as usize]);
    }
}

fn parse_hex(s: &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for &b in s {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        v = (v << 4) | d as u64;
    }
    Some(v)
}

/// The (send time, sequence) stamp of a payload value as it appears in a reply (a JSON string
/// written by [`Template::write`]); `None` for any other payload.
pub fn read_stamp(payload_value: &[u8]) -> Option<(u64, u64)> {
    if payload_value.len() < PAYLOAD_BYTES_MIN || payload_value[0] != b'"' {
        return None;
    }
    let t = parse_hex(&payload_value[1..17])?;
    let seq = parse_hex(&payload_value[17..33])?;
    Some((t, seq))
}

// ---- reply scanning ---------------------------------------------------------------------

/// Index just past the JSON string starting at `s[i] == '"'`.
fn skip_string(s: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// Index just past the JSON value starting at `s[i]` (no validation beyond nesting).
fn skip_value(s: &[u8], i: usize) -> Option<usize> {
    match *s.get(i)? {
        b'"' => skip_string(s, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < s.len() {
                match s[j] {
                    b'"' => {
                        j = skip_string(s, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let mut j = i;
            while j < s.len() && !matches!(s[j], b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
            {
                j += 1;
            }
            Some(j)
        }
    }
}

/// Calls `f(key, raw value)` for each member of the JSON object `obj` (keys as written,
/// without quotes; escapes are not decoded, which is fine for the ASCII keys the protocol
/// uses). Returns false when `obj` is not a well-nested object.
pub fn for_each_member<'a>(obj: &'a [u8], mut f: impl FnMut(&'a [u8], &'a [u8])) -> bool {
    let mut i = skip_ws(obj, 0);
    if obj.get(i) != Some(&b'{') {
        return false;
    }
    i = skip_ws(obj, i + 1);
    if obj.get(i) == Some(&b'}') {
        return true;
    }
    loop {
        if obj.get(i) != Some(&b'"') {
            return false;
        }
        let Some(key_end) = skip_string(obj, i) else {
            return false;
        };
        let key = &obj[i + 1..key_end - 1];
        i = skip_ws(obj, key_end);
        if obj.get(i) != Some(&b':') {
            return false;
        }
        i = skip_ws(obj, i + 1);
        let Some(value_end) = skip_value(obj, i) else {
            return false;
        };
        f(key, &obj[i..value_end]);
        i = skip_ws(obj, value_end);
        match obj.get(i) {
            Some(b',') => i = skip_ws(obj, i + 1),
            Some(b'}') => return true,
            _ => return false,
        }
    }
}

/// Calls `f(raw element)` for each element of the JSON array `arr`; false if malformed.
pub fn for_each_element<'a>(arr: &'a [u8], mut f: impl FnMut(&'a [u8])) -> bool {
    let mut i = skip_ws(arr, 0);
    if arr.get(i) != Some(&b'[') {
        return false;
    }
    i = skip_ws(arr, i + 1);
    if arr.get(i) == Some(&b']') {
        return true;
    }
    loop {
        let Some(end) = skip_value(arr, i) else {
            return false;
        };
        f(&arr[i..end]);
        i = skip_ws(arr, end);
        match arr.get(i) {
            Some(b',') => i = skip_ws(arr, i + 1),
            Some(b']') => return true,
            _ => return false,
        }
    }
}

/// The fields of a delivered message the generator needs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Delivered<'a> {
    /// Raw `id` value, quotes included (ready to be put into an ACK body).
    pub id: Option<&'a [u8]>,
    /// Send time and sequence from the payload, when it was stamped by a generator.
    pub stamp: Option<(u64, u64)>,
}

/// Reads one message object (CONSUME reply, batch element or push).
pub fn read_message(obj: &[u8]) -> Option<Delivered<'_>> {
    let mut d = Delivered::default();
    let ok = for_each_member(obj, |key, value| match key {
        b"id" if value.first() == Some(&b'"') => d.id = Some(value),
        b"payload" => d.stamp = read_stamp(value),
        _ => {}
    });
    ok.then_some(d)
}

/// Calls `f` for each message of a CONSUME OK reply: a single message, or (batch CONSUME)
/// `{"messages":[…]}`. Returns false when the reply is malformed.
pub fn for_each_consumed<'a>(reply: &'a [u8], mut f: impl FnMut(Delivered<'a>)) -> bool {
    let mut batch: Option<&[u8]> = None;
    let mut single = Delivered::default();
    let ok = for_each_member(reply, |key, value| match key {
        b"messages" => batch = Some(value),
        b"id" if value.first() == Some(&b'"') => single.id = Some(value),
        b"payload" => single.stamp = read_stamp(value),
        _ => {}
    });
    if !ok {
        return false;
    }
    match batch {
        Some(arr) => {
            let mut all_ok = true;
            let walked = for_each_element(arr, |m| match read_message(m) {
                Some(d) if d.id.is_some() => f(d),
                _ => all_ok = false,
            });
            walked && all_ok
        }
        None if single.id.is_some() => {
            f(single);
            true
        }
        None => false,
    }
}

/// ACK (0x04) frame for a raw id value (quotes included).
pub fn ack_frame(raw_id: &[u8], out: &mut Vec<u8>) {
    let body_len = br#"{"id":}"#.len() + raw_id.len();
    out.push(boltq::queue::protocol::frame::op::ACK);
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    out.extend_from_slice(br#"{"id":"#);
    out.extend_from_slice(raw_id);
    out.push(b'}');
}

/// ACK (0x04) frame with `ids` (a BoltQ addition) for raw id values (quotes included).
pub fn ack_many_frame(raw_ids: &[&[u8]], out: &mut Vec<u8>) {
    let ids_len: usize = raw_ids.iter().map(|id| id.len() + 1).sum::<usize>().max(1) - 1;
    let body_len = br#"{"ids":[]}"#.len() + ids_len;
    out.push(boltq::queue::protocol::frame::op::ACK);
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    out.extend_from_slice(br#"{"ids":["#);
    for (i, id) in raw_ids.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(id);
    }
    out.extend_from_slice(b"]}");
}

/// How many messages an OK ACK reply acknowledged: its `count` (an ACK with `ids`), else 1.
pub fn acked_count(payload: &[u8]) -> u64 {
    let mut count = 1;
    for_each_member(payload, |key, value| {
        if key == b"count" {
            if let Some(n) = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()) {
                count = n;
            }
        }
    });
    count
}

/// The `error` text of an ERROR reply (or the raw payload when it is not the usual shape).
pub fn error_text(payload: &[u8]) -> String {
    let mut text = None;
    for_each_member(payload, |key, value| {
        if key == b"error" {
            text = serde_json::from_slice::<String>(value).ok();
        }
    });
    text.unwrap_or_else(|| String::from_utf8_lossy(payload).into_owned())
}

/// Groups error texts that differ only in names and numbers (`queue "bench.3" is full
/// (capacity 1048576)` → `queue "…" is full (capacity N)`), so the report counts kinds.
pub fn error_kind(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '"' {
            out.push_str("\"…\"");
            for d in chars.by_ref() {
                if d == '"' {
                    break;
                }
            }
        } else if c.is_ascii_digit() {
            out.push('N');
            while chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                chars.next();
            }
        } else {
            out.push(c);
        }
        if out.len() > 120 {
            out.push('…');
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use boltq::queue::protocol::frame::{decode, op};

    #[test]
    fn template_writes_a_valid_frame_of_the_requested_payload_size() {
        let t = Template::new(op::PUBLISH, r#"{"payload":"#, r#","topic":"q"}"#);
        let filler = filler(300);
        for size in [PAYLOAD_BYTES_MIN, 100, 300] {
            let mut out = vec![9u8];
            t.write(&mut out, 0x1234, 7, size, &filler);
            let (f, used) = decode(&out[1..]).unwrap().unwrap();
            assert_eq!((f.code, used), (op::PUBLISH, out.len() - 1));
            let v: serde_json::Value = serde_json::from_slice(f.payload).unwrap();
            let payload = v["payload"].as_str().unwrap();
            assert_eq!(payload.len() + 2, size);
            let raw = serde_json::to_vec(&v["payload"]).unwrap();
            assert_eq!(read_stamp(&raw), Some((0x1234, 7)));
        }
    }

    #[test]
    fn consume_replies_single_and_batch() {
        let single = br#"{"id":"aa","topic":"q","payload":"0000000000000005000000000000000900","headers":{"k":"}"},"timestamp":1,"retry":0}"#;
        let mut seen = Vec::new();
        assert!(for_each_consumed(single, |d| seen.push((d.id.unwrap().to_vec(), d.stamp))));
        assert_eq!(seen, vec![(b"\"aa\"".to_vec(), Some((5, 9)))]);

        let batch =
            br#"{"messages":[{"id":"a","payload":{"x":[1,"]"]}},{"id":"b","payload":null}]}"#;
        let mut ids = Vec::new();
        assert!(for_each_consumed(batch, |d| ids.push(d.id.unwrap().to_vec())));
        assert_eq!(ids, vec![b"\"a\"".to_vec(), b"\"b\"".to_vec()]);

        assert!(!for_each_consumed(b"{\"id\":", |_| {}));
        assert!(!for_each_consumed(b"{\"status\":\"x\"}", |_| {}));
    }

    #[test]
    fn ack_frame_is_the_v1_body() {
        let mut out = Vec::new();
        ack_frame(b"\"abc\"", &mut out);
        let (f, _) = decode(&out).unwrap().unwrap();
        assert_eq!((f.code, f.payload), (op::ACK, &br#"{"id":"abc"}"#[..]));
    }

    #[test]
    fn an_ack_of_several_ids_is_one_frame_and_its_reply_count_is_read() {
        let mut out = Vec::new();
        ack_many_frame(&[b"\"a\"", b"\"bc\""], &mut out);
        let (f, used) = decode(&out).unwrap().unwrap();
        assert_eq!(used, out.len());
        assert_eq!(
            (f.code, f.payload),
            (op::ACK, &br#"{"ids":["a","bc"]}"#[..])
        );
        assert_eq!(acked_count(br#"{"status":"acked","count":64}"#), 64);
        assert_eq!(acked_count(br#"{"status":"acked"}"#), 1);
    }

    #[test]
    fn error_kinds_fold_names_and_numbers() {
        assert_eq!(
            error_kind(r#"queue "bench.3" is full (capacity 1048576)"#),
            r#"queue "…" is full (capacity N)"#
        );
        assert_eq!(
            error_text(br#"{"error":"topic is required"}"#),
            "topic is required"
        );
    }
}
