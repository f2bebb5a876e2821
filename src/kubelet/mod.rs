//! The kubelet-like sync loop, written against the CRI traits only (a fake runtime tests it).

pub mod config;
pub mod labels;
pub mod podconfig;
