//! JSON text helpers that reproduce Go's `encoding/json` output byte for byte.
//!
//! Why: v1's SDK and CLI are Go programs, and both the request bodies they send and the text
//! the CLI prints are fixed by `encoding/json`. Matching them lets a compatibility test compare
//! our bytes with v1's, and keeps the CLI's output identical for scripts. What Go does that
//! serde_json does not:
//! - strings escape `<`, `>`, `&`, U+2028 and U+2029 as `\u003c`… (HTML-safe by default);
//! - a raw JSON value (`json.RawMessage`) is compacted with the same escaping, keeping its
//!   key order;
//! - `MarshalIndent` prints empty objects and arrays as `{}` / `[]`;
//! - a generic map is printed with its keys sorted and numbers as `float64`.
//!
//! Everything here works on text already validated as JSON (by serde_json), so the scanners
//! only track strings and nesting.

use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Checks that `text` is one JSON value (surrounding whitespace allowed). serde_json refuses
/// nesting deeper than 128 levels, which Go accepts; such payloads are refused here.
pub fn validate(text: &str) -> Result<(), String> {
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Appends `s` as a JSON string literal, escaped as Go's `json.Marshal` does.
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || is_html_escaped(c) => push_unicode_escape(out, c as u32),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Characters Go escapes even though JSON allows them raw: HTML-significant ASCII and the
/// two JavaScript line terminators.
fn is_html_escaped(c: char) -> bool {
    matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}')
}

fn push_unicode_escape(out: &mut String, code: u32) {
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(HEX_DIGITS[((code >> shift) & 0xf) as usize] as char);
    }
}

/// Go's compaction of a `json.RawMessage` on marshal: validates, drops insignificant
/// whitespace, HTML-escapes inside strings, keeps everything else (key order, number text).
pub fn compact(raw: &str) -> Result<String, String> {
    validate(raw)?;
    let mut out = String::with_capacity(raw.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in raw.chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            } else if is_html_escaped(c) {
                push_unicode_escape(&mut out, c as u32);
                continue;
            }
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            in_string = c == '"';
            out.push(c);
        }
    }
    Ok(out)
}

/// Go's `json.Indent(dst, src, "", "  ")` over compact JSON: one member or element per
/// line, two spaces per level, `": "` after keys, empty containers kept as `{}` / `[]`.
pub fn indent(compact_json: &str) -> String {
    let mut out = String::with_capacity(compact_json.len() * 2);
    let mut depth = 0usize;
    // An opening bracket's newline is held back until we see whether the container is empty.
    let mut open_pending = false;
    let mut in_string = false;
    let mut escaped = false;
    for c in compact_json.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        if open_pending && c != '}' && c != ']' {
            open_pending = false;
            newline(&mut out, depth);
        }
        match c {
            '{' | '[' => {
                out.push(c);
                depth += 1;
                open_pending = true;
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                if open_pending {
                    open_pending = false;
                } else {
                    newline(&mut out, depth);
                }
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            '"' => {
                in_string = true;
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

fn newline(out: &mut String, depth: usize) {
    out.push('\n');
    for _ in 0..depth {
        out.push_str("  ");
    }
}

/// `json.MarshalIndent(v, "", "  ")` of a value Go decoded into `map[string]any`: object keys
/// sorted (byte order), numbers printed as Go prints a `float64`.
pub fn pretty_generic(value: &Value) -> String {
    let mut compact_text = String::new();
    write_generic(&mut compact_text, value);
    indent(&compact_text)
}

/// Go-style compact text of a generic value (see [`pretty_generic`]).
pub fn write_generic(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_go_float(out, n.as_f64().unwrap_or(0.0)),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_generic(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Sorted explicitly: serde_json's map keeps insertion order when another crate in
            // the build enables its `preserve_order` feature.
            let sorted: BTreeMap<&str, &Value> = map.iter().map(|(k, v)| (k.as_str(), v)).collect();
            out.push('{');
            for (i, (key, item)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_generic(out, item);
            }
            out.push('}');
        }
    }
}

/// Go's `float64` encoding: shortest round-trip digits, plain notation for magnitudes in
/// [1e-6, 1e21), otherwise exponent form with a signed exponent (`1e+21`, `1e-7`).
fn write_go_float(out: &mut String, x: f64) {
    let magnitude = x.abs();
    if magnitude == 0.0 || (1e-6..1e21).contains(&magnitude) {
        let _ = write!(out, "{x}");
        return;
    }
    let text = format!("{x:e}");
    match text.split_once('e') {
        Some((mantissa, exponent)) if !exponent.starts_with('-') => {
            let _ = write!(out, "{mantissa}e+{exponent}");
        }
        _ => out.push_str(&text),
    }
}

/// The top-level members of a JSON object as `(key, raw value text)`, in document order,
/// or `None` if `text` is not a JSON object. Raw values are slices of `text`, so a payload
/// keeps its exact bytes (serde_json without `raw_value` cannot give us that).
pub fn object_members(text: &str) -> Option<Vec<(String, &str)>> {
    validate(text).ok()?;
    let bytes = text.as_bytes();
    let mut i = skip_whitespace(bytes, 0);
    if bytes.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let mut members = Vec::new();
    loop {
        i = skip_whitespace(bytes, i);
        match bytes.get(i) {
            Some(b'}') | None => return Some(members),
            Some(b',') => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let key_end = value_end(bytes, i);
        let key: String = serde_json::from_str(&text[i..key_end]).ok()?;
        i = skip_whitespace(bytes, key_end) + 1; // past ':'
        let start = skip_whitespace(bytes, i);
        let end = value_end(bytes, start);
        members.push((key, &text[start..end]));
        i = end;
    }
}

/// The raw text of the last top-level member named `key` (Go's decoder lets the last
/// duplicate win).
pub fn member<'a>(members: &[(String, &'a str)], key: &str) -> Option<&'a str> {
    members
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| *v)
}

fn skip_whitespace(bytes: &[u8], mut i: usize) -> usize {
    while matches!(bytes.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// End (exclusive) of the valid JSON value starting at `start`.
fn value_end(bytes: &[u8], start: usize) -> usize {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut i = start;
    while i < bytes.len() {
        let b = bytes[i];
        i += 1;
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
                if depth == 0 {
                    return i;
                }
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r' if depth == 0 => return i - 1,
            _ => {}
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_escape_like_go() {
        let mut s = String::new();
        write_string(
            &mut s,
            "a\"b\\c\n\r\t\u{8}\u{c}\u{1}<>&\u{2028}\u{2029}é\u{7f}",
        );
        let want = r#""a\"b\\c\n\r\t\b\f\u0001\u003c\u003e\u0026\u2028\u2029é"#;
        assert_eq!(
            s,
            format!("{want}\u{7f}\""),
            "DEL passes through raw, as in Go"
        );
    }

    #[test]
    fn compact_keeps_order_and_escapes_html_in_strings_only() {
        let raw = " { \"z\" : 1 , \"a\" : [ 1 , 2 ] , \"h\" : \"<b> & \\\" x\" , \"n\" : 1.50 } ";
        assert_eq!(
            compact(raw).unwrap(),
            r#"{"z":1,"a":[1,2],"h":"\u003cb\u003e \u0026 \" x","n":1.50}"#
        );
        assert!(compact("{").is_err());
        assert!(compact("").is_err());
        assert_eq!(compact("\"a b\"").unwrap(), "\"a b\"");
    }

    #[test]
    fn indent_matches_go_marshal_indent() {
        let text = r#"{"a":{},"b":[],"c":[1,{"d":"x,y:{"}],"e":{"f":null}}"#;
        let want = "{\n  \"a\": {},\n  \"b\": [],\n  \"c\": [\n    1,\n    {\n      \"d\": \"x,y:{\"\n    }\n  ],\n  \"e\": {\n    \"f\": null\n  }\n}";
        assert_eq!(indent(text), want);
        assert_eq!(indent("{}"), "{}");
        assert_eq!(indent("5"), "5");
    }

    #[test]
    fn generic_values_sort_keys_and_print_numbers_as_float64() {
        let v = json!({"Queues": {"b": 2, "a": 1}, "PendingCount": 0, "x": [1.5, 1e21, 1e-7, -3]});
        assert_eq!(
            pretty_generic(&v),
            "{\n  \"PendingCount\": 0,\n  \"Queues\": {\n    \"a\": 1,\n    \"b\": 2\n  },\n  \"x\": [\n    1.5,\n    1e+21,\n    1e-7,\n    -3\n  ]\n}"
        );
    }

    #[test]
    fn object_members_return_raw_values_in_order() {
        let text =
            r#" {"id":"x","payload": {"z":1, "a":"}"} ,"n":-1.5e3,"t":true,"e":[],"s":"a\"b"} "#;
        let m = object_members(text).unwrap();
        let keys: Vec<&str> = m.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["id", "payload", "n", "t", "e", "s"]);
        assert_eq!(member(&m, "payload"), Some(r#"{"z":1, "a":"}"}"#));
        assert_eq!(member(&m, "n"), Some("-1.5e3"));
        assert_eq!(member(&m, "t"), Some("true"));
        assert_eq!(member(&m, "e"), Some("[]"));
        assert_eq!(member(&m, "s"), Some(r#""a\"b""#));
        assert_eq!(member(&m, "missing"), None);
        assert!(object_members("[1]").is_none());
        assert!(object_members("{").is_none());
        assert_eq!(object_members("{}").unwrap().len(), 0);
        let dup = object_members(r#"{"k":1,"k":2}"#).unwrap();
        assert_eq!(member(&dup, "k"), Some("2"));
        let escaped_key = object_members(r#"{"sub\u0073criber_id":"s"}"#).unwrap();
        assert_eq!(escaped_key[0].0, "subscriber_id");
    }
}
