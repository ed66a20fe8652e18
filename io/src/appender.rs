//! An append-only file written with O_DIRECT from an in-memory tail buffer.
//!
//! Every write covers `[align_down(written), align_up(end))`: one coalesced aligned write per
//! flush, whatever the number of appends since the last one (platform.md §5: N small O_DIRECT
//! writes cost N device round trips; one coalesced write costs one). The last partial block is
//! rewritten by the next flush; the bytes it already held are rewritten with the same values,
//! so a torn rewrite can never damage data that was already durable.
//!
//! The appender is split into a synchronous half (append, plan a write, record completion)
//! and the awaited I/O in between, so that an owner kept in a `RefCell` never holds a borrow
//! across `.await`: plan under a borrow, drop it, await the job, borrow again to complete.

use glommio::io::DmaFile;
use std::io;
use std::rc::Rc;

/// Upper bound of one write job. Larger backlogs are written in several jobs, one at a time.
pub const WRITE_BYTES_MAX: usize = 8 * 1024 * 1024;

/// The in-memory side of an append-only direct-I/O file.
pub struct Appender {
    /// O_DIRECT alignment of the file; 4096 until the file is opened.
    alignment: u64,
    /// File bytes `[buf_start, end)`; `buf_start` is aligned.
    buf: Vec<u8>,
    buf_start: u64,
    /// Bytes `[0, written)` were handed to the device (not necessarily synced).
    written: u64,
    /// Bytes `[0, synced)` are durable.
    synced: u64,
    /// Already-written bytes to keep in memory for readers (the tail cache).
    retain_bytes: usize,
    /// True while a write job is out: never two writes in flight to one file.
    writing: bool,
}

/// One aligned write, planned under a borrow and run without one.
pub struct WriteJob {
    pub pos: u64,
    /// Logical end covered by this job (`pos + len` before padding).
    pub end: u64,
    bytes: Vec<u8>,
}

impl Appender {
    /// An appender for a file whose durable content is exactly `[0, len)` and whose
    /// last partial block is `tail_block` (the bytes `[align_down(len), len)`).
    pub fn new(len: u64, tail_block: Vec<u8>, alignment: u64, retain_bytes: usize) -> Self {
        assert!(alignment.is_power_of_two() && alignment >= 512);
        let buf_start = len - len % alignment;
        assert_eq!(
            tail_block.len() as u64,
            len - buf_start,
            "tail block must cover the partial block"
        );
        Appender {
            alignment,
            buf: tail_block,
            buf_start,
            written: len,
            synced: len,
            retain_bytes,
            writing: false,
        }
    }

    pub fn end(&self) -> u64 {
        self.buf_start + self.buf.len() as u64
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    pub fn synced(&self) -> u64 {
        self.synced
    }

    /// Memory the buffer holds, spare capacity included.
    pub fn held_capacity_bytes(&self) -> usize {
        self.buf.capacity()
    }

    pub fn unwritten_bytes(&self) -> u64 {
        self.end() - self.written
    }

    /// First file offset still held in memory.
    pub fn mem_start(&self) -> u64 {
        self.buf_start
    }

    /// The bytes at `[pos, end)` if they are still in memory.
    pub fn mem_slice(&self, pos: u64) -> Option<&[u8]> {
        if pos < self.buf_start || pos > self.end() {
            return None;
        }
        Some(&self.buf[(pos - self.buf_start) as usize..])
    }

    pub fn append(&mut self, bytes: &[u8]) -> u64 {
        let pos = self.end();
        self.buf.extend_from_slice(bytes);
        pos
    }

    /// Plans the next write, or `None` when everything is written or a write is out.
    pub fn plan_write(&mut self) -> Option<WriteJob> {
        if self.writing || self.written == self.end() {
            return None;
        }
        let pos = self.written - self.written % self.alignment;
        debug_assert!(pos >= self.buf_start);
        let from = (pos - self.buf_start) as usize;
        let to = self.buf.len().min(from + WRITE_BYTES_MAX);
        let end = self.buf_start + to as u64;
        let padded = align_up(end - pos, self.alignment) as usize;
        let mut bytes = Vec::with_capacity(padded);
        bytes.extend_from_slice(&self.buf[from..to]);
        bytes.resize(padded, 0);
        self.writing = true;
        Some(WriteJob { pos, end, bytes })
    }

    /// Records a finished write and trims memory down to the retained tail.
    pub fn complete_write(&mut self, end: u64) {
        assert!(self.writing, "completion without a planned write");
        assert!(end > self.written && end <= self.end());
        self.writing = false;
        self.written = end;
        self.trim_memory();
    }

    /// Forgets a failed write so that it is planned again.
    pub fn abort_write(&mut self) {
        self.writing = false;
    }

    pub fn complete_sync(&mut self, upto: u64) {
        assert!(upto <= self.written);
        self.synced = self.synced.max(upto);
    }

    /// Gives back the buffer's spare capacity once nothing more will be appended (a sealed
    /// segment, fully written): its bytes are on disk, so only the tail kept for readers
    /// stays. A busy appender's buffer grows to what one checkpoint interval appends (tens
    /// of MiB), and would otherwise stay that large for as long as the file is open.
    pub fn release_spare_capacity(&mut self) {
        assert!(!self.writing, "released during a write");
        self.trim_memory();
        self.buf.shrink_to_fit();
    }

    fn trim_memory(&mut self) {
        // Keep the partial block of `written` (the next write rewrites it) and, beyond that,
        // `retain_bytes` of recent data for readers. Trim in large steps: a drain moves the
        // kept bytes, so doing it only when double the budget is held keeps it amortised.
        let keep_from_written = self.written - self.written % self.alignment;
        let keep_from_retain = self.end().saturating_sub(self.retain_bytes as u64);
        let keep_from = keep_from_written.min(keep_from_retain);
        let keep_from = (keep_from - keep_from % self.alignment).max(self.buf_start);
        let drop_bytes = (keep_from - self.buf_start) as usize;
        if drop_bytes > 0 && drop_bytes >= self.buf.len() / 2 {
            self.buf.drain(..drop_bytes);
            self.buf_start = keep_from;
        }
    }
}

impl WriteJob {
    /// Runs the write. A short write is reported as an error: the caller aborts and retries.
    pub async fn run(self, file: &DmaFile) -> io::Result<u64> {
        let mut dma = file.alloc_dma_buffer(self.bytes.len());
        dma.as_bytes_mut().copy_from_slice(&self.bytes);
        let written = file.write_at(dma, self.pos).await?;
        if written != self.bytes.len() {
            return Err(io::Error::other(format!(
                "short direct write: {written} of {} bytes at offset {}",
                self.bytes.len(),
                self.pos
            )));
        }
        Ok(self.end)
    }
}

pub fn align_up(v: u64, alignment: u64) -> u64 {
    v.div_ceil(alignment) * alignment
}

/// Opens a direct-I/O file for reading and writing, creating it when asked.
pub async fn open_rw(path: &std::path::Path, create: bool) -> io::Result<Rc<DmaFile>> {
    let file = glommio::io::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .dma_open(path)
        .await
        .map_err(|e| io::Error::other(format!("open {}: {e}", path.display())))?;
    Ok(Rc::new(file))
}

/// Reads `[pos, pos + len)` (clamped by end of file) from a direct-I/O file.
pub async fn read_range(file: &DmaFile, pos: u64, len: usize) -> io::Result<Vec<u8>> {
    Ok(read_range_in_place(file, pos, len).await?.to_vec())
}

/// `read_range` without the copy into a `Vec`.
pub async fn read_range_in_place(
    file: &DmaFile,
    pos: u64,
    len: usize,
) -> io::Result<glommio::io::ReadResult> {
    file.read_at(pos, len)
        .await
        .map_err(|e| io::Error::other(format!("read at {pos}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_one_aligned_write_covering_the_partial_block() {
        let mut a = Appender::new(0, Vec::new(), 512, 0);
        a.append(&[1u8; 100]);
        let job = a.plan_write().unwrap();
        assert_eq!((job.pos, job.end, job.bytes.len()), (0, 100, 512));
        assert!(a.plan_write().is_none(), "never two writes in flight");
        a.complete_write(job.end);
        a.append(&[2u8; 500]);
        let job = a.plan_write().unwrap();
        assert_eq!((job.pos, job.end, job.bytes.len()), (0, 600, 1024));
        assert_eq!(
            &job.bytes[..100],
            &[1u8; 100][..],
            "rewrites the same prefix"
        );
        a.complete_write(job.end);
        assert_eq!(a.written(), 600);
        assert_eq!(
            a.mem_start(),
            512,
            "keeps only the partial block when retain is 0"
        );
    }

    #[test]
    fn retains_tail_for_readers() {
        let mut a = Appender::new(0, Vec::new(), 512, 4096);
        for _ in 0..100 {
            a.append(&[7u8; 100]);
            let job = a.plan_write().unwrap();
            a.complete_write(job.end);
        }
        assert!(a.end() - a.mem_start() >= 4096);
        assert!(a.end() - a.mem_start() <= 2 * 4096 + 1024);
        assert_eq!(a.mem_slice(a.end() - 100).unwrap(), &[7u8; 100][..]);
        assert!(a.mem_slice(0).is_none());
    }

    #[test]
    fn a_finished_appender_gives_back_its_buffer_but_keeps_the_tail_for_readers() {
        let mut a = Appender::new(0, Vec::new(), 512, 4096);
        a.append(&vec![3u8; 1 << 20]);
        let job = a.plan_write().unwrap();
        a.complete_write(job.end);
        assert!(
            a.held_capacity_bytes() >= 1 << 20,
            "a busy appender keeps its buffer for the next appends"
        );
        a.release_spare_capacity();
        assert!(a.held_capacity_bytes() <= 2 * 4096 + 512);
        assert_eq!(a.mem_slice(a.end() - 4096).unwrap(), &[3u8; 4096][..]);
        a.append(&[4u8; 10]);
        assert_eq!(a.mem_slice(a.end() - 10).unwrap(), &[4u8; 10][..]);
    }

    #[test]
    fn resumes_from_existing_length() {
        let a = Appender::new(1000, vec![9u8; 1000 - 512], 512, 0);
        assert_eq!((a.mem_start(), a.end(), a.written()), (512, 1000, 1000));
    }
}
