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
