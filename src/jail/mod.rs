//! Synchronous process sandboxing: the only module with `unsafe` and `fork`.
