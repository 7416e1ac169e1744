//! Subcommands of the `evident` binary.

pub mod ask;
pub mod bench;
pub mod bench_generate;
pub mod bench_http;
pub mod bench_maxsim;
pub mod bench_ocr;
pub mod bench_scale;
pub mod bench_search;
pub mod bench_stages;
pub mod check;
pub mod docs;
pub mod enrich;
pub mod eval;
pub mod eval_answers;
pub mod generate;
pub mod ingest;
pub mod plugins;
pub mod search;
pub mod serve;

use std::path::{Path, PathBuf};

use anyhow::Result;
use evident::config::{ApplianceConfig, ComputeBackend, GeneratorBackend};
use evident::generate::{EmbeddedGenerator, Generator, RemoteGenerator, embedded_model_path};
use evident::ingest::{PdfReader, PdfWorker, ReadLimits};
use evident::models::{TextEncoder, burn_device};
use evident::plugins::StageRuntime;
use evident::registry::PluginRegistry;
use evident::retrieval::{LexicalIndex, MaxSimBackend, lexical_dir};
use evident::store::Store;
use evident_kernels::{AdapterChoice, GpuContext, MaxSimCpu, MaxSimKernel};

/// What every subcommand gets: the configuration with flags applied.
pub struct Context {
    pub config: ApplianceConfig,
}

impl Context {
    /// Loads the configuration and applies the global flags.
    pub fn new(config_file: Option<&Path>, data_dir: Option<PathBuf>) -> Result<Context> {
        let mut config = ApplianceConfig::load(config_file)?;
        if let Some(dir) = data_dir {
            config.data_dir = dir;
        }
        Ok(Context { config })
    }

    /// Opens the store.
    pub fn store(&self) -> Result<Store> {
        Ok(Store::open(&self.config.data_dir)?)
    }

    /// Opens the lexical index beside the store.
    pub fn lexical(&self) -> Result<LexicalIndex> {
        Ok(LexicalIndex::open(&lexical_dir(&self.config.data_dir))?)
    }

    /// Loads the embedded text encoder on the configured backend: on wgpu its attention runs
    /// through the WGSL kernel, on the CPU its products in `compute.encoder_precision`.
    pub fn encoder(&self) -> Result<TextEncoder> {
        let compute = burn_device(self.config.compute.backend);
        let dir = self.config.models_dir.join("all-minilm-l6-v2");
        let encoder = if compute.wgpu {
            TextEncoder::load_with_attention(&dir, &compute.device, Box::new(evident::models::wgsl_attention))?
        } else {
            let wanted = self.config.compute.encoder_precision;
            let encoder = TextEncoder::load_native(&dir, wanted)?;
            if encoder.precision() != wanted {
                tracing::warn!("this CPU has no AVX-512 VNNI, so the encoder runs in f32 rather than int8");
            }
            encoder
        };
        Ok(encoder)
    }

    /// The MaxSim scorer for the configured backend: the WGSL kernel on a real GPU (or any
    /// wgpu adapter when `wgpu` is asked for), else the native CPU path.
    pub fn maxsim(&self) -> Result<MaxSimBackend> {
        let gpu = match self.config.compute.backend {
            ComputeBackend::Cpu => None,
            ComputeBackend::Auto => GpuContext::new(AdapterChoice::Hardware).ok(),
            ComputeBackend::Wgpu => Some(GpuContext::new(AdapterChoice::Any)?),
        };
        Ok(match gpu {
            Some(ctx) => MaxSimBackend::Gpu(MaxSimKernel::new(ctx)?),
            None => MaxSimBackend::Cpu(MaxSimCpu::default()),
        })
    }

    /// The configured generator: the embedded GGUF model or an OpenAI-compatible server.
    pub fn generator(&self) -> Result<Box<dyn Generator>> {
        Ok(match self.config.generator.backend {
            GeneratorBackend::Openai => Box::new(RemoteGenerator::new(self.config.generator.openai.clone())),
            GeneratorBackend::Embedded => {
                let compute = burn_device(self.config.compute.backend);
                let path = embedded_model_path(&self.config.models_dir, &self.config.generator.model)?;
                Box::new(EmbeddedGenerator::load(&path, &compute)?)
            }
        })
    }

    /// The thinking model, when one is configured (`generator.thinking_model`).
    pub fn thinking_generator(&self) -> Result<Option<Box<dyn Generator>>> {
        let name = self.config.generator.thinking_model.trim();
        if name.is_empty() {
            return Ok(None);
        }
        Ok(Some(match name.strip_prefix("openai:") {
            Some(model) => Box::new(RemoteGenerator::new(evident::config::RemoteConfig { model: model.to_string(), ..self.config.generator.openai.clone() })),
            None => {
                let compute = burn_device(self.config.compute.backend);
                Box::new(EmbeddedGenerator::load(&embedded_model_path(&self.config.models_dir, name)?, &compute)?)
            }
        }))
    }

    /// The wasmtime runtime for stage components, with the configured limits.
    pub fn stage_runtime(&self) -> Result<StageRuntime> {
        Ok(StageRuntime::new(self.config.plugins.limits)?)
    }

    /// The plugin registry over `store`, with the configured runtime limits.
    pub fn registry(&self, store: std::sync::Arc<Store>) -> Result<PluginRegistry> {
        let runtime = std::sync::Arc::new(self.stage_runtime()?);
        let p = &self.config.plugins;
        Ok(PluginRegistry::new(runtime, store, p.dir.clone(), p.profiles_dir.clone()))
    }

    /// What a pipeline run uses over `store`: the lexical index, encoder, MaxSim scorer and
    /// generator, loaded once.
    pub fn services(&self, store: std::sync::Arc<Store>) -> Result<std::sync::Arc<evident::pipeline::Services>> {
        let g = &self.config.generator;
        Ok(std::sync::Arc::new(evident::pipeline::Services {
            store,
            lexical: std::sync::Arc::new(self.lexical()?),
            encoder: std::sync::Arc::new(self.encoder()?),
            maxsim: std::sync::Arc::new(self.maxsim()?),
            vectors: std::sync::Arc::new(evident::retrieval::PageVectorCache::new(self.config.compute.vector_cache_mib)),
            artifacts: std::sync::Arc::new(evident::retrieval::ArtifactCache::new(self.config.compute.artifact_cache_mib)),
            token_pool_factor: self.config.ingest.token_pool_factor,
            candidates: std::sync::Arc::new(evident::retrieval::CandidateStage::new(evident::retrieval::CandidateSettings::of(&self.config.compute))),
            generator: std::sync::Arc::from(self.generator()?),
            thinking: self.thinking_generator()?.map(std::sync::Arc::from),
            generator_images: g.backend == GeneratorBackend::Openai && g.openai.images,
            prompt_cache_bytes: (g.prompt_cache_mib as usize) << 20,
            limits: self.config.pipeline,
            document_weight: self.config.retrieval.document_weight,
            // Without PDFium, crops come from the stored page images.
            pdf: self.pdf_worker().ok(),
        }))
    }

    /// Binds PDFium in this process (benchmarks of PDFium itself).
    pub fn pdf_reader(&self) -> Result<PdfReader> {
        Ok(PdfReader::new(&self.config.pdfium_library)?)
    }

    /// PDF workers (this binary as `evident pdf-worker`) under the `[ingest]` limits, checked
    /// once on a tiny built-in PDF.
    pub fn pdf_worker(&self) -> Result<PdfWorker> {
        let limits = ReadLimits::from_config(&self.config.ingest);
        let worker = PdfWorker::current_exe(self.config.pdfium_library.clone(), limits)?;
        worker.check().map_err(|e| anyhow::anyhow!("PDF reading does not work: {e}"))?;
        Ok(worker)
    }
}

pub use evident::eval::metrics::percentile;

/// A benchmark's reference script (`benches/<name>`, the peer measured beside Evident), found
/// in the appliance's home wherever `evident bench` runs from.
pub fn reference_script(name: &str) -> Result<PathBuf> {
    let path = evident::config::appliance_home().join("benches").join(name);
    anyhow::ensure!(
        path.is_file(),
        "the reference script {} is missing; run from a checkout or a release folder that has benches/, or set EVIDENT_HOME to one",
        path.display()
    );
    Ok(path)
}

/// Logs go to stderr, filtered by EVIDENT_LOG (default: warnings, without the GPU driver layer's
/// chatter about backends this box does not have).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("EVIDENT_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,wgpu_hal=off"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}

/// Dies quietly on a closed pipe (`evident docs | head`) as command-line tools do, instead of
/// panicking on the failed write.
pub fn restore_sigpipe() {
    // SAFETY: resetting a signal disposition to its default at start-up, before any thread.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Keeps the model's large intermediate buffers on the heap: by default glibc maps and unmaps
/// every buffer over 32 MiB and hands freed memory back at once, so each forward pass pays for
/// fresh zeroed pages again (about a seventh of the encoder's time on the CPU).
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only tunes the allocator; called at start-up, before any thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}

/// Mesa's Vulkan drivers want a private runtime directory and complain on every start without
/// one; give them one when the environment has none.
pub fn ensure_runtime_dir() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| std::path::Path::new(&d).is_dir()) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("evident-runtime-{}", unsafe { libc::getuid() }));
    if std::fs::create_dir_all(&dir).is_ok() {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        // SAFETY: called first thing in main, before any other thread exists.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
    }
}
