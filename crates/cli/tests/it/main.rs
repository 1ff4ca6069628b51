//! The `shoal` binary's integration tests: real processes (monitors, OSDs, gateways, NBD
//! servers and real clients) on loopback, one module per capability.
//!
//! They are one test binary rather than one per file for two reasons, both about CI on a
//! 2-core machine: each separate binary compiled the shared helpers again and linked every
//! dependency again (about a minute and a half of a cold build for twenty-odd binaries), and
//! cargo runs separate binaries one after the other, so a file with a single long test (most of
//! them wait on a cluster: recovery, peering, a down OSD marked out) left the second test
//! thread idle for its whole length. In one binary those waits overlap.

mod common;

mod backfill_return;
mod cli;
mod clone_recovery;
mod cluster;
mod crash;
mod down_keeps_place;
mod force_complete;
mod full;
mod nbd;
mod nemesis;
mod omap_recovery;
mod ops;
mod osd_restart;
mod osd_same_addr;
mod peer_crash;
mod peer_reports;
mod placement;
mod rbd_lock;
mod rbd_readahead;
mod rbd_restart;
mod recovery_paced;
mod replicas_first;
mod s3;
mod scrub;
