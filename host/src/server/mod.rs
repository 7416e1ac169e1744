//! `evident serve`: the appliance on the network. Routes are grouped by the role they need
//! (none, read, admin); pipeline runs go through a bounded gate and run on blocking threads,
//! never on the async workers.

mod admin;
mod auth;
mod chat;
mod documents;
mod error;
mod gate;
mod jobs;
mod metrics;
mod query;
mod web;

pub use error::ApiError;
pub use gate::RunGate;
pub use jobs::{IngestJobs, JobView, remove_document, uploads_dir};
pub use metrics::Metrics;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post, put};
use thiserror::Error;
use tokio::net::TcpListener;

use crate::config::{ApplianceConfig, Role};
use crate::ingest::{IngestOptions, OcrSettings, PdfWorker, ReadLimits};
use crate::pipeline::Services;
use crate::registry::PluginRegistry;
use crate::store::Store;

/// Why the server could not start or stopped.
#[derive(Debug, Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}; is another server using it? Pick another with --addr")]
    Bind { addr: String, source: std::io::Error },
    #[error("the server stopped: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Setup(String),
}

/// Everything a request handler reaches.
pub struct AppState {
    pub config: ApplianceConfig,
    pub store: Arc<Store>,
    pub services: Arc<Services>,
    pub registry: Arc<PluginRegistry>,
    /// Bearer tokens and their roles.
    pub tokens: Vec<(String, Role)>,
    pub gate: Arc<RunGate>,
    pub jobs: Arc<IngestJobs>,
    pub metrics: Arc<Metrics>,
}

impl AppState {
    /// The state of a server over `services`, with the ingest workers started.
    pub fn new(config: ApplianceConfig, services: Arc<Services>, registry: Arc<PluginRegistry>, tokens: Vec<(String, Role)>) -> Result<AppState, ServeError> {
        let s = &config.server;
        let metrics = Arc::new(Metrics::new());
        let gate = Arc::new(RunGate::new(s.max_running.max(1), s.max_queued, metrics.clone()));
        let ocr = OcrSettings::load(&config, config.ingest.ocr).map_err(|e| ServeError::Setup(format!("OCR cannot start: {e}")))?;
        let options = IngestOptions { password: None, image_max_px: config.ingest.render_images.then_some(config.ingest.page_image_max_px), ocr };
        let limits = ReadLimits::from_config(&config.ingest);
        let worker = PdfWorker::current_exe(config.pdfium_library.clone(), limits).map_err(|e| ServeError::Setup(format!("PDF reading does not work: {e}")))?;
        let jobs = IngestJobs::start(
            services.clone(),
            registry.clone(),
            worker,
            uploads_dir(&config.data_dir),
            options,
            metrics.clone(),
            config.ingest.parallel_reads,
        )
        .map_err(ServeError::Setup)?;
        Ok(AppState { store: services.store.clone(), config, services, registry, tokens, gate, jobs: Arc::new(jobs), metrics })
    }
}

/// Every route, with its role, limits and metrics.
pub fn router(state: Arc<AppState>) -> Router {
    let body_limit = DefaultBodyLimit::max((state.config.server.max_body_kib as usize).saturating_mul(1024));
    let upload_limit = DefaultBodyLimit::max((state.config.server.max_upload_mib as usize).saturating_mul(1024 * 1024));

    let read = Router::new()
        .route("/v1/query", post(query::query))
        .route("/v1/chat/completions", post(chat::completions))
        .route("/v1/models", get(chat::models))
        .route("/v1/documents", get(documents::list))
        .route("/v1/documents/{id}", get(documents::show))
        .route("/v1/documents/{id}/pages/{n}/image", get(documents::page_image))
        .route("/v1/jobs/{id}", get(documents::job))
        .route("/v1/plugins", get(admin::list_plugins))
        .route("/v1/profiles", get(admin::list_profiles))
        .layer(body_limit)
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_read));

    let admin = Router::new()
        .route("/v1/documents", post(documents::upload).layer(upload_limit))
        .route("/v1/documents/{id}", axum::routing::delete(documents::remove))
        .route("/v1/plugins", post(admin::install_plugin).layer(upload_limit))
        .route("/v1/profiles/{name}/stages/{stage}", put(admin::swap_stage).layer(body_limit))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_admin));

    let open = Router::new()
        .route("/healthz", get(|| async { axum::Json(serde_json::json!({ "status": "ok" })) }))
        .route("/metrics", get(metrics::scrape).route_layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_read)))
        .route("/openapi.json", get(web::openapi).route_layer(axum::middleware::from_fn_with_state(state.clone(), auth::require_read)))
        .route("/", get(web::index))
        .route("/app.js", get(web::script))
        .route("/style.css", get(web::style));

    // Admin routes first: where a path has both, the method decides and each keeps its role.
    admin
        .merge(read)
        .merge(open)
        .fallback(|| async { ApiError::not_found("there is no such endpoint; GET /openapi.json lists them") })
        .layer(axum::middleware::from_fn_with_state(state.clone(), metrics::count_requests))
        .with_state(state)
}

/// Binds `addr` (port 0 picks a free one) and reports the address bound.
pub async fn bind(addr: &str) -> Result<(TcpListener, SocketAddr), ServeError> {
    let listener = TcpListener::bind(addr).await.map_err(|source| ServeError::Bind { addr: addr.to_string(), source })?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

/// Serves until SIGINT or SIGTERM, then lets running requests finish.
pub async fn serve(listener: TcpListener, state: Arc<AppState>) -> Result<(), ServeError> {
    axum::serve(listener, router(state)).with_graceful_shutdown(shutdown_signal()).await?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down: no new connections; running requests finish first");
    eprintln!("evident: shutting down after the running requests finish");
}
