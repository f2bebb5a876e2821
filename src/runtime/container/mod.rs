//! Containers: an OCI bundle per container, run by its own shim.

mod create;
mod list;
mod logs;
mod remove;
mod start;
pub(crate) mod status;
mod stop;
mod targets;
mod update;
