//! Garbage collection: dead containers and sandboxes, images by disk usage, container logs.

pub mod containers;
pub mod images;
pub mod logs;
