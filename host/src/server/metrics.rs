//! `GET /metrics`: Prometheus text for requests, pipeline runs, load shedding, ingest jobs,
//! the store and the process's memory.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::{ApiError, AppState};

/// Labels of one HTTP request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: String,
    pub route: String,
    pub status: u16,
}

/// Labels of an ingest job's end.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    pub outcome: String,
}

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub request_seconds: Histogram,
    pub run_seconds: Histogram,
    pub running: Gauge,
    pub queued: Gauge,
    pub rejected: Counter,
    pub jobs: Family<JobLabels, Counter>,
    documents: Gauge,
    pages: Gauge,
    resident_bytes: Gauge,
}

impl Metrics {
    /// All metrics at zero, registered.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("evident");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register("http_requests", "HTTP requests answered, by route and status", requests.clone());
        let request_seconds = Histogram::new(exponential_buckets(0.001, 4.0, 10));
        registry.register("http_request_duration_seconds", "Time to answer an HTTP request", request_seconds.clone());
        let run_seconds = Histogram::new(exponential_buckets(0.05, 2.0, 14));
        registry.register("pipeline_run_duration_seconds", "Time a question held a pipeline slot", run_seconds.clone());
        let running = Gauge::default();
        registry.register("pipeline_running", "Questions being answered now", running.clone());
        let queued = Gauge::default();
        registry.register("pipeline_queued", "Questions waiting for a pipeline slot", queued.clone());
        let rejected = Counter::default();
        registry.register("pipeline_rejected", "Questions turned away with 429 because the queue was full", rejected.clone());
        let jobs = Family::<JobLabels, Counter>::default();
        registry.register("ingest_jobs", "Ingest jobs finished, by outcome", jobs.clone());
        let documents = Gauge::default();
        registry.register("documents", "Documents in the store", documents.clone());
        let pages = Gauge::default();
        registry.register("pages", "Pages in the store", pages.clone());
        let resident_bytes = Gauge::default();
        registry.register("process_resident_memory_bytes", "Resident memory of the server process", resident_bytes.clone());
        Metrics { registry, requests, request_seconds, run_seconds, running, queued, rejected, jobs, documents, pages, resident_bytes }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Resident memory of this process in bytes (Linux), from /proc/self/statm.
pub fn resident_bytes() -> Option<i64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: i64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * page_size as i64)
}

/// Counts every request by its route (not its raw path, so ids do not explode the labels).
pub async fn count_requests(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().to_string();
    let route = request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string()).unwrap_or_else(|| "unmatched".into());
    let response = next.run(request).await;
    state.metrics.requests.get_or_create(&RequestLabels { method, route, status: response.status().as_u16() }).inc();
    state.metrics.request_seconds.observe(started.elapsed().as_secs_f64());
    response
}

/// `GET /metrics`
pub async fn scrape(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let docs = state.store.documents()?;
    state.metrics.documents.set(docs.len() as i64);
    state.metrics.pages.set(docs.iter().map(|d| i64::from(d.page_count)).sum());
    if let Some(bytes) = resident_bytes() {
        state.metrics.resident_bytes.set(bytes);
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &state.metrics.registry)
        .map_err(|e| ApiError::internal(format!("metrics could not be written: {e}")))?;
    Ok(([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response())
}
