//! `evident plugins`: the installed stage components and the profiles' stage bindings.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use clap::Subcommand;
use evident::plugins::StageKind;

use super::Context;

/// Plugin commands.
#[derive(Subcommand)]
pub enum PluginsCommand {
    /// List installed plugins (bundled ones are installed on first use) and the profiles.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Install a WebAssembly component (wasm32-wasip2) as a stage plugin.
    Install {
        /// The component file.
        file: PathBuf,
        /// Name to install it under (default: the file name without .wasm).
        #[arg(long)]
        name: Option<String>,
        /// Version to record.
        #[arg(long, default_value = "0.1.0")]
        version: String,
        /// The stage it must implement (default: whichever world it implements).
        #[arg(long, value_enum)]
        kind: Option<StageKind>,
    },
    /// Put a plugin behind a stage of a profile, for every question from now on.
    Swap {
        /// The stage.
        #[arg(value_enum)]
        stage: StageKind,
        /// The plugin's name.
        plugin: String,
        /// The profile (default: plugins.default_profile).
        #[arg(long)]
        profile: Option<String>,
    },
}

/// Runs a plugin command.
pub fn run(ctx: &Context, cmd: PluginsCommand) -> Result<ExitCode> {
    let registry = ctx.registry(Arc::new(ctx.store()?))?;
    match cmd {
        PluginsCommand::List { json } => {
            let plugins = registry.list()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&plugins)?);
                return Ok(ExitCode::SUCCESS);
            }
            println!("{:<24} {:<10} {:<10} {:<8} {:>9}  sha256", "plugin", "version", "stage", "contract", "KiB");
            for p in &plugins {
                println!("{:<24} {:<10} {:<10} {:<8} {:>9.0}  {}", p.name, p.version, p.kind, p.api, p.size as f64 / 1024.0, &p.sha256[..16]);
            }
            let profiles = evident::pipeline::Profile::names(&ctx.config.plugins.profiles_dir);
            println!("\nprofiles: {} (default {})", profiles.join(", "), ctx.config.plugins.default_profile);
        }
        PluginsCommand::Install { file, name, version, kind } => {
            let wasm = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            let name = name.unwrap_or_else(|| file.file_stem().and_then(|s| s.to_str()).unwrap_or("plugin").to_string());
            let record = registry.install(&wasm, &name, &version, kind)?;
            println!("installed {} {} as a {} stage of contract {} ({})", record.name, record.version, record.kind, record.api, &record.sha256[..16]);
        }
        PluginsCommand::Swap { stage, plugin, profile } => {
            let profile = profile.unwrap_or_else(|| ctx.config.plugins.default_profile.clone());
            registry.swap(&profile, stage, &plugin)?;
            println!("profile {profile}: the {stage} stage now runs {plugin}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
