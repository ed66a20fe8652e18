//! Why an outbound call failed.

use std::fmt;

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The URL (or a redirect's `Location`) is unusable.
    Url(String),
    /// Name resolution or the TCP connect failed.
    Connect(String),
    /// TLS failed (the text starts with "TLS"): most often the handshake, on a certificate that does not chain to a trusted
    /// CA or does not name the host. Never retried in plain text.
    Tls(String),
    /// The call's total timeout passed.
    Timeout,
    /// The final answer was not 2xx; keeps at most
    /// [`super::STATUS_BODY_PREVIEW_BYTES_MAX`] of its body.
    Status { code: u16, body_preview: String },
    /// Either side broke HTTP: a request header we refuse to send, or an answer we cannot
    /// parse. The text says which.
    Malformed(String),
    /// The answer's body is over the caller's cap.
    TooLarge { bytes_max: usize },
    /// The connection failed after it was open.
    Io(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Url(m) => write!(f, "bad URL: {m}"),
            HttpError::Connect(m) => write!(f, "cannot connect: {m}"),
            HttpError::Tls(m) => write!(f, "{m}"),
            HttpError::Timeout => write!(f, "timed out"),
            HttpError::Status { code, body_preview } if body_preview.is_empty() => {
                write!(f, "HTTP status {code}")
            }
            HttpError::Status { code, body_preview } => {
                write!(f, "HTTP status {code}: {body_preview}")
            }
            HttpError::Malformed(m) => write!(f, "malformed HTTP: {m}"),
            HttpError::TooLarge { bytes_max } => {
                write!(f, "response body over {bytes_max} bytes")
            }
            HttpError::Io(m) => write!(f, "connection failed: {m}"),
        }
    }
}

impl std::error::Error for HttpError {}

impl HttpError {
    /// Sorts a hyper failure: a response hyper could not parse is the server breaking HTTP;
    /// anything else is the connection failing.
    pub(super) fn from_hyper(e: &hyper::Error) -> HttpError {
        if e.is_parse() || e.is_parse_status() {
            HttpError::Malformed(format!("response: {e}"))
        } else {
            HttpError::Io(e.to_string())
        }
    }
}
