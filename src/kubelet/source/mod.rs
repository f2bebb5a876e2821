//! Pod sources besides the manifest directory (which lives in `podconfig::source` for now).

pub mod apiserver;
