//! Shoal's local object store: one [`ObjectStore`] API over three backends.
//!
//! - `block`: the engine ([`engine`]) on a raw block device or a preallocated file, data with
//!   direct I/O, metadata in fjall, crc32c on every block.
//! - `mem`: the same engine over RAM, for transient clusters.
//! - `posix`: one file per object in a directory, the FileStore-style baseline.
//!
//! [`open`] mounts any of them by path; [`mkfs`] creates one.

pub mod api;
pub mod bench;
pub mod engine;
pub mod error;
pub mod names;
pub mod open;
pub mod posix;

pub use api::{BackendKind, Data, Durability, FsckReport, ListPage, ObjectStat, ObjectStore, Op, Transaction, Usage};
pub use engine::device::CacheSizes;
pub use error::{Result, StoreError};
pub use open::{MkfsOptions, Store, mkfs, open, open_with, parse_size};
