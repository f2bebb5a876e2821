//! Small shared helpers with no dependencies on the other layers.

pub mod atomic_file;
pub mod private_dir;
pub mod tls;
