//! Fuzzes the outbound HTTP client's response decoding (membership service and push
//! webhook answers come from another process): head, framing (length, chunked, until
//! close) and body, as `boltq::messaging::http_client::decode_response` runs them.
//!
//! Checked on every input, beyond "never panics": a decoded body never exceeds the cap and
//! the status has three digits.
#![no_main]

use boltq::messaging::http_client::decode_response;
use libfuzzer_sys::fuzz_target;

const BODY_BYTES_MAX: usize = 64 * 1024;

fuzz_target!(|input: &[u8]| {
    if let Ok(Some((status, body))) = decode_response(input, BODY_BYTES_MAX) {
        assert!(body.len() <= BODY_BYTES_MAX);
        assert!(status <= 999);
    }
});
