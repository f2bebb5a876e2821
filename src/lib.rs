//! runp: an in-process pod runtime.
//!
//! Layers, each using only those below it:
//! - [`jail`]: synchronous process sandboxing (namespaces, mounts, capabilities, the per-container
//!   shim); the only place with `unsafe` and `fork`, entered by re-executing the `runp` binary
//!   before any tokio runtime exists.
//! - [`image`]: the content-addressed image store and layer unpacker.
//! - [`runtime`]: the CRI `RuntimeService` over sandboxed processes.
//! - [`cri`]: CRI types and traits (usable by every layer), and the gRPC server and client.
//! - [`kubelet`]: the pod sync loop, written against the CRI traits only.

pub mod cri;
pub mod image;
pub mod jail;
pub mod kubelet;
pub mod runtime;
pub mod util;
