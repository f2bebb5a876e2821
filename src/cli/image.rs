//! `runp image ...`: pull, load, list, inspect and remove images.

use super::{GlobalOpts, RegistryArgs};
use anyhow::Context;
use clap::Subcommand;
use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};
use runp::image::registry::ProgressFn;
use runp::image::{
    Credentials, Digest, ImageStore, ImportOptions, ImportProgress, LayerStage, NamedRef,
    PullCredentials, PullProgress,
};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub enum ImageCommand {
    /// Pull an image from its registry (docker.io unless the name says otherwise).
    Pull {
        reference: String,
        /// Credentials for the registry, USERNAME:PASSWORD.
        #[arg(long, env = "RUNP_REGISTRY_CREDS", hide_env_values = true)]
        creds: Option<String>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
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
    if let ImageCommand::Pull {
        reference,
        creds,
        registry,
    } = cmd
    {
        return pull(&root, &reference, creds.as_deref(), &registry).await;
    }
    tokio::task::spawn_blocking(move || run_blocking(&root, cmd))
        .await
        .context("image command task failed")?
}

fn run_blocking(root: &Path, cmd: ImageCommand) -> anyhow::Result<ExitCode> {
    let store = ImageStore::open(root)
        .with_context(|| format!("opening the image store at {}", root.display()))?;
    match cmd {
        ImageCommand::Pull { .. } => unreachable!("pulls run on the async runtime"),
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

async fn pull(
    root: &Path,
    reference: &str,
    creds: Option<&str>,
    registry: &RegistryArgs,
) -> anyhow::Result<ExitCode> {
    let name = NamedRef::parse(reference)?;
    let credentials = match creds {
        Some(creds) => Credentials::from_user_pass(creds).context("--creds")?,
        None => Credentials::Anonymous,
    };
    let options = registry.store_options()?;
    let (root, opened) = (root.to_path_buf(), root.to_path_buf());
    let store = tokio::task::spawn_blocking(move || ImageStore::open_with(&opened, options))
        .await
        .context("opening the image store")?
        .with_context(|| format!("opening the image store at {}", root.display()))?;
    let display = Arc::new(PullDisplay::new());
    let shown = display.clone();
    let progress: ProgressFn = Arc::new(move |event: &PullProgress| shown.update(event));
    let result = store
        .pull(
            &name,
            PullCredentials::any_host(credentials),
            Some(progress),
        )
        .await;
    display.finish();
    let record = result.with_context(|| format!("pulling {name}"))?;
    println!("Pulled: {name}");
    for digest in &record.repo_digests {
        println!("Digest: {digest}");
    }
    println!("Image ID: {}", record.id);
    Ok(ExitCode::SUCCESS)
}

/// Pull progress: a bar per layer on a terminal, else one line per finished layer.
struct PullDisplay {
    bars: Option<indicatif::MultiProgress>,
    layers: Mutex<HashMap<Digest, LayerLine>>,
}

struct LayerLine {
    bar: Option<ProgressBar>,
    total: u64,
    downloaded: bool,
}

fn short(digest: &Digest) -> &str {
    digest.hex().get(..12).unwrap_or("")
}

impl PullDisplay {
    fn new() -> PullDisplay {
        let bars = std::io::stdout()
            .is_terminal()
            .then(|| indicatif::MultiProgress::with_draw_target(ProgressDrawTarget::stdout()));
        PullDisplay {
            bars,
            layers: Mutex::new(HashMap::new()),
        }
    }

    fn update(&self, event: &PullProgress) {
        let mut layers = self.layers.lock().unwrap_or_else(|p| p.into_inner());
        match event {
            PullProgress::Resolved {
                manifest,
                layers: list,
            } => {
                if self.bars.is_none() {
                    println!("Manifest {manifest}: {} layers", list.len());
                }
                for (digest, total) in list {
                    let bar = self.bars.as_ref().map(|bars| {
                        let bar = bars.add(ProgressBar::new(*total));
                        if let Ok(style) = ProgressStyle::with_template(
                            "{prefix} {msg:12} [{bar:30}] {bytes}/{total_bytes}",
                        ) {
                            bar.set_style(style.progress_chars("=> "));
                        }
                        bar.set_prefix(short(digest).to_string());
                        bar.set_message("waiting");
                        bar
                    });
                    layers.insert(
                        digest.clone(),
                        LayerLine {
                            bar,
                            total: *total,
                            downloaded: false,
                        },
                    );
                }
            }
            PullProgress::Layer { digest, stage } => {
                let Some(line) = layers.get_mut(digest) else {
                    return;
                };
                match (&line.bar, stage) {
                    (Some(bar), LayerStage::Present) => {
                        bar.set_message("present");
                        bar.set_position(line.total);
                    }
                    (Some(bar), LayerStage::Downloading { done, .. }) => {
                        bar.set_message("downloading");
                        bar.set_position(*done);
                    }
                    (Some(bar), LayerStage::Unpacking) => bar.set_message("unpacking"),
                    (Some(bar), LayerStage::Ready) => {
                        bar.set_position(line.total);
                        bar.finish_with_message("done");
                    }
                    (None, LayerStage::Downloading { .. }) => line.downloaded = true,
                    (None, LayerStage::Ready) => {
                        let how = if line.downloaded {
                            format!("downloaded {}", HumanBytes(line.total))
                        } else {
                            "already present".to_string()
                        };
                        println!("Layer {}: {how}", short(digest));
                    }
                    (None, _) => {}
                }
            }
        }
    }

    fn finish(&self) {
        if let Some(bars) = &self.bars {
            let _ = bars.clear();
        }
    }
}
