//! Gateway helpers for the messaging end-to-end tests: the HS256 key the test servers are
//! configured with, tokens for it, and a connected device.

use super::Server;
use boltq::client::gateway::GatewayClient;
use boltq::messaging::identity::token::{mint_hs256, Claims};

/// The identity key (`id = "k1"`) every messaging test server is configured with.
pub const SECRET: &str = "0123456789abcdef0123456789abcdef";

/// A token for `user`, valid for an hour.
pub fn token(user: &str) -> String {
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let claims = Claims {
        sub: user.to_string(),
        exp: Some(now_s + 3600),
        ..Default::default()
    };
    mint_hs256(Some("k1"), SECRET.as_bytes(), &claims)
}

/// `user`'s device `device`, connected to `s`'s gateway and past `hello`.
pub fn connect(s: &Server, user: &str, device: &str) -> GatewayClient {
    let url = format!("ws://127.0.0.1:{}/ws", s.http_port);
    GatewayClient::connect(&url, &token(user), device, None)
        .unwrap_or_else(|e| panic!("{user}/{device} connects: {e}\nserver log:\n{}", s.log()))
}

/// The `boltq.toml` lines every messaging test server starts from: the log, identity with
/// [`SECRET`] (no membership cache, so a service's answer shows at once), the gateway on
/// the admin port. Tests append their own sections.
pub fn messaging_toml() -> String {
    format!(
        "[messaging.stream]\nenabled = true\n\
         [messaging.identity]\nenabled = true\nleeway = \"1s\"\n\
         membership_cache_ttl = \"-1s\"\n\
         keys = [{{ id = \"k1\", secret = \"{SECRET}\" }}]\n\
         [messaging.gateway]\nenabled = true\n"
    )
}

/// A server started with `toml` as its config file, and the directory holding that file
/// (it must live as long as the server).
pub fn start_with_toml(toml: &str) -> (Server, boltq_io::testutil::TempDir) {
    let tmp = boltq_io::testutil::TempDir::new("config");
    let path = tmp.path().join("boltq.toml");
    std::fs::write(&path, toml).unwrap();
    let server = Server::start(&["--config", path.to_str().unwrap()]);
    (server, tmp)
}
