//! The CRI `RuntimeService` implemented over sandboxed processes.

pub mod cgroups;
pub mod clock;
pub mod error;
pub mod events;
pub mod ids;
pub mod reaper;
pub mod spec;
pub mod state;

pub use error::RuntimeError;
pub use reaper::Reaper;
