//! Shoal's block images (issue 10): thin images striped over cluster objects, in the manner of
//! Ceph's RBD.
//!
//! - [`striping`]: where each byte of an image lives (object size, stripe unit, stripe count).
//! - [`header`]: the pool's image directory and each image's header (spec and size in omap).
//! - [`image`]: an open image's reads, writes, zeroing and allocation map.
//! - [`manage`]: resize, remove and usage of whole images.
//! - [`lock`]: the exclusive lock that keeps one writer per image.
//! - [`fence`]: whether a writable handle may write, as its lock's holder decides.
//! - [`transfer`]: whole images to and from files or streams, sparse (export, import).
//! - [`bench`]: a load generator over an image (`shoal rbd bench`).
//! - [`snap`]: snapshots (object snapshots in the cluster), rollback, clones and flatten.
//!
//! Data objects are created by the first write that touches them (thin provisioning); ranges
//! no object backs read as zeros; zeroing removes or truncates objects instead of writing zeros.

pub mod bench;
pub mod error;
pub mod fence;
pub mod header;
pub mod image;
pub mod lock;
pub mod manage;
pub mod readahead;
pub mod snap;
pub mod striping;
pub mod transfer;

pub use error::RbdError;
pub use fence::Fence;
pub use header::{ImageInfo, ImageSpec, ParentSpec, SnapInfo};
pub use image::{Image, Run};
pub use striping::Layout;
