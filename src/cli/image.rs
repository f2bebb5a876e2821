//! `runp image ...`: load, list, inspect and remove images.

use super::GlobalOpts;
use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum ImageCommand {
    /// Import a `docker save` tarball or an OCI image layout (directory or tarball).
    Load { file: PathBuf },
    /// List images.
    Ls,
    /// Show an image record as JSON.
    Inspect { reference: String },
    /// Remove an image.
    Rm { reference: String },
}

pub async fn run(_global: &GlobalOpts, _cmd: ImageCommand) -> anyhow::Result<ExitCode> {
    anyhow::bail!("the image store is not built yet")
}
