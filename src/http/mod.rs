//! HTTP/1.1 for every listener and outbound call, below the planes: the server codec the
//! admin API and the gateway share (`request`, `response`, `read`, `refuse`), and the connection
//! take-over hook a listener offers to whoever owns a path (`takeover`); and the outbound
//! client (`client`, on hyper) for the push webhook and the membership service.

pub mod client;
pub mod query;
pub mod read;
pub mod refuse;
pub mod request;
pub mod response;
pub mod takeover;

pub use read::{read_request, IDLE_TIMEOUT_MS, READ_CHUNK_BYTES, READ_TIMEOUT_MS};
pub use refuse::refuse;
pub use request::{parse_request, Parsed, Request, BODY_BYTES_MAX, HEADERS_MAX, HEAD_BYTES_MAX};
pub use response::{encode_response, Response};
pub use takeover::Takeover;
