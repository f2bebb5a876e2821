//! The image store: content-addressed blobs, image records, and layers unpacked once.
//!
//! - [`ImageStore`] ([`store`]): open, resolve, list, remove; [`import`](ImageStore::import)
//!   docker-save and OCI layouts ([`import`]); container root filesystems with leases
//!   ([`rootfs`], [`lease`]); the CRI `ImageService` ([`service`]).
//! - References are normalized in one place ([`reference`]): `busybox` is
//!   `docker.io/library/busybox:latest` for import, pull and lookup alike.
//! - Registry pulls ([`registry`]) verify every manifest and blob, resume partial downloads
//!   ([`ingest`]) and commit like imports.
//! - Layers are extracted safely ([`unpack`]) into a form overlayfs can use directly, with a copy
//!   fallback that applies whiteouts itself.

pub mod blobs;
pub mod digest;
pub mod error;
pub mod host;
pub mod import;
pub mod ingest;
pub mod layers;
pub mod lease;
pub mod lock;
pub mod platform;
pub mod pull;
pub mod records;
pub mod reference;
pub mod registry;
pub mod rootfs;
pub mod service;
pub mod store;
pub mod unpack;
pub mod usage;

pub use digest::Digest;
pub use error::ImageError;
pub use import::{ImportOptions, ImportProgress};
pub use layers::LayerInfo;
pub use records::ImageRecord;
pub use reference::NamedRef;
pub use registry::{
    Credentials, LayerStage, PullCredentials, PullProgress, RegistryError, RegistryOptions,
};
pub use rootfs::{PreparedRootfs, RootfsKind};
pub use store::{Clock, ImageStore, RootfsPolicy, StoreOptions};
pub use unpack::LayerFormat;
