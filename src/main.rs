//! The `runp` command line.
//!
//! Internal re-exec entry points (the container shim and init) are dispatched before any tokio
//! runtime or extra thread exists, because they fork and must stay single-threaded.

mod cli;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "runp", version, about = "An in-process pod runtime")]
struct Cli {
    #[command(flatten)]
    global: cli::GlobalOpts,
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start; the agent's many flags make its variant big, which costs nothing here.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Manage images in the image store.
    #[command(subcommand)]
    Image(cli::image::ImageCommand),
    /// Run the pods of a manifest directory and keep them converged.
    Agent(Box<cli::agent::AgentArgs>),
    /// Serve the CRI (RuntimeService + ImageService) over gRPC, backed by the process runtime.
    Serve(cli::serve::ServeArgs),
    /// List pods (from the agent's status files).
    Pods(cli::pods::PodsArgs),
    /// List the containers of every pod.
    Ps,
    /// Print a container's logs.
    Logs(cli::pods::LogsArgs),
    /// Run a command in a running container (non-interactive, CRI ExecSync).
    Exec(cli::exec::ExecArgs),
    /// The agent's configuration file.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Print shell completions (bash, zsh, fish, elvish, powershell) to stdout.
    Completions { shell: clap_complete::Shell },
    /// Print the man page (roff) to stdout.
    Man,
    /// Whether the agent (or `runp serve`) answers on its CRI socket and its runtime is ready:
    /// exit 0 if so, 1 with the reason if not (a container HEALTHCHECK).
    Health(cli::health::HealthArgs),
    /// Internal entry points used when runp re-executes itself.
    #[command(flatten)]
    Internal(cli::internal::InternalCommand),
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print a complete, commented default configuration for `runp agent --config`.
    Default,
}

fn main() -> ExitCode {
    let args = match cli::config_file::expand_args(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(err) => {
            eprintln!("runp: {err:#}");
            return ExitCode::from(2);
        }
    };
    let cli = Cli::parse_from(args);
    match &cli.command {
        Command::Config(ConfigCommand::Default) => {
            print!("{}", cli::config_file::DEFAULT);
            return ExitCode::SUCCESS;
        }
        Command::Completions { shell } => {
            let mut command = Cli::command();
            clap_complete::generate(*shell, &mut command, "runp", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        Command::Man => {
            return match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("runp: {err}");
                    ExitCode::FAILURE
                }
            };
        }
        _ => {}
    }
    if let Command::Internal(cmd) = cli.command {
        // Single-threaded on purpose: these fork, set up namespaces and exec.
        return cli::internal::run(cmd);
    }
    cli::init_tracing(&cli.global);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("runp: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Image(cmd) => cli::image::run(&cli.global, cmd).await,
            Command::Agent(args) => cli::agent::run(&cli.global, *args).await,
            Command::Serve(args) => cli::serve::run(&cli.global, args).await,
            Command::Pods(args) => cli::pods::pods(&cli.global, args),
            Command::Ps => cli::pods::ps(&cli.global),
            Command::Logs(args) => cli::pods::logs(&cli.global, args).await,
            Command::Exec(args) => cli::exec::exec(&cli.global, args).await,
            Command::Health(args) => cli::health::run(&cli.global, args).await,
            Command::Internal(_)
            | Command::Config(_)
            | Command::Completions { .. }
            | Command::Man => {
                unreachable!("dispatched above")
            }
        }
    });
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("runp: {err:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `key: value` with a camelCase key (a commented-out setting, not prose).
    fn is_setting(line: &str) -> bool {
        line.split_once(": ").is_some_and(|(key, _)| {
            key.starts_with(|c: char| c.is_ascii_lowercase())
                && key.chars().all(|c| c.is_ascii_alphanumeric())
        })
    }

    /// Every setting of the default configuration is a flag `runp agent` takes.
    #[test]
    fn the_default_configuration_parses_as_agent_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.yaml");
        let mut text = cli::config_file::DEFAULT.to_string();
        // The commented settings too (their example values).
        text = text
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest) if is_setting(rest) => rest.to_string(),
                _ => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        text = text.replace("  # x509", "  x509");
        std::fs::write(&path, &text).unwrap();
        let args = cli::config_file::expand_args(
            ["runp", "agent", "--config", path.to_str().unwrap()]
                .into_iter()
                .map(Into::into)
                .collect(),
        )
        .unwrap();
        assert!(args.len() > 30, "{args:?}");
        if let Err(err) = Cli::try_parse_from(&args) {
            panic!("{err}\n{args:?}\n{text}");
        }
    }
}
