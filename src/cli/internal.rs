//! Hidden subcommands runp re-executes itself with (shim, container init). They run before any
//! tokio runtime exists.

use clap::Subcommand;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum InternalCommand {}

pub fn run(cmd: InternalCommand) -> ExitCode {
    match cmd {}
}
