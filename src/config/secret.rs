//! Comparing a secret the operator configured with one a client presented.

use subtle::ConstantTimeEq;

/// Whether `presented` equals `expected`, in a time that depends on the lengths only, not
/// on where the two first differ (so a client cannot find the secret byte by byte by
/// timing refusals). A length mismatch is refused at once: the length of an API key or
/// of a digest is no secret worth hiding.
pub fn secret_matches(expected: impl AsRef<[u8]>, presented: impl AsRef<[u8]>) -> bool {
    expected.as_ref().ct_eq(presented.as_ref()).into()
}

#[cfg(test)]
mod tests {
    use super::secret_matches;

    #[test]
    fn equal_secrets_match_and_any_difference_refuses() {
        assert!(secret_matches("s3cret-key", "s3cret-key"));
        assert!(secret_matches(b"", b""));
        assert!(!secret_matches("s3cret-key", "s3cret-kez"));
        assert!(!secret_matches("s3cret-key", "t3cret-key"));
        assert!(!secret_matches("s3cret-key", "s3cret-ke"));
        assert!(!secret_matches("s3cret-key", "s3cret-key!"));
        assert!(!secret_matches("s3cret-key", ""));
        assert!(secret_matches([7u8; 32], [7u8; 32]));
        assert!(!secret_matches(
            [7u8; 32],
            [[7u8; 31].as_slice(), &[8]].concat()
        ));
    }
}
