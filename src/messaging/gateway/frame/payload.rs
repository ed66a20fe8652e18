//! Payload base64 as clients send it (§2.2): decoding is lenient, encoding (in `json`)
//! strict.

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;

/// Decoding is lenient, encoding strict (§2.2): either alphabet, padding optional, and
/// non-zero trailing bits tolerated as v1's decoder does.
const fn lenient(alphabet: &'static alphabet::Alphabet) -> GeneralPurpose {
    GeneralPurpose::new(
        alphabet,
        GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::Indifferent)
            .with_decode_allow_trailing_bits(true),
    )
}

const BASE64_STANDARD_LENIENT: GeneralPurpose = lenient(&alphabet::STANDARD);
const BASE64_URL_SAFE_LENIENT: GeneralPurpose = lenient(&alphabet::URL_SAFE);

/// The payload bytes of a base64 string in the standard or URL-safe alphabet (not mixed),
/// padded or not. Line breaks are skipped, as v1's decoder skips them.
pub(super) fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let owned;
    let mut text = s.as_bytes();
    if text.iter().any(|&b| b == b'\r' || b == b'\n') {
        owned = text
            .iter()
            .copied()
            .filter(|&b| b != b'\r' && b != b'\n')
            .collect::<Vec<u8>>();
        text = &owned;
    }
    let engine = if text.iter().any(|&b| b == b'-' || b == b'_') {
        &BASE64_URL_SAFE_LENIENT
    } else {
        &BASE64_STANDARD_LENIENT
    };
    engine.decode(text).ok()
}
