//! Reading an answer's body within a cap, and the short text kept of an error's body.

use super::error::HttpError;
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// Most body bytes kept from an unsuccessful answer (the rest is not read).
pub const STATUS_BODY_PREVIEW_BYTES_MAX: usize = 4 * 1024;

/// Appends `body` to `out` to its end; past `bytes_max` it stops with
/// [`HttpError::TooLarge`], `out` then holding the first `bytes_max` bytes.
pub(super) async fn read_capped(
    body: &mut Incoming,
    out: &mut Vec<u8>,
    bytes_max: usize,
) -> Result<(), HttpError> {
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| body_error(&e))?;
        if let Ok(data) = frame.into_data() {
            append_capped(out, &data, bytes_max)?;
        }
    }
    Ok(())
}

/// A broken body (bad chunk framing, cut short) is the server breaking HTTP; hyper reports
/// it as an I/O error of kind `InvalidData`/`InvalidInput` (decoding) or `UnexpectedEof`
/// (the connection ended before the declared length).
fn body_error(e: &hyper::Error) -> HttpError {
    use std::io::ErrorKind;
    let kind = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind);
    match kind {
        _ if e.is_incomplete_message() => HttpError::Malformed(CUT_SHORT.to_string()),
        Some(ErrorKind::UnexpectedEof) => HttpError::Malformed(CUT_SHORT.to_string()),
        Some(ErrorKind::InvalidData | ErrorKind::InvalidInput) => {
            HttpError::Malformed(format!("response body: {e}"))
        }
        _ => HttpError::from_hyper(e),
    }
}

const CUT_SHORT: &str = "connection closed inside the response body";

fn append_capped(out: &mut Vec<u8>, bytes: &[u8], bytes_max: usize) -> Result<(), HttpError> {
    let room = bytes_max.saturating_sub(out.len());
    if bytes.len() > room {
        out.extend_from_slice(&bytes[..room]);
        return Err(HttpError::TooLarge { bytes_max });
    }
    out.extend_from_slice(bytes);
    Ok(())
}

/// `body` as text, at most [`STATUS_BODY_PREVIEW_BYTES_MAX`] bytes, cut at a char boundary.
pub(super) fn body_preview(body: &[u8]) -> String {
    let cut = &body[..body.len().min(STATUS_BODY_PREVIEW_BYTES_MAX)];
    let mut text = String::from_utf8_lossy(cut).into_owned();
    let mut end = text.len().min(STATUS_BODY_PREVIEW_BYTES_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_are_bounded_and_valid_text() {
        assert_eq!(body_preview(b"oops"), "oops");
        let long = "é".repeat(STATUS_BODY_PREVIEW_BYTES_MAX);
        let p = body_preview(long.as_bytes());
        assert!(
            p.len() <= STATUS_BODY_PREVIEW_BYTES_MAX && p.len() > STATUS_BODY_PREVIEW_BYTES_MAX - 4
        );
        assert!(p.chars().all(|c| c == 'é'));
    }

    #[test]
    fn appending_stops_at_the_cap_keeping_a_prefix() {
        let mut out = b"ab".to_vec();
        append_capped(&mut out, b"cd", 4).unwrap();
        let err = append_capped(&mut out, b"ef", 5).unwrap_err();
        assert_eq!(err, HttpError::TooLarge { bytes_max: 5 });
        assert_eq!(out, b"abcde");
    }
}
