//! A connection that never has to wait, because its socket already holds all it will read
//! or always has room for what it writes, still gives its executor back when the executor
//! wants to look at its rings: a 1 ms timer of another task on the same executor fires
//! while the busy connection is still at work.

use boltq_io::connect::connect_tcp;
use boltq_io::listener::Conn;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use std::cell::Cell;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes per read or write of the busy connection.
const CHUNK_BYTES: usize = 4096;
/// What the reading test's peer sends: little enough that the kernel holds all of it before
/// the connection starts reading (its default buffers take ~190 KB on loopback), so every
/// read completes at once, and enough that reading it takes several timer periods.
const INPUT_BYTES: usize = 24 * CHUNK_BYTES;
/// How long the writing test's connection goes on before the test gives up on the timer.
const GIVE_UP: Duration = Duration::from_secs(20);

fn on_executor<T>(f: impl std::future::Future<Output = T>) -> T {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .preempt_timer(Duration::from_millis(1))
        .make()
        .unwrap()
        .run(f)
}

/// Burns 200 µs of CPU: stands in for handling a chunk, so that the reading test's input
/// takes ~5 ms to get through and the writing test's peer always keeps up.
fn handle_chunk() {
    let started = Instant::now();
    while started.elapsed() < Duration::from_micros(200) {
        std::hint::spin_loop();
    }
}

/// Connects to `addr`, waits for the peer to be under way, then runs `busy` with the
/// connection and a flag that a 1 ms timer of another task sets.
fn busy_beside_a_timer<B, Fut, T>(addr: SocketAddr, busy: B) -> T
where
    B: FnOnce(Conn, Rc<Cell<bool>>) -> Fut + 'static,
    Fut: std::future::Future<Output = T> + 'static,
    T: 'static,
{
    on_executor(async move {
        let conn = connect_tcp(addr, Duration::from_secs(2)).await.unwrap();
        glommio::timer::sleep(Duration::from_millis(50)).await;
        let fired = Rc::new(Cell::new(false));
        let timer = glommio::spawn_local({
            let fired = fired.clone();
            async move {
                glommio::timer::sleep(Duration::from_millis(1)).await;
                fired.set(true);
            }
        });
        let out = glommio::spawn_local(busy(conn, fired)).await;
        timer.await;
        out
    })
}

/// A peer that accepts one connection and does `each` on it until `each` says stop or the
/// returned flag is set.
fn peer(each: fn(&mut TcpStream) -> bool) -> (SocketAddr, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        while !stopping.load(Ordering::Relaxed) && each(&mut s) {}
    });
    (addr, stop)
}

#[test]
fn a_connection_whose_socket_holds_all_its_input_lets_a_timer_fire_before_it_is_read() {
    let (addr, _stop) = peer(|s| {
        s.write_all(&[7u8; INPUT_BYTES]).unwrap();
        false
    });
    let unread_when_fired = busy_beside_a_timer(addr, |mut conn, fired| async move {
        let mut buf = vec![0u8; CHUNK_BYTES];
        let mut unread = INPUT_BYTES;
        let mut unread_when_fired = None;
        while unread > 0 {
            let n = conn.read(&mut buf).await.unwrap();
            assert!(n > 0, "the peer closed early");
            unread -= n;
            handle_chunk();
            if fired.get() && unread_when_fired.is_none() {
                unread_when_fired = Some(unread);
            }
        }
        unread_when_fired
    });
    assert!(
        unread_when_fired.is_some_and(|u| u > 0),
        "a 1 ms timer fired only after all {INPUT_BYTES} bytes were read (unread then: \
         {unread_when_fired:?})"
    );
}

#[test]
fn a_connection_whose_socket_always_has_room_lets_a_timer_fire() {
    let (addr, stop) = peer(|s| {
        let mut buf = vec![0u8; 1 << 20];
        matches!(s.read(&mut buf), Ok(n) if n > 0)
    });
    let (fired, chunks) = busy_beside_a_timer(addr, |mut conn, fired| async move {
        let started = Instant::now();
        let chunk = vec![7u8; CHUNK_BYTES];
        let mut chunks = 0;
        while !fired.get() && started.elapsed() < GIVE_UP {
            conn.write_all(&chunk).await.unwrap();
            handle_chunk();
            chunks += 1;
        }
        (fired.get(), chunks)
    });
    stop.store(true, Ordering::Relaxed);
    assert!(
        fired,
        "a 1 ms timer did not fire in {GIVE_UP:?} of {chunks} writes"
    );
}
