//! Caps on the headers a client attaches to a send, a publish or a typing signal (spec
//! §18 G41). One pair of numbers for all three, so a header set the gateway accepts on a
//! send is never refused on the signal path, and the other way round.

/// Most `headers` pairs on a send, publish or signal.
pub const HEADERS_PAIRS_MAX: usize = 32;
/// Most `headers` bytes on a send, publish or signal, keys plus values.
pub const HEADERS_BYTES_MAX: usize = 8 * 1024;
