//! The kubelet-like sync loop, written against the CRI traits only (a fake runtime tests it).
//!
//! Pure decisions ([`actions`], [`backoff`], [`pleg::diff`], [`prober::state`],
//! [`status::generate`], the GC selections) are separate from the parts that talk to the runtime
//! ([`executor`], [`worker`], [`agent`]).

pub mod actions;
pub mod admission;
pub mod agent;
pub mod apiclient;
pub mod backoff;
pub mod cleanup;
pub mod clock;
pub mod config;
pub mod crilog;
pub mod environment;
pub mod events;
pub mod executor;
pub mod fake;
pub mod gc;
pub mod housekeeping;
pub mod kill;
pub mod labels;
pub mod metrics;
pub mod node;
pub mod objects;
pub mod pleg;
pub mod podconfig;
pub mod prober;
pub mod runtime_pod;
pub mod server;
pub mod source;
pub mod status;
pub mod termination;
pub mod worker;

pub use agent::{Agent, AgentError, AgentHandle, AgentParts};
