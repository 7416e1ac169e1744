//! Subcommands of the `evident` binary.

pub mod bench;
pub mod docs;
pub mod ingest;

use std::path::{Path, PathBuf};

use anyhow::Result;
use evident::config::ApplianceConfig;
use evident::ingest::PdfReader;
use evident::store::Store;

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

    /// Binds PDFium.
    pub fn pdf_reader(&self) -> Result<PdfReader> {
        Ok(PdfReader::new(&self.config.pdfium_library)?)
    }
}

/// Logs go to stderr, filtered by EVIDENT_LOG (default: warnings).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("EVIDENT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
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
