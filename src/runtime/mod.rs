//! The CRI `RuntimeService` implemented over sandboxed processes.

pub mod error;
pub mod ids;
pub mod spec;

pub use error::RuntimeError;
