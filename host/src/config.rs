//! The appliance configuration: embedded defaults, an optional file over them, flags over both.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

/// The defaults, built into the binary from `appliance-config/appliance.toml`.
pub const EMBEDDED_DEFAULTS: &str = include_str!("../../appliance-config/appliance.toml");

/// Why the configuration could not be read.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read the configuration file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the configuration file {path} is not valid: {message}")]
    Invalid { path: String, message: String },
}

/// Where models and kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ComputeBackend {
    /// A real GPU when there is one, else the CPU.
    Auto,
    /// Any wgpu device, software ones included.
    Wgpu,
    /// Native CPU code.
    Cpu,
}

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplianceConfig {
    pub data_dir: PathBuf,
    pub models_dir: PathBuf,
    pub pdfium_library: PathBuf,
    pub compute: ComputeConfig,
    pub server: ServerConfig,
    pub ingest: IngestConfig,
    pub generator: GeneratorConfig,
    pub plugins: PluginsConfig,
}

/// `[plugins]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginsConfig {
    /// Where the built stage components are (`<name>.wasm`).
    pub dir: PathBuf,
    /// Where the profiles are (`<name>.toml`).
    pub profiles_dir: PathBuf,
    /// The profile a question uses when it names none.
    pub default_profile: String,
    /// What each stage call may use (`[plugins.limits]`).
    pub limits: crate::plugins::StageLimits,
}

/// Which generator answers: the embedded model or an OpenAI-compatible server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum GeneratorBackend {
    /// The GGUF model in `models_dir`, run by burn.
    Embedded,
    /// A `/v1/chat/completions` server (`[generator.openai]`).
    Openai,
}

/// `[generator]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorConfig {
    pub backend: GeneratorBackend,
    /// The embedded model: a name set-up provides (`qwen2.5-1.5b`, `qwen2.5-0.5b`,
    /// `smollm2-135m`) or a GGUF file's path relative to `models_dir`.
    pub model: String,
    /// Memory for the prompt caches one request keeps for reuse by its later prompts, MiB.
    pub prompt_cache_mib: u64,
    pub openai: crate::generate::RemoteConfig,
}

/// `[compute]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeConfig {
    pub backend: ComputeBackend,
    /// Memory for page vectors kept between questions, in MiB (0: read them for every search).
    pub vector_cache_mib: u64,
}

/// `[server]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub addr: String,
    /// Bearer tokens and their roles (`[[server.tokens]]`).
    pub tokens: Vec<TokenConfig>,
    /// Largest JSON request body, KiB.
    pub max_body_kib: u64,
    /// Largest upload (a PDF or a plugin component), MiB.
    pub max_upload_mib: u64,
    /// Questions answered at once.
    pub max_running: usize,
    /// Questions waiting for a free slot; more than this are answered 429.
    pub max_queued: usize,
    /// Seconds a question may take, waiting included.
    pub request_timeout_s: u64,
}

/// What a bearer token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Ask questions, read documents, plugins and profiles.
    Read,
    /// Everything: upload and delete documents, install and swap plugins.
    Admin,
}

/// One `[[server.tokens]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub token: String,
    pub role: Role,
}

/// `[ingest]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestConfig {
    pub render_images: bool,
    pub page_image_max_px: u32,
    /// Seconds the PDF worker may take to open a document.
    pub open_timeout_s: u64,
    /// Seconds it may take for any one page.
    pub page_timeout_s: u64,
    /// Seconds it may take for a whole document.
    pub document_timeout_s: u64,
    /// Address space of the worker reading one document, MiB.
    pub worker_memory_mib: u64,
    /// Pages a document may have.
    pub max_pages: u32,
    /// Uploaded documents read at once by `evident serve`.
    pub parallel_reads: usize,
}

/// The folder relative paths in the configuration resolve against: `EVIDENT_HOME` when set;
/// else the working directory when set-up's `.evident/` is there; else the nearest folder above
/// the binary that holds one (a build inside the repository, run from anywhere); else the
/// working directory.
pub fn appliance_home() -> PathBuf {
    if let Some(home) = std::env::var_os("EVIDENT_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(home);
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    if is_home(&cwd) {
        return cwd;
    }
    let beside_binary = std::env::current_exe().ok().and_then(|exe| exe.ancestors().skip(1).find(|d| is_home(d)).map(Path::to_path_buf));
    beside_binary.unwrap_or(cwd)
}

fn is_home(dir: &Path) -> bool {
    dir.join(".evident").is_dir()
}

impl ApplianceConfig {
    /// The embedded defaults with `file`, if any, read over them; relative paths resolved
    /// against [`appliance_home`].
    pub fn load(file: Option<&Path>) -> Result<ApplianceConfig, ConfigError> {
        let mut config = ApplianceConfig::load_unresolved(file)?;
        let home = appliance_home();
        for path in [&mut config.data_dir, &mut config.models_dir, &mut config.pdfium_library, &mut config.plugins.dir, &mut config.plugins.profiles_dir] {
            if path.is_relative() {
                *path = home.join(&*path);
            }
        }
        Ok(config)
    }

    fn load_unresolved(file: Option<&Path>) -> Result<ApplianceConfig, ConfigError> {
        let mut table = parse("embedded defaults", EMBEDDED_DEFAULTS)?;
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
            merge(&mut table, parse(&path.display().to_string(), &text)?);
        }
        let name = file.map(|p| p.display().to_string()).unwrap_or_else(|| "embedded defaults".into());
        table
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Invalid { path: name, message: e.message().to_string() })
    }
}

fn parse(name: &str, text: &str) -> Result<toml::Table, ConfigError> {
    text.parse::<toml::Table>()
        .map_err(|e| ConfigError::Invalid { path: name.to_string(), message: e.message().to_string() })
}

/// Deep merge: tables merge key by key, anything else in `over` replaces.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(key, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_defaults_parse() {
        let c = ApplianceConfig::load(None).expect("defaults parse");
        assert_eq!(c.compute.backend, ComputeBackend::Auto);
        assert!(c.ingest.page_image_max_px > 0);
    }

    #[test]
    fn a_file_overrides_single_keys_and_rejects_typos() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.toml");
        std::fs::write(&path, "[ingest]\npage_image_max_px = 300\n").expect("write");
        let c = ApplianceConfig::load(Some(&path)).expect("loads");
        assert_eq!(c.ingest.page_image_max_px, 300);
        assert!(c.ingest.render_images, "untouched keys keep their defaults");
        std::fs::write(&path, "[ingest]\npage_image_max = 300\n").expect("write");
        let err = ApplianceConfig::load(Some(&path)).expect_err("typo refused").to_string();
        assert!(err.contains("page_image_max"), "{err}");
    }
}
