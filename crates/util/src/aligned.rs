//! Heap buffers aligned for direct I/O.
//!
//! `O_DIRECT` requires the buffer address, the file offset and the length to be multiples of the
//! device's logical block size. [`AlignedBuf`] guarantees the address part for 4096-byte alignment,
//! which covers every logical block size in use (512 and 4096 bytes).

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Alignment of every [`AlignedBuf`], in bytes.
pub const ALIGN_BYTES: usize = 4096;

/// A zero-initialised, fixed-length byte buffer whose address is aligned to [`ALIGN_BYTES`].
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len_bytes: usize,
}

// SAFETY: the buffer owns its allocation exclusively, exactly like a `Box<[u8]>`.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only allow reads of plain bytes.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates a zeroed buffer of `len_bytes` (which may be zero).
    ///
    /// # Panics
    /// Panics if the allocation fails, like every other Rust allocation.
    #[must_use]
    pub fn zeroed(len_bytes: usize) -> Self {
        if len_bytes == 0 {
            return Self { ptr: NonNull::<[u8; ALIGN_BYTES]>::dangling().cast(), len_bytes: 0 };
        }
        let layout = Self::layout(len_bytes);
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout);
        };
        Self { ptr, len_bytes }
    }

    /// Allocates a buffer holding a copy of `data`, padded with zeros to a multiple of `pad_to`.
    #[must_use]
    pub fn copy_padded(data: &[u8], pad_to: usize) -> Self {
        assert!(pad_to > 0, "padding unit must be positive");
        let len = data.len().div_ceil(pad_to) * pad_to;
        let mut buf = Self::zeroed(len);
        buf[..data.len()].copy_from_slice(data);
        buf
    }

    fn layout(len_bytes: usize) -> Layout {
        match Layout::from_size_align(len_bytes, ALIGN_BYTES) {
            Ok(layout) => layout,
            Err(_) => panic!("buffer of {len_bytes} bytes cannot be laid out"),
        }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len_bytes > 0 {
            // SAFETY: allocated in `zeroed` with exactly this layout.
            unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len_bytes)) };
        }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len_bytes initialised bytes (or dangling with length 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len_bytes) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and we hold the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len_bytes) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_and_padding() {
        let buf = AlignedBuf::copy_padded(b"abc", 4096);
        assert_eq!(buf.len(), 4096);
        assert_eq!(buf.as_ptr() as usize % ALIGN_BYTES, 0);
        assert_eq!(&buf[..3], b"abc");
        assert!(buf[3..].iter().all(|b| *b == 0));
        assert!(AlignedBuf::zeroed(0).is_empty());
    }
}
