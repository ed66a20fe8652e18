//! The stored value: the JSON text a client sent, kept verbatim (spec §12 item 16).

/// The JSON text of `text` without the insignificant whitespace around it, if `text` is
/// exactly one JSON value. Only the outer whitespace goes: it is not part of the value, and
/// dropping it makes `memory_used` and the `incr` parse independent of how the body was
/// laid out.
pub(crate) fn json_value_text(text: &str) -> Result<&str, String> {
    let trimmed = text.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'));
    // `IgnoredAny` walks the whole text (serde_json's depth limit applies) without building
    // a tree, and `from_str` refuses anything after the value.
    serde_json::from_str::<serde::de::IgnoredAny>(trimmed)
        .map(|_| trimmed)
        .map_err(|e| e.to_string())
}

/// The integer `incr` reads from a stored value: a JSON integer number in `i64`, or a JSON
/// string whose content is a decimal `i64` (how v1 stored a counter set as a string).
/// Anything else (fractions, exponents, out of range, other types) is not an integer.
pub(crate) fn integer_of(value_json: &str) -> Option<i64> {
    if value_json.starts_with('"') {
        let content: String = serde_json::from_str(value_json).ok()?;
        content.parse().ok()
    } else {
        // The text is valid JSON, so a successful i64 parse means an integer literal.
        value_json.parse().ok()
    }
}

/// The value as v1 held it: a JSON string unquoted, any other value as its JSON text. v1's
/// `/cache/entries` `size` and its `incr` error text are of this form (`abc`, 3 bytes, for
/// the string `"abc"`), so ours are too; the value itself is still kept verbatim.
pub(crate) fn v1_text(value_json: &str) -> std::borrow::Cow<'_, str> {
    if value_json.starts_with('"') {
        if let Ok(content) = serde_json::from_str::<String>(value_json) {
            return std::borrow::Cow::Owned(content);
        }
    }
    std::borrow::Cow::Borrowed(value_json)
}

#[cfg(test)]
mod v1_text_tests {
    use super::v1_text;

    #[test]
    fn strings_lose_their_quotes_and_escapes_other_values_stay_json() {
        assert_eq!(v1_text(r#""abc""#), "abc");
        assert_eq!(v1_text(r#""a\"b""#), "a\"b");
        assert_eq!(v1_text(r#""\u00e9""#), "é");
        assert_eq!(v1_text("12"), "12");
        assert_eq!(v1_text(r#"{"a":1}"#), r#"{"a":1}"#);
        assert_eq!(v1_text("null"), "null");
    }
}
