//! Shoal's S3 gateway: a stateless S3 server over the cluster. Users, keys, buckets, bucket
//! indexes and objects all live in cluster pools (decision 0014), so any number of gateways
//! serve the same data behind any HTTP load balancer.
//!
//! Layers, bottom up: [`layout`] (names and records, pure), [`acl`], [`policy`], [`lifecycle`]
//! and [`partsums`] (access control lists, bucket policies, lifecycle rules and multipart
//! checksums, pure), [`rados`] (helpers over the client), [`meta`] (users, keys, buckets),
//! [`index`] (bucket index partitions and the commit protocol's completion), [`versions`]
//! (version records of keys in versioned buckets), [`objects`] (heads and tails, streaming, their MD5 through [`md5lanes`]),
//! [`multipart`] (uploads, parts, completion), [`access`] (who may do what, over cached records
//! in [`cache`]), [`s3impl`] (the S3 API on s3s, with [`s3multipart`], [`s3copy`],
//! [`s3access`], [`s3config`], [`s3versions`], [`s3lock`], [`s3lifecycle`] and
//! [`s3attributes`]), [`auth`] (secrets for signature checks), [`collector`] (the background
//! reconciler and garbage collector), [`expiry`] (the lifecycle's background pass), [`server`]
//! (HTTP or HTTPS through [`shoal_net::tls`], with [`precheck`], [`unread`], [`idle`] (how long it waits on a client), [`cors`] and [`s3post`] (browser-form uploads,
//! their policies in [`postpolicy`], signatures with [`signing`]) around s3s).

pub mod access;
pub mod acl;
pub mod auth;
pub mod cache;
pub mod collector;
pub mod cors;
pub mod crashpoint;
pub mod error;
pub mod expiry;
pub mod idle;
pub mod index;
pub mod layout;
pub mod lifecycle;
pub mod loadgen;
pub mod md5lanes;
pub mod merge;
pub mod meta;
pub mod multipart;
pub mod objects;
pub mod partition;
pub mod partsums;
pub mod policy;
pub mod postpolicy;
pub mod precheck;
pub mod rados;
pub mod reshard;
pub mod s3access;
pub mod s3attributes;
pub mod s3config;
pub mod s3copy;
pub mod s3impl;
pub mod s3lifecycle;
pub mod s3lock;
pub mod s3multipart;
pub mod s3post;
pub mod s3versions;
pub mod server;
pub mod signing;
pub mod text;
pub mod unread;
pub mod versions;

pub use error::GatewayError;
pub use server::{GatewayConfig, Server};
pub use shoal_net::tls::TlsFiles;
