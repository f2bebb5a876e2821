//! The image store: content-addressed blobs, image records, and layers unpacked once.
