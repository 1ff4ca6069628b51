//! Small helpers shared by every Shoal layer: checksums, bytes that carry their block
//! checksums, and page-aligned buffers.
//!
//! Nothing here does I/O or knows about objects; higher layers build on these pieces.

pub mod aligned;
pub mod checksum;
pub mod pattern;
pub mod pool;
pub mod summed;

pub use aligned::AlignedBuf;
pub use checksum::{Crc32cShift, crc32c, crc32c_append, crc32c_blocks, crc32c_unappend};
pub use pool::{BufPool, Lent};
pub use summed::{BlockCrcs, SUM_BLOCK_BYTES, SummedBytes, block_shift};
