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

/// The arithmetic of a network's matrix products on the CPU (the text encoder's, OCR's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CpuPrecision {
    /// 32-bit floats, as the model was trained.
    F32,
    /// Weights and inputs rounded to 8-bit integers, summed exactly (AVX-512 VNNI; f32 on a
    /// CPU without it).
    Int8,
}

/// Which pages ingest reads with OCR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OcrMode {
    /// Pages without a text layer, and pictures that cover much of a page that has one.
    Auto,
    /// Every page; words the text layer already has are not repeated.
    Always,
    /// None.
    Never,
}

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplianceConfig {
    pub data_dir: PathBuf,
    pub models_dir: PathBuf,
    pub pdfium_library: PathBuf,
    pub compute: ComputeConfig,
    pub retrieval: RetrievalConfig,
    pub server: ServerConfig,
    pub ingest: IngestConfig,
    pub generator: GeneratorConfig,
    pub plugins: PluginsConfig,
    pub pipeline: PipelineLimits,
}

/// `[pipeline]`: what one request's stages may ask of the host.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineLimits {
    /// Most tokens one model call of a stage may ask for; a larger request gets this many.
    pub max_tokens_per_call: u32,
    /// Most pages one search of a stage may ask for.
    pub max_pages_per_search: u32,
    /// Lines of stage log kept per request.
    pub log_lines: usize,
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
    pub limits: StageLimits,
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
    /// A thinking model beside the answering one: "" for none, "openai:NAME" for model NAME
    /// on the `[generator.openai]` server, or an embedded model as `model` names one.
    pub thinking_model: String,
    pub openai: RemoteConfig,
}

/// `[generator.openai]` in the configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteConfig {
    /// Up to and including `/v1`, e.g. `http://10.0.0.5:8000/v1`.
    pub base_url: String,
    pub model: String,
    /// Sent as a bearer token when not empty.
    pub api_key: String,
    /// Whether the model takes images (page images go along as data URLs).
    pub images: bool,
    pub timeout_s: u64,
    /// Further attempts after a failed connection, a timeout, a 429 or a 5xx.
    pub retries: u32,
}

/// How much a stage call may take. Fuel bounds the component's own work (about one unit per
/// WebAssembly instruction); the deadline bounds the whole call, the models it asks for included.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageLimits {
    /// Linear memory a component may grow to, in MiB.
    pub memory_mib: u64,
    /// Fuel units per call.
    pub fuel: u64,
    /// Wall-clock seconds per question stage call.
    pub timeout_s: u64,
    /// Wall-clock seconds per enrich call (one page, or the document step): enrichment runs at
    /// ingest and `index`, outside any question, so it is not bounded by the request timeout.
    pub enrich_timeout_s: u64,
}

/// `[compute]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeConfig {
    pub backend: ComputeBackend,
    /// The encoder's products on the CPU (a GPU runs f32).
    pub encoder_precision: CpuPrecision,
    /// OCR's 1x1 convolutions and constant products on the CPU (a GPU runs f32).
    pub ocr_precision: CpuPrecision,
    /// Where OCR's networks run: the native CPU ones unless a GPU is asked for by name.
    pub ocr_backend: ComputeBackend,
    /// Memory for page vectors kept between questions, in MiB (0: read them for every search).
    pub vector_cache_mib: u64,
    /// Memory for enrich artifacts kept between questions, in MiB (0: read them for every call).
    pub artifact_cache_mib: u64,
    /// CPU MaxSim searches over at least this many pages first pick candidates by centroid
    /// codes (0: always exact).
    pub candidate_stage_pages: usize,
    /// Pages each question scores exactly after the candidate stage.
    pub candidates_per_question: usize,
    /// Centroids of the candidate stage's codebook.
    pub centroids: usize,
}

/// `[retrieval]`: how pages are ranked.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrievalConfig {
    /// In a search over several documents, weight of a page's document (a soft maximum of its
    /// best pages' scores) against the page's own score; 0 ranks pages alone.
    pub document_weight: f32,
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
    /// Longest question, in characters.
    pub max_question_chars: usize,
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
    /// Each page's token vectors are clustered into one per this many (1: all kept).
    pub token_pool_factor: u32,
    /// Which pages are read with OCR.
    pub ocr: OcrMode,
    /// Longer side, in pixels, of the image of a page (or picture) that OCR reads.
    pub ocr_max_px: u32,
    /// Longer side, in pixels, of the image OCR's text detector sees (lines are read from the
    /// full image).
    pub ocr_detect_px: u32,
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
        let name = file.map(|p| p.display().to_string()).unwrap_or_else(|| "embedded defaults".into());
        config.check().map_err(|message| ConfigError::Invalid { path: name, message })?;
        let home = appliance_home();
        for path in [&mut config.data_dir, &mut config.models_dir, &mut config.pdfium_library, &mut config.plugins.dir, &mut config.plugins.profiles_dir] {
            if path.is_relative() {
                *path = home.join(&*path);
            }
        }
        Ok(config)
    }

    /// Values that parse but cannot work, each refused with what to set instead.
    fn check(&self) -> Result<(), String> {
        let i = &self.ingest;
        let at_least_one = [
            ("server.max_running", self.server.max_running as u64),
            ("compute.candidates_per_question", self.compute.candidates_per_question as u64),
            ("server.request_timeout_s", self.server.request_timeout_s),
            ("ingest.parallel_reads", i.parallel_reads as u64),
            ("ingest.open_timeout_s", i.open_timeout_s),
            ("ingest.page_timeout_s", i.page_timeout_s),
            ("ingest.document_timeout_s", i.document_timeout_s),
            ("ingest.max_pages", u64::from(i.max_pages)),
            ("plugins.limits.timeout_s", self.plugins.limits.timeout_s),
            ("plugins.limits.enrich_timeout_s", self.plugins.limits.enrich_timeout_s),
            ("plugins.limits.memory_mib", self.plugins.limits.memory_mib),
            ("server.max_question_chars", self.server.max_question_chars as u64),
            ("pipeline.max_tokens_per_call", u64::from(self.pipeline.max_tokens_per_call)),
            ("pipeline.max_pages_per_search", u64::from(self.pipeline.max_pages_per_search)),
        ];
        if let Some((key, _)) = at_least_one.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{key} is 0; it must be at least 1"));
        }
        if i.page_timeout_s > i.document_timeout_s {
            return Err(format!(
                "ingest.page_timeout_s ({}) is longer than ingest.document_timeout_s ({}); a page is part of its document",
                i.page_timeout_s, i.document_timeout_s
            ));
        }
        if self.plugins.limits.timeout_s > self.server.request_timeout_s {
            return Err(format!(
                "plugins.limits.timeout_s ({}) is longer than server.request_timeout_s ({}); a stage runs inside a question, so raise the request timeout or lower the stage's",
                self.plugins.limits.timeout_s, self.server.request_timeout_s
            ));
        }
        if i.worker_memory_mib < 256 {
            return Err(format!("ingest.worker_memory_mib is {}; PDFium needs at least 256", i.worker_memory_mib));
        }
        if !(0.0..=1.0).contains(&self.retrieval.document_weight) {
            return Err(format!("retrieval.document_weight is {}; it must lie between 0 (pages alone) and 1", self.retrieval.document_weight));
        }
        if !(1..=65536).contains(&self.compute.centroids) {
            return Err(format!("compute.centroids is {}; it must be between 1 and 65536", self.compute.centroids));
        }
        if !(1..=8).contains(&i.token_pool_factor) {
            return Err(format!("ingest.token_pool_factor is {}; it must be between 1 (no pooling) and 8", i.token_pool_factor));
        }
        if !(320..=8000).contains(&i.ocr_max_px) {
            return Err(format!("ingest.ocr_max_px is {}; it must be between 320 and 8000", i.ocr_max_px));
        }
        if !(320..=4000).contains(&i.ocr_detect_px) {
            return Err(format!("ingest.ocr_detect_px is {}; it must be between 320 and 4000", i.ocr_detect_px));
        }
        if !(16..=8192).contains(&i.page_image_max_px) {
            return Err(format!("ingest.page_image_max_px is {}; it must be between 16 and 8192", i.page_image_max_px));
        }
        Ok(())
    }

    fn load_unresolved(file: Option<&Path>) -> Result<ApplianceConfig, ConfigError> {
        let mut table = parse("embedded defaults", EMBEDDED_DEFAULTS)?;
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
            merge(&mut table, parse(&path.display().to_string(), &text)?);
        }
        let name = file.map(|p| p.display().to_string()).unwrap_or_else(|| "embedded defaults".into());
        table.try_into().map_err(|e: toml::de::Error| ConfigError::Invalid { path: name, message: e.message().to_string() })
    }
}

fn parse(name: &str, text: &str) -> Result<toml::Table, ConfigError> {
    text.parse::<toml::Table>().map_err(|e| ConfigError::Invalid { path: name.to_string(), message: e.message().to_string() })
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
    fn values_that_cannot_work_are_refused_with_the_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.toml");
        for (text, key) in [
            ("[server]\nmax_running = 0\n", "server.max_running is 0"),
            ("[ingest]\nparallel_reads = 0\n", "ingest.parallel_reads is 0"),
            ("[ingest]\npage_timeout_s = 100\ndocument_timeout_s = 50\n", "ingest.page_timeout_s (100) is longer"),
            ("[ingest]\nworker_memory_mib = 16\n", "ingest.worker_memory_mib is 16"),
            (
                "[server]\nrequest_timeout_s = 60\n[plugins.limits]\ntimeout_s = 61\n",
                "plugins.limits.timeout_s (61) is longer than server.request_timeout_s (60)",
            ),
            ("[ingest]\npage_image_max_px = 100000\n", "ingest.page_image_max_px is 100000"),
            ("[ingest]\ntoken_pool_factor = 0\n", "ingest.token_pool_factor is 0"),
            ("[compute]\ncentroids = 70000\n", "compute.centroids is 70000"),
            ("[retrieval]\ndocument_weight = 1.5\n", "retrieval.document_weight is 1.5"),
            ("[retrieval]\ndocument_weight = -0.1\n", "retrieval.document_weight is -0.1"),
            ("[ingest]\ntoken_pool_factor = 9\n", "ingest.token_pool_factor is 9"),
        ] {
            std::fs::write(&path, text).expect("write");
            let err = ApplianceConfig::load(Some(&path)).expect_err(text).to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
    }

    #[test]
    fn readme_documents_every_key_of_the_defaults() {
        fn keys(table: &toml::Table, prefix: &str, out: &mut Vec<String>) {
            for (k, v) in table {
                match v {
                    toml::Value::Table(t) => keys(t, &format!("{prefix}{k}."), out),
                    _ => out.push(format!("{prefix}{k}")),
                }
            }
        }
        let mut defaults = Vec::new();
        keys(&EMBEDDED_DEFAULTS.parse::<toml::Table>().expect("defaults"), "", &mut defaults);
        let readme = include_str!("../../README.md");
        let section = readme.split("## Configuration").nth(1).and_then(|s| s.split("\n## ").next()).expect("a Configuration section");
        let documented: Vec<String> = section.lines().filter_map(|l| l.strip_prefix("| `")).filter_map(|l| l.split('`').next()).map(str::to_string).collect();
        defaults.sort();
        let mut sorted = documented.clone();
        sorted.sort();
        assert_eq!(defaults, sorted, "README's configuration table and appliance.toml name the same keys");
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
