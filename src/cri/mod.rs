//! The Kubernetes CRI `runtime.v1` API: generated message types, the gRPC stubs, and the async
//! [`RuntimeService`] / [`ImageService`] traits that the in-process runtime implements and the
//! sync loop calls.
//!
//! Layering: `api` and the traits depend on nothing else in the crate, so every layer may use
//! them; the gRPC server and client (which wrap a trait object) sit above the runtime.
//!
//! The proto is vendored from the k8s-cri crate (cri-api `runtime.v1`, Apache-2.0).

pub mod authority;
pub mod client;
pub mod endpoint;
mod rpcs;
pub mod server;
mod service;
pub mod socket;
pub mod streaming;
mod streaming_api;

/// Generated `runtime.v1` messages, enums, and tonic clients/servers.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod api {
    tonic::include_proto!("runtime.v1");
}

pub use service::{CriResult, EventStream, ImageService, RuntimeService};
pub use streaming_api::{StreamIo, StreamingRuntime, TerminalSize};

/// The CRI API version this crate speaks (reported by `Version`).
pub const CRI_API_VERSION: &str = "v1";

/// The well-known label naming the Kubernetes pod (its UID) a sandbox or container belongs to:
/// the kubelet sets it, and the runtime indexes its records by it.
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
