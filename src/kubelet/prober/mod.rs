//! Liveness, readiness and startup probes.

pub mod results;
pub mod state;
