//! The kubelet-like sync loop, written against the CRI traits only (a fake runtime tests it).

pub mod actions;
pub mod backoff;
pub mod cleanup;
pub mod clock;
pub mod config;
pub mod crilog;
pub mod environment;
pub mod executor;
pub mod fake;
pub mod gc;
pub mod labels;
pub mod pleg;
pub mod podconfig;
pub mod prober;
pub mod runtime_pod;
pub mod status;
pub mod termination;
pub mod worker;
