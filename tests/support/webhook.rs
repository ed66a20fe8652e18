//! The operator's push webhook, played by a test: a std thread HTTP/1.1 server on
//! 127.0.0.1:0 that records every request and answers each call with the next scripted
//! status, 200 once the script is used up.

use super::stub::StubServer;
use super::Server;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bound on waiting for calls that must come.
pub const WAIT: Duration = Duration::from_secs(15);

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Call {
    pub at: Instant,
    pub request_line: String,
    /// Lower-case names.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Call {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("webhook body is JSON")
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }

    /// The notifications' `user_id`s.
    pub fn users(&self) -> Vec<String> {
        self.field_of_each("user_id")
    }

    /// The notifications' `message_id`s.
    pub fn message_ids(&self) -> Vec<String> {
        self.field_of_each("message_id")
    }

    fn field_of_each(&self, field: &str) -> Vec<String> {
        self.json()["notifications"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n[field].as_str().unwrap().to_string())
            .collect()
    }
}

#[derive(Default)]
struct Shared {
    calls: Vec<Call>,
    /// Statuses of the next calls, in order.
    script: VecDeque<u16>,
    /// A 200 names this user's notifications as failed (`{"failed": [ids]}`).
    refused_user: Option<String>,
}

pub struct Webhook {
    shared: Arc<Mutex<Shared>>,
    stub: StubServer,
}

impl Webhook {
    pub fn start(script: &[u16]) -> Webhook {
        let shared = Arc::new(Mutex::new(Shared {
            calls: Vec::new(),
            script: script.iter().copied().collect(),
            refused_user: None,
        }));
        let sh = Arc::clone(&shared);
        Webhook {
            shared,
            stub: StubServer::start("webhook", move |conn| serve(conn, &sh)),
        }
    }

    /// From now on, every 200 names `user`'s notifications as failed.
    pub fn refuse_user(&self, user: &str) {
        self.shared.lock().unwrap().refused_user = Some(user.to_string());
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/push", self.stub.port)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.shared.lock().unwrap().calls.clone()
    }

    /// Waits until `done(calls)` holds; panics with the server log after [`WAIT`].
    pub fn wait_for(&self, s: &Server, what: &str, done: impl Fn(&[Call]) -> bool) -> Vec<Call> {
        let deadline = Instant::now() + WAIT;
        loop {
            let calls = self.calls();
            if done(&calls) {
                return calls;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: calls so far {:?}\nserver log:\n{}",
                calls.iter().map(|c| c.json()).collect::<Vec<_>>(),
                s.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Serves requests on one keep-alive connection until the client closes it.
fn serve(conn: TcpStream, shared: &Mutex<Shared>) {
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let mut request_line = String::new();
        match reader.read_line(&mut request_line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut headers = HashMap::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (k, v) = line.split_once(':').expect("header line");
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
        let len: usize = headers
            .get("content-length")
            .map_or(0, |v| v.parse().unwrap());
        let mut body = vec![0; len];
        reader.read_exact(&mut body).unwrap();
        let (status, answer) = {
            let mut sh = shared.lock().unwrap();
            let call = Call {
                at: Instant::now(),
                request_line: request_line.trim_end().to_string(),
                headers,
                body,
            };
            let failed: Vec<Value> = match &sh.refused_user {
                Some(user) => call.json()["notifications"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|n| n["user_id"] == user.as_str())
                    .map(|n| n["id"].clone())
                    .collect(),
                None => Vec::new(),
            };
            sh.calls.push(call);
            let status = sh.script.pop_front().unwrap_or(200);
            let answer = match status {
                200 if failed.is_empty() => "{}".to_string(),
                200 => json!({ "failed": failed }).to_string(),
                _ => "{\"error\":\"x\"}".to_string(),
            };
            (status, answer)
        };
        let reply = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}
