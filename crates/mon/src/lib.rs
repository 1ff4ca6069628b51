//! Shoal's monitor (docs filled in below).

pub mod core;
