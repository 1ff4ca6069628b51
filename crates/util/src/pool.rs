//! A bounded pool of [`AlignedBuf`]s, so that the data path does not allocate, zero and fault
//! in fresh pages for every large I/O.

use std::sync::Mutex;

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

    /// Bytes held by idle buffers.
    #[must_use]
    pub fn idle_bytes(&self) -> usize {
        let free = self.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        free.iter().map(|b| b.len()).sum()
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
}
