//! The JSON writer the encoders share: object members straight into the output buffer, no
//! intermediate `serde_json::Value` (the `record` frame is on the delivery hot path).

use super::out::HeadersOut;
use base64::Engine;

/// Appends `s` as a JSON string with serde_json's escaping (quotes, backslash and control
/// characters escaped; everything else, non-ASCII included, as is).
pub(super) fn write_json_string(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(&mut *out, s).expect("a string serializes into a Vec without error");
}

pub(super) fn write_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

pub(super) fn write_i64(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    write_u64(out, n.unsigned_abs());
}

/// Writes one JSON object's members, handling the commas. Keys are static ASCII names
/// that need no escaping.
pub(super) struct JsonObject<'o> {
    pub(super) out: &'o mut Vec<u8>,
    empty: bool,
}

impl<'o> JsonObject<'o> {
    pub(super) fn begin(out: &'o mut Vec<u8>) -> Self {
        out.push(b'{');
        JsonObject { out, empty: true }
    }

    pub(super) fn end(self) {
        self.out.push(b'}');
    }

    pub(super) fn key(&mut self, key: &'static str) {
        debug_assert!(key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    pub(super) fn object(&mut self, key: &'static str) -> JsonObject<'_> {
        self.key(key);
        JsonObject::begin(self.out)
    }

    pub(super) fn str(&mut self, key: &'static str, value: &str) {
        self.key(key);
        write_json_string(self.out, value);
    }

    pub(super) fn str_nonempty(&mut self, key: &'static str, value: &str) {
        if !value.is_empty() {
            self.str(key, value);
        }
    }

    pub(super) fn uint(&mut self, key: &'static str, value: u64) {
        self.key(key);
        write_u64(self.out, value);
    }

    pub(super) fn uint_nonzero(&mut self, key: &'static str, value: u64) {
        if value != 0 {
            self.uint(key, value);
        }
    }

    pub(super) fn int(&mut self, key: &'static str, value: i64) {
        self.key(key);
        write_i64(self.out, value);
    }

    pub(super) fn bool(&mut self, key: &'static str, value: bool) {
        self.key(key);
        self.out
            .extend_from_slice(if value { b"true" } else { b"false" });
    }

    pub(super) fn true_only(&mut self, key: &'static str, value: bool) {
        if value {
            self.bool(key, true);
        }
    }

    /// Standard alphabet, padded, encoded in place.
    pub(super) fn base64_nonempty(&mut self, key: &'static str, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.key(key);
        let len = base64::encoded_len(bytes.len(), true).expect("a slice's base64 fits usize");
        self.out.push(b'"');
        let start = self.out.len();
        self.out.resize(start + len, 0);
        let written = base64::engine::general_purpose::STANDARD
            .encode_slice(bytes, &mut self.out[start..])
            .expect("buffer sized by encoded_len");
        assert_eq!(written, len);
        self.out.push(b'"');
    }

    pub(super) fn headers(&mut self, key: &'static str, headers: HeadersOut<'_>) {
        if headers.is_empty() {
            return;
        }
        let mut h = self.object(key);
        headers.for_each(|k, v| {
            if !h.empty {
                h.out.push(b',');
            }
            h.empty = false;
            write_json_string(h.out, &String::from_utf8_lossy(k));
            h.out.push(b':');
            write_json_string(h.out, &String::from_utf8_lossy(v));
        });
        h.end();
    }
}
