//! Liveness, readiness and startup probes.

pub mod handlers;
pub mod manager;
pub mod results;
pub mod state;
