//! The `error.code` names of error and gap frames (§2.7).

/// Every v1 error code (§2.7). The protocol-v2 `not_configured` is not here: v1 reports
/// "not configured" as `unsupported_version` (§18 G18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    BadRequest,
    Unauthenticated,
    Forbidden,
    NotFound,
    RateLimited,
    Conflict,
    Internal,
    UnsupportedVersion,
    /// Only inside `gap` frames.
    HistoryGap,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 9] = [
        Self::BadRequest,
        Self::Unauthenticated,
        Self::Forbidden,
        Self::NotFound,
        Self::RateLimited,
        Self::Conflict,
        Self::Internal,
        Self::UnsupportedVersion,
        Self::HistoryGap,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadRequest => "bad_request",
            Self::Unauthenticated => "unauthenticated",
            Self::Forbidden => "forbidden",
            Self::NotFound => "not_found",
            Self::RateLimited => "rate_limited",
            Self::Conflict => "conflict",
            Self::Internal => "internal",
            Self::UnsupportedVersion => "unsupported_version",
            Self::HistoryGap => "history_gap",
        }
    }
}
