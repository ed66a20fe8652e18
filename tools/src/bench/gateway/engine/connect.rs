//! Connecting a device: a connect slot, a non-blocking connect, then TLS (for `wss://`)
//! and the upgrade request.

use super::device::{Pending, Phase};
use super::Worker;
use crate::bench::gateway::ws;
use crate::bench::poll;
use crate::bench::stats::{Counters, Op};
use crate::bench::transport::Stream;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

impl Worker<'_> {
    pub(super) fn start_connects(&mut self, now: u64) {
        while self.slots_used < self.run.connect_concurrency {
            let Some(i) = self.queue.pop_front() else {
                return;
            };
            self.start_connect(i, now);
        }
    }

    /// Where device `i` connects: `reconnect`'s other addresses for a reconnecting device
    /// or a writer, else the run's.
    fn endpoint(&self, i: usize) -> (&ws::Url, SocketAddr) {
        let d = &self.devs[i];
        let other = self.run.reconnect.as_ref().and_then(|p| {
            if d.reconnecting {
                p.resume_at.as_ref()
            } else if !d.spec.roams {
                p.writers_at.as_ref()
            } else {
                None
            }
        });
        match other {
            Some(e) => (&e.url, e.addr),
            None => (&self.run.url, self.run.addr),
        }
    }

    pub(super) fn start_connect(&mut self, i: usize, now: u64) {
        self.slots_used += 1;
        let d = &mut self.devs[i];
        d.phase = Phase::Connecting;
        let id = d.take_id();
        d.inflight.push_back(Pending {
            op: Op::Hello,
            id,
            start: now,
            written: now,
            prime: false,
            seq: 0,
        });
        Counters::add(&self.shared.counters.sent[Op::Hello as usize], 1);
        let addr = self.endpoint(i).1;
        let opened = poll::connect_nonblocking(&addr).and_then(|s| {
            s.set_nodelay(true)?;
            let flags = (libc::EPOLLIN | libc::EPOLLOUT) as u32;
            self.epoll.add(s.as_raw_fd(), i as u64, flags)?;
            Ok(s)
        });
        match opened {
            Ok(s) => self.devs[i].stream = Some(Stream::Plain(s)),
            Err(e) => self.fail(i, &format!("io: connect: {}", e.kind())),
        }
    }

    pub(super) fn on_connected(&mut self, i: usize) {
        let d = &mut self.devs[i];
        let err = d.stream.as_ref().map(|s| s.socket().take_error());
        match err {
            Some(Ok(None)) => {}
            Some(Ok(Some(e))) | Some(Err(e)) => {
                return self.fail(i, &format!("io: connect: {}", e.kind()));
            }
            None => return,
        }
        if let Some(session) = &self.run.tls {
            if let Some(Stream::Plain(sock)) = d.stream.take() {
                // The handshake runs as the upgrade request is flushed and the answer read.
                match Stream::start_tls(sock, session) {
                    Ok(s) => d.stream = Some(s),
                    Err(e) => return self.fail(i, &format!("tls: {e}")),
                }
            }
        }
        let mut random = [0u8; 16];
        random[..8].copy_from_slice(&d.random().to_ne_bytes());
        random[8..].copy_from_slice(&d.random().to_ne_bytes());
        d.upgrade_key = ws::upgrade_key(random);
        let (token, key) = (&self.devs[i].spec.token, &self.devs[i].upgrade_key);
        let request = ws::upgrade_request(self.endpoint(i).0, token, key);
        let d = &mut self.devs[i];
        d.out.extend_from_slice(&request);
        d.phase = Phase::Upgrading;
        d.want_write = true; // registered for EPOLLOUT while connecting
        self.flush(i);
    }
}
