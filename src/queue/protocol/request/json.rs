//! A small JSON reader with Go `encoding/json` semantics, for the v1 request structs.
//!
//! v1 decodes every request with `json.Unmarshal` into a Go struct. Clients depend on the
//! resulting rules, which serde does not give out of the box:
//!
//! - unknown keys are ignored; key names match field names case-insensitively with Go's
//!   folding (ASCII case, plus `ſ` ~ `s` and the Kelvin sign ~ `k`);
//! - members are applied in order, so a repeated key (in any case) lets the last one win;
//! - `null` leaves a string/number/bool field as it was, resets a map, and stores the text
//!   `null` into a raw-JSON field;
//! - a map member repeated merges into the map already decoded (Go reuses the map);
//! - a value of the wrong JSON type is a type error, but Go keeps decoding and reports the
//!   first type error only when the whole input is syntactically valid — a syntax error
//!   anywhere wins;
//! - invalid UTF-8 inside strings becomes U+FFFD, lone surrogate escapes too;
//! - error texts follow Go's wording (`unexpected end of JSON input`, `invalid character
//!   'x' looking for beginning of value`, `json: cannot unmarshal string into Go struct
//!   field ...`). Clients do not rely on them, but they are what a v1 user has seen.
//!
//! Nesting is bounded by [`DEPTH_MAX`] and containers are walked iteratively, so hostile
//! input can neither overflow the stack nor cost more than one pass over the bytes.

use std::borrow::Cow;
use std::collections::BTreeMap;

/// Deepest nesting of arrays and objects accepted, counting the request object itself.
/// Go allows 10,000; nothing a client sends needs more than a handful, and a bound keeps
/// the cost of one request predictable.
pub const DEPTH_MAX: usize = 128;

const UNEXPECTED_END: &str = "unexpected end of JSON input";

/// A syntax error: the request is rejected with this detail, whatever else was decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Syntax(pub String);

/// Go's struct field types, named as Go's type errors name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntType {
    Int,
    Int64,
    Uint64,
}

impl IntType {
    fn go_name(self) -> &'static str {
        match self {
            IntType::Int => "int",
            IntType::Int64 => "int64",
            IntType::Uint64 => "uint64",
        }
    }
}

pub struct Reader<'a> {
    src: &'a [u8],
    pos: usize,
    /// Whole input is valid UTF-8 (the usual case): strings then need no per-byte checks.
    utf8_ok: bool,
    /// Go type name of the struct being decoded, for type error texts.
    struct_name: &'static str,
    /// First type mismatch; reported only if the input turns out to be valid JSON.
    type_error: Option<String>,
}

/// Decodes `src` as one JSON object into a Go-like struct. `member` is called for each
/// key, in order, with the reader positioned at the value; it must consume exactly one
/// value (use the `read_*` methods or [`Reader::skip`]). Returns the Go error detail
/// (syntax error first, else the first type error).
pub fn decode_object<F>(src: &[u8], struct_name: &'static str, mut member: F) -> Result<(), String>
where
    F: FnMut(&mut Reader<'_>, &str) -> Result<(), Syntax>,
{
    let mut r = Reader {
        src,
        pos: 0,
        utf8_ok: std::str::from_utf8(src).is_ok(),
        struct_name,
        type_error: None,
    };
    match r.top_level(&mut member) {
        Err(Syntax(detail)) => Err(detail),
        Ok(()) => r.type_error.map_or(Ok(()), Err),
    }
}

/// Whether a JSON key selects the Go field whose JSON name is `name` (lowercase ASCII).
/// Go folds both sides to the smallest rune of each case-folding orbit; the only non-ASCII
/// runes whose orbit holds an ASCII letter are `ſ` (U+017F, orbit of `s`) and `K`
/// (U+212A KELVIN SIGN, orbit of `k`).
pub fn key_matches(key: &str, name: &str) -> bool {
    if key == name {
        return true;
    }
    let mut want = name.bytes();
    for c in key.chars() {
        let folded = match c {
            '\u{017F}' => b's',
            '\u{212A}' => b'k',
            c if c.is_ascii() => (c as u8).to_ascii_lowercase(),
            _ => return false,
        };
        if want.next() != Some(folded) {
            return false;
        }
    }
    want.next().is_none()
}

/// Go's `quoteChar`: how a byte is shown in `invalid character ...` errors.
fn quote_char(c: u8) -> String {
    match c {
        b'\'' => r"'\''".to_string(),
        b'"' => "'\"'".to_string(),
        b'\\' => r"'\\'".to_string(),
        0x07 => r"'\a'".to_string(),
        0x08 => r"'\b'".to_string(),
        0x0c => r"'\f'".to_string(),
        b'\n' => r"'\n'".to_string(),
        b'\r' => r"'\r'".to_string(),
        b'\t' => r"'\t'".to_string(),
        0x0b => r"'\v'".to_string(),
        0x00..=0x1f | 0x7f => format!(r"'\x{c:02x}'"),
        // Go shows the byte as the rune of the same value; C1 controls, NBSP and the soft
        // hyphen are not printable there.
        0x80..=0xa0 | 0xad => format!(r"'\u{c:04x}'"),
        _ => format!("'{}'", c as char),
    }
}

fn invalid(c: u8, context: &str) -> Syntax {
    Syntax(format!("invalid character {} {context}", quote_char(c)))
}

fn end() -> Syntax {
    Syntax(UNEXPECTED_END.to_string())
}

/// The JSON type a value starts with, named as Go names it in type errors.
fn kind_name(first: u8) -> &'static str {
    match first {
        b'{' => "object",
        b'[' => "array",
        b'"' => "string",
        b't' | b'f' => "bool",
        b'n' => "null",
        _ => "number",
    }
}

impl<'a> Reader<'a> {
    fn top_level<F>(&mut self, member: &mut F) -> Result<(), Syntax>
    where
        F: FnMut(&mut Reader<'_>, &str) -> Result<(), Syntax>,
    {
        match self.peek()? {
            b'{' => self.members(member)?,
            b'n' => self.literal(b"null", None)?,
            c @ (b'[' | b'"' | b't' | b'f' | b'-' | b'0'..=b'9') => {
                let detail = format!(
                    "json: cannot unmarshal {} into Go value of type main.{}",
                    kind_name(c),
                    self.struct_name
                );
                self.note_type_error(detail);
                self.value(0, None)?;
            }
            c => return Err(invalid(c, "looking for beginning of value")),
        }
        self.skip_ws();
        match self.src.get(self.pos) {
            None => Ok(()),
            Some(&c) => Err(invalid(c, "after top-level value")),
        }
    }

    fn members<F>(&mut self, member: &mut F) -> Result<(), Syntax>
    where
        F: FnMut(&mut Reader<'_>, &str) -> Result<(), Syntax>,
    {
        self.pos += 1; // '{'
        if self.peek()? == b'}' {
            self.pos += 1;
            return Ok(());
        }
        loop {
            let key = self.key()?;
            member(self, &key)?;
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Ok(());
                }
                c => return Err(invalid(c, "after object key:value pair")),
            }
        }
    }

    /// Reads `"key" :` and returns the decoded key.
    fn key(&mut self) -> Result<Cow<'a, str>, Syntax> {
        let c = self.peek()?;
        if c != b'"' {
            return Err(invalid(c, "looking for beginning of object key string"));
        }
        let key = self.string()?;
        self.colon(None)?;
        Ok(key)
    }

    fn colon(&mut self, out: Option<&mut Vec<u8>>) -> Result<(), Syntax> {
        match self.peek()? {
            b':' => {
                self.pos += 1;
                if let Some(o) = out {
                    o.push(b':');
                }
                Ok(())
            }
            c => Err(invalid(c, "after object key")),
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.src.get(self.pos) {
            self.pos += 1;
        }
    }

    /// The next significant byte, not consumed.
    fn peek(&mut self) -> Result<u8, Syntax> {
        self.skip_ws();
        self.src.get(self.pos).copied().ok_or_else(end)
    }

    fn note_type_error(&mut self, detail: String) {
        if self.type_error.is_none() {
            self.type_error = Some(detail);
        }
    }

    fn field_type_error(&mut self, value: &str, field: &str, go_type: &str) {
        let detail = format!(
            "json: cannot unmarshal {value} into Go struct field {}.{field} of type {go_type}",
            self.struct_name
        );
        self.note_type_error(detail);
    }

    /// Consumes one member value of the top-level object (depth 1) without using it.
    pub fn skip(&mut self) -> Result<(), Syntax> {
        self.value(1, None)
    }

    /// A `string` field.
    pub fn read_str(&mut self, field: &str, into: &mut String) -> Result<(), Syntax> {
        match self.peek()? {
            b'"' => *into = self.string()?.into_owned(),
            b'n' => self.literal(b"null", None)?,
            c => self.mismatch(c, field, "string")?,
        }
        Ok(())
    }

    /// A `bool` field.
    pub fn read_bool(&mut self, field: &str, into: &mut bool) -> Result<(), Syntax> {
        match self.peek()? {
            b't' => {
                self.literal(b"true", None)?;
                *into = true;
            }
            b'f' => {
                self.literal(b"false", None)?;
                *into = false;
            }
            b'n' => self.literal(b"null", None)?,
            c => self.mismatch(c, field, "bool")?,
        }
        Ok(())
    }

    /// An integer field. Like Go's `strconv.ParseInt` on the literal: `1.0`, `1e3` and
    /// out-of-range numbers are type errors (`number 1.5`), as are strings.
    pub fn read_int(&mut self, field: &str, ty: IntType, into: &mut i128) -> Result<(), Syntax> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => {
                let text = self.number(None)?;
                let parsed = match ty {
                    IntType::Uint64 => text.parse::<u64>().ok().map(i128::from),
                    IntType::Int | IntType::Int64 => text.parse::<i64>().ok().map(i128::from),
                };
                match parsed {
                    Some(v) => *into = v,
                    None => self.field_type_error(&format!("number {text}"), field, ty.go_name()),
                }
            }
            b'n' => self.literal(b"null", None)?,
            c => self.mismatch(c, field, ty.go_name())?,
        }
        Ok(())
    }

    /// A `map[string]string` field: `null` resets it, an object merges into it (a `null`
    /// member value stores `""`), anything else is a type error.
    pub fn read_string_map(
        &mut self,
        field: &str,
        into: &mut BTreeMap<String, String>,
    ) -> Result<(), Syntax> {
        match self.peek()? {
            b'{' => self.string_map_members(field, into),
            b'n' => {
                self.literal(b"null", None)?;
                into.clear();
                Ok(())
            }
            c => self.mismatch(c, field, "map[string]string"),
        }
    }

    fn string_map_members(
        &mut self,
        field: &str,
        into: &mut BTreeMap<String, String>,
    ) -> Result<(), Syntax> {
        self.pos += 1; // '{'
        if self.peek()? == b'}' {
            self.pos += 1;
            return Ok(());
        }
        loop {
            let key = self.key()?.into_owned();
            match self.peek()? {
                b'"' => {
                    let value = self.string()?.into_owned();
                    into.insert(key, value);
                }
                b'n' => {
                    self.literal(b"null", None)?;
                    into.insert(key, String::new());
                }
                c => {
                    self.field_type_error(kind_name(c), field, "string");
                    self.value(2, None)?;
                }
            }
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Ok(());
                }
                c => return Err(invalid(c, "after object key:value pair")),
            }
        }
    }

    /// A `json.RawMessage` field: any JSON value, stored compacted (whitespace outside
    /// strings removed — what Go's encoder does when it writes a RawMessage back).
    /// `null` stores `null`, as Go's `RawMessage.UnmarshalJSON` does.
    pub fn read_raw(&mut self, into: &mut Vec<u8>) -> Result<(), Syntax> {
        into.clear();
        self.value(1, Some(into))
    }

    fn mismatch(&mut self, first: u8, field: &str, go_type: &str) -> Result<(), Syntax> {
        if !matches!(
            first,
            b'{' | b'[' | b'"' | b't' | b'f' | b'n' | b'-' | b'0'..=b'9'
        ) {
            return Err(invalid(first, "looking for beginning of value"));
        }
        self.field_type_error(kind_name(first), field, go_type);
        self.value(1, None)
    }

    /// Consumes one value whose enclosing container is at `depth`, copying its compact
    /// form into `out`. Iterative: `open` holds the kinds of the containers entered here.
    fn value(&mut self, depth: usize, mut out: Option<&mut Vec<u8>>) -> Result<(), Syntax> {
        let mut open = [0u8; DEPTH_MAX];
        let mut len = 0usize;
        loop {
            // A value starts here.
            let c = self.peek()?;
            match c {
                b'{' | b'[' => {
                    if depth + len + 1 > DEPTH_MAX {
                        return Err(Syntax(format!("exceeded max depth of {DEPTH_MAX}")));
                    }
                    self.pos += 1;
                    emit(&mut out, c);
                    let closer = if c == b'{' { b'}' } else { b']' };
                    if self.peek()? == closer {
                        self.pos += 1;
                        emit(&mut out, closer);
                    } else {
                        open[len] = c;
                        len += 1;
                        if c == b'{' {
                            self.member_key(&mut out)?;
                        }
                        continue;
                    }
                }
                b'"' => {
                    self.raw_string(out.as_deref_mut())?;
                }
                b'-' | b'0'..=b'9' => {
                    self.number(out.as_deref_mut())?;
                }
                b't' => self.literal(b"true", out.as_deref_mut())?,
                b'f' => self.literal(b"false", out.as_deref_mut())?,
                b'n' => self.literal(b"null", out.as_deref_mut())?,
                _ => return Err(invalid(c, "looking for beginning of value")),
            }
            // A value ended: close containers until one expects another element.
            loop {
                if len == 0 {
                    return Ok(());
                }
                let c = self.peek()?;
                let in_object = open[len - 1] == b'{';
                self.pos += 1;
                match (in_object, c) {
                    (true, b',') => {
                        emit(&mut out, b',');
                        self.member_key(&mut out)?;
                        break;
                    }
                    (false, b',') => {
                        emit(&mut out, b',');
                        break;
                    }
                    (true, b'}') | (false, b']') => {
                        emit(&mut out, c);
                        len -= 1;
                    }
                    (true, _) => return Err(invalid(c, "after object key:value pair")),
                    (false, _) => return Err(invalid(c, "after array element")),
                }
            }
        }
    }

    /// Inside a container being skipped or copied: `"key":`.
    fn member_key(&mut self, out: &mut Option<&mut Vec<u8>>) -> Result<(), Syntax> {
        let c = self.peek()?;
        if c != b'"' {
            return Err(invalid(c, "looking for beginning of object key string"));
        }
        self.raw_string(out.as_deref_mut())?;
        self.colon(out.as_deref_mut())
    }

    fn literal(&mut self, word: &'static [u8], out: Option<&mut Vec<u8>>) -> Result<(), Syntax> {
        let name = std::str::from_utf8(word).expect("literal words are ASCII");
        for (i, &want) in word.iter().enumerate() {
            match self.src.get(self.pos + i) {
                None => return Err(end()),
                Some(&got) if got == want => {}
                Some(&got) => {
                    let context = format!("in literal {name} (expecting {})", quote_char(want));
                    return Err(invalid(got, &context));
                }
            }
        }
        self.pos += word.len();
        if let Some(o) = out {
            o.extend_from_slice(word);
        }
        Ok(())
    }

    /// A number literal, `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, returned as text.
    /// What follows it is checked by the caller's context, as in Go's scanner.
    fn number(&mut self, out: Option<&mut Vec<u8>>) -> Result<&'a str, Syntax> {
        let start = self.pos;
        if self.src[self.pos] == b'-' {
            self.pos += 1;
        }
        match self.src.get(self.pos) {
            None => return Err(end()),
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            Some(&c) => return Err(invalid(c, "in numeric literal")),
        }
        if self.src.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            self.required_digit("after decimal point in numeric literal")?;
        }
        if let Some(b'e' | b'E') = self.src.get(self.pos) {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.src.get(self.pos) {
                self.pos += 1;
            }
            self.required_digit("in exponent of numeric literal")?;
        }
        let text = &self.src[start..self.pos];
        if let Some(o) = out {
            o.extend_from_slice(text);
        }
        Ok(std::str::from_utf8(text).expect("number literals are ASCII"))
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.src.get(self.pos) {
            self.pos += 1;
        }
    }

    fn required_digit(&mut self, context: &str) -> Result<(), Syntax> {
        match self.src.get(self.pos) {
            None => Err(end()),
            Some(b'0'..=b'9') => {
                self.digits();
                Ok(())
            }
            Some(&c) => Err(invalid(c, context)),
        }
    }

    /// Validates the string starting at `pos` (on its opening quote) and copies it as
    /// written — escapes kept — into `out`, with invalid UTF-8 replaced by U+FFFD so that
    /// replies are always valid UTF-8. Returns the span between the quotes.
    fn raw_string(&mut self, mut out: Option<&mut Vec<u8>>) -> Result<(usize, usize), Syntax> {
        self.pos += 1; // opening quote
        let start = self.pos;
        let mut copied = start;
        emit(&mut out, b'"');
        loop {
            let Some(&c) = self.src.get(self.pos) else {
                return Err(end());
            };
            match c {
                b'"' => break,
                b'\\' => self.escape()?,
                0x00..=0x1f => return Err(invalid(c, "in string literal")),
                0x80..=0xff if !self.utf8_ok => {
                    let bad_len = invalid_utf8_len(&self.src[self.pos..]);
                    if bad_len == 0 {
                        self.pos += 1;
                    } else {
                        if let Some(o) = out.as_deref_mut() {
                            o.extend_from_slice(&self.src[copied..self.pos]);
                            o.extend_from_slice("\u{FFFD}".as_bytes());
                        }
                        self.pos += bad_len;
                        copied = self.pos;
                    }
                }
                _ => self.pos += 1,
            }
        }
        let span = (start, self.pos);
        if let Some(o) = out {
            // Room for the closing quote as well: pushing it past the capacity would double
            // the buffer, and a payload keeps its buffer for as long as its message lives.
            o.reserve_exact(self.pos - copied + 1);
            o.extend_from_slice(&self.src[copied..self.pos]);
            o.push(b'"');
        }
        self.pos += 1; // closing quote
        Ok(span)
    }

    /// Validates the escape at `pos` (on the backslash) and steps over it.
    fn escape(&mut self) -> Result<(), Syntax> {
        let Some(&c) = self.src.get(self.pos + 1) else {
            return Err(end());
        };
        match c {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                self.pos += 2;
                Ok(())
            }
            b'u' => {
                for i in 0..4 {
                    match self.src.get(self.pos + 2 + i) {
                        None => return Err(end()),
                        Some(h) if h.is_ascii_hexdigit() => {}
                        Some(&h) => return Err(invalid(h, r"in \u hexadecimal character escape")),
                    }
                }
                self.pos += 6;
                Ok(())
            }
            _ => Err(invalid(c, "in string escape code")),
        }
    }

    /// A string, decoded (escapes resolved, bad UTF-8 and lone surrogates as U+FFFD).
    fn string(&mut self) -> Result<Cow<'a, str>, Syntax> {
        let (start, end) = self.raw_string(None)?;
        let raw = &self.src[start..end];
        if !raw.contains(&b'\\') {
            return Ok(String::from_utf8_lossy(raw));
        }
        Ok(Cow::Owned(unescape(raw)))
    }
}

fn emit(out: &mut Option<&mut Vec<u8>>, byte: u8) {
    if let Some(o) = out.as_deref_mut() {
        o.push(byte);
    }
}

/// 0 when `bytes` starts with a valid UTF-8 character, else how many bytes to replace.
fn invalid_utf8_len(bytes: &[u8]) -> usize {
    let window = &bytes[..bytes.len().min(4)];
    match std::str::from_utf8(window) {
        Ok(_) => 0,
        Err(e) if e.valid_up_to() > 0 => 0,
        Err(e) => e.error_len().unwrap_or(1),
    }
}

/// Resolves the escapes of an already validated string body.
fn unescape(raw: &[u8]) -> String {
    let mut bytes = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] != b'\\' {
            bytes.push(raw[i]);
            i += 1;
            continue;
        }
        let simple = match raw[i + 1] {
            b'b' => Some(0x08),
            b'f' => Some(0x0c),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'u' => None,
            other => Some(other), // '"', '\\', '/'
        };
        if let Some(b) = simple {
            bytes.push(b);
            i += 2;
            continue;
        }
        let (ch, used) = unicode_escape(&raw[i..]);
        let mut buf = [0u8; 4];
        bytes.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
        i += used;
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `\uXXXX` at the start of `raw`, joined with a following low surrogate escape when it is
/// a high surrogate. Returns the character and the bytes used; lone surrogates are U+FFFD.
fn unicode_escape(raw: &[u8]) -> (char, usize) {
    let unit = hex4(&raw[2..6]);
    if (0xD800..0xDC00).contains(&unit) && raw.len() >= 12 && raw[6] == b'\\' && raw[7] == b'u' {
        let low = hex4(&raw[8..12]);
        if (0xDC00..0xE000).contains(&low) {
            let code = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
            return (char::from_u32(code).unwrap_or('\u{FFFD}'), 12);
        }
    }
    (char::from_u32(unit).unwrap_or('\u{FFFD}'), 6)
}

fn hex4(digits: &[u8]) -> u32 {
    digits.iter().fold(0, |acc, &d| {
        let v = (d as char).to_digit(16).expect("escape validated as hex");
        acc * 16 + v
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_of(src: &str) -> Result<String, String> {
        let mut raw = Vec::new();
        decode_object(src.as_bytes(), "t", |r, _| r.read_raw(&mut raw))?;
        Ok(String::from_utf8(raw).unwrap())
    }

    #[test]
    fn raw_values_are_compacted_but_strings_kept_verbatim() {
        assert_eq!(
            raw_of("{\"p\" : { \"a\" : [ 1 , 2.5e-3 , \"x y\\n\\u00e9\" ] ,\n\"b\":null } }"),
            Ok("{\"a\":[1,2.5e-3,\"x y\\n\\u00e9\"],\"b\":null}".to_string())
        );
        assert_eq!(raw_of(r#"{"p":null}"#), Ok("null".to_string()));
        assert_eq!(raw_of(r#"{"p":"é"}"#), Ok("\"é\"".to_string()));
        assert_eq!(raw_of(r#"{"p":[]}"#), Ok("[]".to_string()));
        assert_eq!(raw_of(r#"{"p":{}}"#), Ok("{}".to_string()));
    }

    #[test]
    fn invalid_utf8_becomes_replacement_characters() {
        let mut src = b"{\"p\":\"a".to_vec();
        src.extend_from_slice(&[0xff, b'b', 0xc3]);
        src.extend_from_slice(b"\"}");
        let mut raw = Vec::new();
        decode_object(&src, "t", |r, _| r.read_raw(&mut raw)).unwrap();
        assert_eq!(String::from_utf8(raw).unwrap(), "\"a\u{FFFD}b\u{FFFD}\"");
    }

    #[test]
    fn go_syntax_error_texts() {
        let cases = [
            ("", "unexpected end of JSON input"),
            ("   ", "unexpected end of JSON input"),
            ("{", "unexpected end of JSON input"),
            ("{\"p\":", "unexpected end of JSON input"),
            ("{\"p\":\"abc", "unexpected end of JSON input"),
            ("x", "invalid character 'x' looking for beginning of value"),
            (
                "{\"p\":}",
                "invalid character '}' looking for beginning of value",
            ),
            (
                "{p:1}",
                "invalid character 'p' looking for beginning of object key string",
            ),
            ("{\"p\" 1}", "invalid character '1' after object key"),
            (
                "{\"p\":1 2}",
                "invalid character '2' after object key:value pair",
            ),
            ("{\"p\":[1 2]}", "invalid character '2' after array element"),
            ("{\"p\":1}x", "invalid character 'x' after top-level value"),
            ("{\"p\":-x}", "invalid character 'x' in numeric literal"),
            (
                "{\"p\":1.}",
                "invalid character '}' after decimal point in numeric literal",
            ),
            (
                "{\"p\":1e}",
                "invalid character '}' in exponent of numeric literal",
            ),
            (
                "{\"p\":tru}",
                "invalid character '}' in literal true (expecting 'e')",
            ),
            (
                "{\"p\":nul}",
                "invalid character '}' in literal null (expecting 'l')",
            ),
            (
                "{\"p\":\"\\x\"}",
                "invalid character 'x' in string escape code",
            ),
            (
                "{\"p\":\"\\u12g4\"}",
                r"invalid character 'g' in \u hexadecimal character escape",
            ),
            (
                "{\"p\":\"a\nb\"}",
                r"invalid character '\n' in string literal",
            ),
            (
                "{\"p\":01}",
                "invalid character '1' after object key:value pair",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(raw_of(src), Err(want.to_string()), "input {src:?}");
        }
    }

    #[test]
    fn depth_is_bounded_without_recursion() {
        let ok = format!(
            "{{\"p\":{}{}}}",
            "[".repeat(DEPTH_MAX - 1),
            "]".repeat(DEPTH_MAX - 1)
        );
        assert!(raw_of(&ok).is_ok());
        let deep = format!(
            "{{\"p\":{}{}}}",
            "[".repeat(DEPTH_MAX),
            "]".repeat(DEPTH_MAX)
        );
        assert_eq!(
            raw_of(&deep),
            Err(format!("exceeded max depth of {DEPTH_MAX}"))
        );
        let huge = format!("{{\"p\":{}", "[{\"a\":".repeat(1_000_000));
        assert_eq!(
            raw_of(&huge),
            Err(format!("exceeded max depth of {DEPTH_MAX}"))
        );
    }

    #[test]
    fn go_key_folding() {
        assert!(key_matches("topic", "topic"));
        assert!(key_matches("TOPIC", "topic"));
        assert!(key_matches("ToPiC", "topic"));
        assert!(key_matches("api_\u{212A}ey", "api_key"));
        assert!(key_matches("header\u{017F}", "headers"));
        assert!(key_matches("HEADER\u{017F}", "headers"));
        assert!(!key_matches("topics", "topic"));
        assert!(!key_matches("topi", "topic"));
        assert!(!key_matches("t\u{00f6}pic", "topic"));
        assert!(!key_matches("api-key", "api_key"));
    }

    #[test]
    fn escapes_decode_like_go() {
        let mut s = String::new();
        let src = r#"{"s":"a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00\ud800x\udc00"}"#;
        decode_object(src.as_bytes(), "t", |r, _| r.read_str("s", &mut s)).unwrap();
        assert_eq!(s, "a\"\\/\u{8}\u{c}\n\r\té😀\u{FFFD}x\u{FFFD}");
    }
}
