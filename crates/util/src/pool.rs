//! A bounded pool of [`AlignedBuf`]s, so that the data path does not allocate, zero and fault
//! in fresh pages for every large I/O.

use std::sync::{Arc, Mutex};

use crate::AlignedBuf;

/// Buffers kept for reuse, bounded in total bytes and in the size of any one buffer.
pub struct BufPool {
    free: Mutex<Vec<AlignedBuf>>,
    max_bytes: usize,
    max_buf_bytes: usize,
}

impl BufPool {
    /// A pool holding at most `max_bytes` in idle buffers, none larger than `max_buf_bytes`.
    #[must_use]
    pub fn new(max_bytes: usize, max_buf_bytes: usize) -> Self {
        Self { free: Mutex::new(Vec::new()), max_bytes, max_buf_bytes }
    }

    /// A buffer of exactly `len` bytes. Its contents are unspecified (zeros or old data): callers
    /// overwrite or clear what they use.
    #[must_use]
    pub fn take(&self, len: usize) -> AlignedBuf {
        let mut free = self.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match free.iter().position(|b| b.len() == len) {
            Some(i) => free.swap_remove(i),
            None => {
                drop(free);
                AlignedBuf::zeroed(len)
            }
        }
    }

    /// Returns a buffer for reuse; it is dropped if the pool is full or it is too large.
    pub fn give(&self, buf: AlignedBuf) {
        if buf.len() > self.max_buf_bytes || buf.is_empty() {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let held: usize = free.iter().map(|b| b.len()).sum();
        if held + buf.len() <= self.max_bytes {
            free.push(buf);
        }
    }

    /// Lends `buf` (taken from this pool) to whoever needs it for longer than a call: it comes
    /// back to the pool when the [`Lent`] is dropped. A store read handed to the network this
    /// way is sent from the buffer it was read into, and the buffer is reused after the send.
    #[must_use]
    pub fn lend(self: &Arc<Self>, buf: AlignedBuf) -> Lent {
        Lent { buf: Some(buf), pool: Arc::clone(self) }
    }

    /// Bytes held by idle buffers.
    #[must_use]
    pub fn idle_bytes(&self) -> usize {
        let free = self.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        free.iter().map(|b| b.len()).sum()
    }
}

/// A pool's buffer on loan (see [`BufPool::lend`]); dropping it gives the buffer back.
pub struct Lent {
    /// Always `Some` until the drop takes it.
    buf: Option<AlignedBuf>,
    pool: Arc<BufPool>,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        self.buf.as_deref().unwrap_or_default()
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            self.pool.give(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_and_bounds() {
        let pool = BufPool::new(8192, 4096);
        let a = pool.take(4096);
        let ptr = a.as_ptr();
        pool.give(a);
        assert_eq!(pool.take(4096).as_ptr(), ptr);
        pool.give(AlignedBuf::zeroed(8192)); // too large for this pool
        assert_eq!(pool.idle_bytes(), 0);
        pool.give(AlignedBuf::zeroed(4096));
        pool.give(AlignedBuf::zeroed(4096));
        pool.give(AlignedBuf::zeroed(4096)); // over max_bytes
        assert_eq!(pool.idle_bytes(), 8192);
    }

    #[test]
    fn a_lent_buffer_comes_back_when_dropped() {
        let pool = Arc::new(BufPool::new(1 << 20, 1 << 20));
        let mut buf = pool.take(8192);
        buf[100] = 7;
        let ptr = buf.as_ptr();
        let lent = pool.lend(buf);
        assert_eq!((lent.as_ref().len(), lent.as_ref()[100]), (8192, 7));
        assert_eq!(pool.idle_bytes(), 0, "a lent buffer is not idle");
        drop(lent);
        assert_eq!(pool.idle_bytes(), 8192);
        assert_eq!(pool.take(8192).as_ptr(), ptr);
    }
}
