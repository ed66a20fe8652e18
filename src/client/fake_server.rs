//! A scripted stand-in for the server, for unit tests of clients (this module's and the
//! CLI's): a std TCP listener on a thread that accepts one connection, reads the client's
//! frames and answers with exactly the bytes the test gives it. No broker behind it, so a
//! test can produce replies a real server would not (pushes before replies, oversized
//! headers, trickled bytes, silence).

use super::RawFrame;
use crate::queue::protocol::frame;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// One step of the script, run in order on the accepted connection.
pub enum Step {
    /// Read one whole frame from the client and record it (panics if the client closes).
    Expect,
    /// Write these bytes.
    Send(Vec<u8>),
    /// Write these bytes one at a time with a pause between, so frames arrive split.
    Trickle(Vec<u8>),
    /// Wait before the next step.
    SleepMs(u64),
}

pub struct FakeServer {
    pub addr: String,
    handle: JoinHandle<Vec<RawFrame>>,
}

impl FakeServer {
    /// Listens on an ephemeral loopback port and runs `script` on the first connection.
    pub fn start(script: Vec<Step>) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("local addr").to_string();
        let handle = thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            run_script(stream, script)
        });
        FakeServer { addr, handle }
    }

    /// Waits for the script to finish (the connection is then closed) and returns the frames
    /// the client sent, in order. Panics if the script panicked.
    pub fn received(self) -> Vec<RawFrame> {
        self.handle.join().expect("fake server script failed")
    }
}

/// The bytes of one frame.
pub fn frame_bytes(code: u8, payload: &str) -> Vec<u8> {
    let mut out = Vec::new();
    frame::encode(code, payload.as_bytes(), &mut out);
    out
}

fn run_script(mut stream: TcpStream, script: Vec<Step>) -> Vec<RawFrame> {
    let mut buf = Vec::new();
    let mut received = Vec::new();
    for step in script {
        match step {
            Step::Expect => received.push(read_one(&mut stream, &mut buf)),
            Step::Send(bytes) => stream.write_all(&bytes).expect("write"),
            Step::Trickle(bytes) => {
                for b in bytes {
                    stream.write_all(&[b]).expect("write");
                    thread::sleep(Duration::from_millis(1));
                }
            }
            Step::SleepMs(ms) => thread::sleep(Duration::from_millis(ms)),
        }
    }
    received
}

fn read_one(stream: &mut TcpStream, buf: &mut Vec<u8>) -> RawFrame {
    loop {
        if let Some((f, used)) = frame::decode(buf).expect("client sent an oversized frame") {
            let out = (f.code, f.payload.to_vec());
            buf.drain(..used);
            return out;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).expect("read");
        assert!(n > 0, "client closed before sending the expected frame");
        buf.extend_from_slice(&chunk[..n]);
    }
}
