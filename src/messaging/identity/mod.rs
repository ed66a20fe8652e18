//! Who a connection is (tokens → principals) and what it may touch (the topic ACL).

pub mod acl;
pub mod principal;
pub mod token;
