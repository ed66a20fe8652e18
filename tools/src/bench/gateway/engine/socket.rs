//! Bytes in and out of a device's socket: writes with epoll back-pressure, reads into the
//! thread's buffer, the upgrade answer, and WebSocket frames (pings, fragments, closes).

use super::device::Phase;
use super::Worker;
use crate::bench::gateway::proto;
use crate::bench::gateway::ws::{self, opcode};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;

impl Worker<'_> {
    /// Writes what is queued; on a full socket, asks epoll for writability.
    pub(super) fn flush(&mut self, i: usize) {
        let d = &mut self.devs[i];
        let Some(stream) = d.stream.as_mut() else {
            return;
        };
        while d.out_pos < d.out.len() {
            match stream.write(&d.out[d.out_pos..]) {
                Ok(0) => return self.fail(i, "io: connection closed while writing"),
                Ok(n) => d.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.fail(i, &format!("io: {}", e.kind())),
            }
        }
        if d.out_pos == d.out.len() {
            d.out.clear();
            d.out_pos = 0;
            // TLS: records the socket did not take yet (never for plain sockets).
            match stream.flush_records() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return self.fail(i, &format!("io: {}", e.kind())),
            }
        }
        let pending = d.out_pos < d.out.len() || stream.wants_write();
        if pending != d.want_write {
            let mut flags = libc::EPOLLIN as u32;
            if pending {
                flags |= libc::EPOLLOUT as u32;
            }
            let fd = stream.socket().as_raw_fd();
            d.want_write = pending;
            if let Err(e) = self.epoll.modify(fd, i as u64, flags) {
                self.fail(i, &format!("io: epoll: {}", e.kind()));
            }
        }
    }

    pub(super) fn receive(&mut self, i: usize) {
        let mut scratch = std::mem::take(&mut self.scratch);
        while let Some(stream) = self.devs[i].stream.as_mut() {
            match stream.read(&mut scratch) {
                Ok(0) => {
                    self.fail(i, "io: connection closed by the server");
                    break;
                }
                Ok(n) => {
                    if !self.consume(i, &scratch[..n]) || n < scratch.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    // What the TLS session refused (a certificate, a bad record): named.
                    self.fail(i, &format!("tls: {e}"));
                    break;
                }
                Err(e) => {
                    self.fail(i, &format!("io: {}", e.kind()));
                    break;
                }
            }
        }
        self.scratch = scratch;
        self.flush(i);
    }

    /// Handles bytes just read; false if the device failed.
    pub(super) fn consume(&mut self, i: usize, bytes: &[u8]) -> bool {
        let d = &mut self.devs[i];
        if d.phase == Phase::Upgrading {
            d.rx.extend_from_slice(bytes);
            match ws::check_upgrade_answer(&d.rx, &d.upgrade_key) {
                Ok(None) => return true,
                Ok(Some(head)) => {
                    d.rx.drain(..head);
                    d.phase = Phase::Hello;
                    let hello = proto::hello(d.inflight[0].id, &d.spec.device, d.resume.as_deref());
                    d.queue_text(hello.as_bytes());
                    let rest = std::mem::take(&mut d.rx);
                    return self.frames(i, &rest);
                }
                Err(e) => {
                    self.fail(i, &e);
                    return false;
                }
            }
        }
        if d.rx.is_empty() {
            self.frames(i, bytes)
        } else {
            let mut buf = std::mem::take(&mut d.rx);
            buf.extend_from_slice(bytes);
            self.frames(i, &buf)
        }
    }

    /// Handles the complete frames in `buf` and keeps the incomplete rest; false if the
    /// device failed.
    pub(super) fn frames(&mut self, i: usize, buf: &[u8]) -> bool {
        let mut used = 0;
        while self.devs[i].phase != Phase::Done {
            match ws::decode_server_frame(&buf[used..]) {
                Ok(None) => {
                    self.devs[i].rx.extend_from_slice(&buf[used..]);
                    return true;
                }
                Ok(Some((frame, n))) => {
                    used += n;
                    self.frame(i, frame);
                }
                Err(e) => {
                    self.fail(i, &format!("protocol: {e}"));
                    return false;
                }
            }
        }
        false
    }

    pub(super) fn frame(&mut self, i: usize, f: ws::Frame<'_>) {
        let d = &mut self.devs[i];
        match f.opcode {
            opcode::PING => {
                let mask = (d.random() as u32).to_ne_bytes();
                ws::encode_client_frame(opcode::PONG, f.payload, mask, &mut d.out);
            }
            opcode::PONG => {}
            opcode::CLOSE => {
                let (code, reason) = ws::close_code(f.payload);
                self.fail(i, &format!("closed by the server: {code} {reason}"));
            }
            opcode::CONTINUATION => {
                if !d.frag_open {
                    return self.fail(i, "protocol: continuation without a first fragment");
                }
                if d.frag.len() + f.payload.len() > ws::MESSAGE_BYTES_MAX {
                    return self.fail(i, "protocol: fragmented message too large");
                }
                d.frag.extend_from_slice(f.payload);
                if f.fin {
                    let msg = std::mem::take(&mut d.frag);
                    d.frag_open = false;
                    self.message(i, &msg);
                }
            }
            _ => {
                if d.frag_open {
                    return self.fail(i, "protocol: new message inside a fragmented one");
                }
                if f.fin {
                    self.message(i, f.payload);
                } else {
                    d.frag.extend_from_slice(f.payload);
                    d.frag_open = true;
                }
            }
        }
    }
}
