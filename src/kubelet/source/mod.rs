//! Where pods come from: the manifest directory ([`manifest`], the embedded default; its pods
//! are static pods when the node also joins a cluster) and the API server ([`apiserver`], the
//! pods bound to the node). Both emit `PodEvent`s into one channel to the sync loop.

pub mod apiserver;
pub mod manifest;
