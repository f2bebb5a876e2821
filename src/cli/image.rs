//! `runp image ...`: load, list, inspect and remove images.

use super::GlobalOpts;
use anyhow::Context;
use clap::Subcommand;
use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};
use runp::image::{ImageStore, ImportOptions, ImportProgress};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub enum ImageCommand {
    /// Import a `docker save` tarball or an OCI image layout (directory or tarball).
    Load { file: PathBuf },
    /// List images.
    Ls {
        /// Only print image ids.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Show an image record as JSON.
    Inspect { reference: String },
    /// Remove an image (all its names).
    Rm {
        reference: String,
        /// Remove it even while containers use it (their layers stay until released).
        #[arg(long, short)]
        force: bool,
    },
}

pub async fn run(global: &GlobalOpts, cmd: ImageCommand) -> anyhow::Result<ExitCode> {
    let root = global.image_root();
    tokio::task::spawn_blocking(move || run_blocking(&root, cmd))
        .await
        .context("image command task failed")?
}

fn run_blocking(root: &Path, cmd: ImageCommand) -> anyhow::Result<ExitCode> {
    let store = ImageStore::open(root)
        .with_context(|| format!("opening the image store at {}", root.display()))?;
    match cmd {
        ImageCommand::Load { file } => load(&store, &file),
        ImageCommand::Ls { quiet } => list(&store, quiet),
        ImageCommand::Inspect { reference } => {
            let record = store.resolve(&reference)?;
            println!("{}", serde_json::to_string_pretty(&record)?);
            Ok(ExitCode::SUCCESS)
        }
        ImageCommand::Rm { reference, force } => {
            let record = store.resolve(&reference)?;
            store.remove(&record.id, force)?;
            println!("Deleted: {}", record.id);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn load(store: &ImageStore, file: &Path) -> anyhow::Result<ExitCode> {
    let progress = LoadProgress::new();
    let report = |event: &ImportProgress| progress.update(event);
    let options = ImportOptions {
        select: None,
        progress: Some(&report),
    };
    let result = store.import_with(file, options);
    progress.finish();
    let records = result.with_context(|| format!("loading {}", file.display()))?;
    for record in records {
        if record.repo_tags.is_empty() {
            println!("Loaded image ID: {}", record.id);
        }
        for tag in &record.repo_tags {
            println!("Loaded image: {tag}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn list(store: &ImageStore, quiet: bool) -> anyhow::Result<ExitCode> {
    let records = store.list()?;
    if quiet {
        for record in &records {
            println!("{}", record.id);
        }
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<50} {:<14} {:<14} {:>10}",
        "REPOSITORY", "TAG", "IMAGE ID", "SIZE"
    );
    for record in &records {
        let short_id = record
            .id
            .trim_start_matches("sha256:")
            .get(..12)
            .unwrap_or("");
        let size = HumanBytes(record.size).to_string();
        let names: Vec<(&str, &str)> = record
            .repo_tags
            .iter()
            .map(|t| t.rsplit_once(':').unwrap_or((t.as_str(), "")))
            .collect();
        if names.is_empty() {
            println!(
                "{:<50} {:<14} {short_id:<14} {size:>10}",
                "<none>", "<none>"
            );
        }
        for (repository, tag) in names {
            println!("{repository:<50} {tag:<14} {short_id:<14} {size:>10}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A progress bar on stderr, shown only on a terminal and only once an import has taken more
/// than a moment (short imports stay quiet).
struct LoadProgress {
    bar: Option<ProgressBar>,
    started: Instant,
}

const SHOW_AFTER: Duration = Duration::from_millis(700);

impl LoadProgress {
    fn new() -> LoadProgress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
            if let Ok(style) =
                ProgressStyle::with_template("{msg:24} [{bar:30}] {bytes}/{total_bytes}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        });
        LoadProgress {
            bar,
            started: Instant::now(),
        }
    }

    fn update(&self, event: &ImportProgress) {
        let Some(bar) = &self.bar else { return };
        if bar.is_hidden() && self.started.elapsed() > SHOW_AFTER {
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        match event {
            ImportProgress::Reading { done, total } => {
                bar.set_message("reading");
                bar.set_length(*total);
                bar.set_position(*done);
            }
            ImportProgress::Unpacking { index, count } => {
                bar.set_message(format!("unpacking layer {}/{count}", index + 1));
            }
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
