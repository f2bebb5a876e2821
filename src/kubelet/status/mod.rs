//! Pod status: the pure generator and the manager that writes status files.

pub mod generate;
pub mod manager;

pub use generate::{StatusInputs, Waiting, generate_pod_status};
pub use manager::StatusManager;
