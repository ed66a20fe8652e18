//! WebSocket close codes and reasons the gateway sends (§2.11's table, with §19 applied).
//! v1 never sent close frames and v1 clients ignore the codes, so all of this is additive.
//!
//! §19 overrides §2.11 in two places: token expiry closes with 1008 `token expired`
//! (decision 2; §2.11 said 4001) and a slow consumer with 1008 `slow consumer` (decision
//! 6; §2.11 said 4008). Decision 9 adds 1007 for a text frame that is not UTF-8.

/// RFC 6455 §5.5: a close frame's payload is ≤ 125 bytes, 2 of them the code.
pub const REASON_BYTES_MAX: usize = 123;

/// The client asked to close.
pub const NORMAL: u16 = 1000;
pub const NORMAL_REASON: &str = "normal";
/// Server shutting down or draining; sent to every socket before the 2 s drain.
pub const GOING_AWAY: u16 = 1001;
pub const GOING_AWAY_REASON: &str = "server shutting down";
/// The first frame was not `hello`.
pub const PROTOCOL_ERROR: u16 = 1002;
pub const PROTOCOL_ERROR_REASON: &str = "first frame must be hello";
/// Undecodable payload, after an error frame. Decision 9 keeps the connection open on
/// a bad frame; this is for repeated abuse only (§18 G1).
pub const UNDECODABLE: u16 = 1003;
pub const UNDECODABLE_REASON: &str = "undecodable payload";
/// A text frame that is not valid UTF-8 (RFC 6455 §8.1; §19 decision 9).
pub const INVALID_UTF8: u16 = 1007;
pub const INVALID_UTF8_REASON: &str = "text frame is not valid UTF-8";
/// Origin or authentication rejected after the upgrade.
pub const POLICY: u16 = 1008;
pub const POLICY_REASON: &str = "policy violation";
/// The token passed `exp + leeway` on a live connection (§19 decision 2, over §2.11's
/// 4001).
pub const TOKEN_EXPIRED: u16 = 1008;
pub const TOKEN_EXPIRED_REASON: &str = "token expired";
/// Outbound queue over its frame or byte bound (§19 decision 6, over §2.11's 4008).
pub const SLOW_CONSUMER: u16 = 1008;
pub const SLOW_CONSUMER_REASON: &str = "slow consumer";
/// Inbound message over `gateway.read_limit`.
pub const TOO_LARGE: u16 = 1009;
pub const TOO_LARGE_REASON: &str = "message too large";
/// Internal error.
pub const INTERNAL: u16 = 1011;
pub const INTERNAL_REASON: &str = "internal error";
/// `hello.version` not supported (after the `unsupported_version` error frame).
pub const UNSUPPORTED_VERSION: u16 = 4003;
pub const UNSUPPORTED_VERSION_REASON: &str = "unsupported protocol version";
/// A newer connection resumed this session (§19 decision 3).
pub const SESSION_TAKEN_OVER: u16 = 4009;
pub const SESSION_TAKEN_OVER_REASON: &str = "session taken over";
/// The liveness deadline passed.
pub const LIVENESS_TIMEOUT: u16 = 4010;
pub const LIVENESS_TIMEOUT_REASON: &str = "liveness timeout";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_codes_follow_section_19_over_section_2_11() {
        assert_eq!(
            (TOKEN_EXPIRED, TOKEN_EXPIRED_REASON),
            (1008, "token expired")
        );
        assert_eq!(
            (SLOW_CONSUMER, SLOW_CONSUMER_REASON),
            (1008, "slow consumer")
        );
        assert_eq!(
            (SESSION_TAKEN_OVER, SESSION_TAKEN_OVER_REASON),
            (4009, "session taken over")
        );
        let table = [
            (NORMAL, NORMAL_REASON, 1000),
            (GOING_AWAY, GOING_AWAY_REASON, 1001),
            (PROTOCOL_ERROR, PROTOCOL_ERROR_REASON, 1002),
            (UNDECODABLE, UNDECODABLE_REASON, 1003),
            (INVALID_UTF8, INVALID_UTF8_REASON, 1007),
            (POLICY, POLICY_REASON, 1008),
            (TOO_LARGE, TOO_LARGE_REASON, 1009),
            (INTERNAL, INTERNAL_REASON, 1011),
            (UNSUPPORTED_VERSION, UNSUPPORTED_VERSION_REASON, 4003),
            (LIVENESS_TIMEOUT, LIVENESS_TIMEOUT_REASON, 4010),
        ];
        for (code, reason, want) in table {
            assert_eq!(code, want, "{reason}");
            assert!(!reason.is_empty() && reason.len() <= REASON_BYTES_MAX);
        }
    }
}
