//! Uploaded PDFs become ingest jobs. Each upload is checked by a PDF worker of its own, and a
//! few reader threads read the accepted ones (each document in its own worker), so a document
//! that makes PDFium hang holds up neither the next upload's check nor the other readers. One
//! thread encodes read documents for retrieval, and at start brings every stored document's
//! indexes up to date (a run killed while indexing leaves some behind), then runs the profiles'
//! enrich stages over each indexed document (resuming those a killed run left unfinished).
//! Each job's progress is visible at `GET /v1/jobs/{id}`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use super::Metrics;
use super::error::ApiError;
use super::metrics::JobLabels;
use crate::enrich::{EnrichWhen, enrich_all, enrich_stages, needs_enrich};
use crate::error::Classified;
use crate::ingest::{IngestError, IngestOptions, IngestOutcome, IngestProgress, PdfWorker, ingest_file};
use crate::pipeline::Services;
use crate::registry::PluginRegistry;
use crate::retrieval::{index_document_with, needs_index};
use crate::store::DocumentRecord;

/// Jobs kept for `GET /v1/jobs/{id}` after they end.
const KEPT_JOBS: usize = 1000;

/// Ending of an upload being written to uploads/.
const PART: &str = ".part";

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Reading,
    Indexing,
    Enriching,
    Done,
    Failed,
}

/// A job as clients see it.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    pub id: String,
    pub file_name: String,
    pub state: JobState,
    pub pages: u32,
    pub pages_read: u32,
    /// Pages of those that OCR read.
    pub pages_ocr: u32,
    pub pages_indexed: u32,
    /// Pages the profiles' enrich stages have read (over every stage).
    pub pages_enriched: u32,
    /// The document's id (known from the upload's bytes).
    pub document: String,
    pub error: Option<String>,
    /// What the user should know of a job that succeeded: an enrich stage that failed on it.
    pub notices: Vec<String>,
}

struct Job {
    view: Mutex<JobView>,
    progress: IngestProgress,
    pages_indexed: AtomicU32,
    pages_enriched: AtomicU32,
}

impl Job {
    fn view(&self) -> JobView {
        let mut v = crate::error::lock(&self.view).clone();
        if v.state == JobState::Reading {
            v.pages_read = self.progress.pages_read() as u32;
            v.pages_ocr = self.progress.pages_ocr() as u32;
            if v.pages == 0 {
                // A job resumed at start learns its page count when its worker opens it.
                v.pages = self.progress.pages_total() as u32;
            }
        }
        if v.state == JobState::Indexing {
            v.pages_indexed = self.pages_indexed.load(Ordering::Relaxed);
        }
        if v.state == JobState::Enriching {
            v.pages_enriched = self.pages_enriched.load(Ordering::Relaxed);
        }
        v
    }

    fn update(&self, f: impl FnOnce(&mut JobView)) {
        f(&mut crate::error::lock(&self.view));
    }
}

/// What an upload became.
pub enum Accepted {
    /// A new job.
    Job(JobView),
    /// The same bytes are already stored.
    Present(DocumentRecord),
}

/// An accepted upload waiting for a reader.
struct ReadJob {
    job: Arc<Job>,
    path: PathBuf,
}

/// A document waiting for its indexes; `job` is None for one found stale at start.
struct IndexJob {
    job: Option<Arc<Job>>,
    doc: DocumentRecord,
}

/// What the checking, reading and indexing threads share.
struct Shared {
    services: Arc<Services>,
    registry: Arc<PluginRegistry>,
    worker: PdfWorker,
    uploads_dir: PathBuf,
    options: IngestOptions,
    metrics: Arc<Metrics>,
    jobs: Mutex<HashMap<String, Arc<Job>>>,
    next_id: AtomicU64,
    reads: Mutex<mpsc::Sender<ReadJob>>,
    index: Mutex<mpsc::Sender<IndexJob>>,
}

/// The ingest workers and their jobs.
pub struct IngestJobs {
    shared: Arc<Shared>,
}

impl IngestJobs {
    /// Starts `parallel_reads` reader threads and the index thread; fails when the PDF worker
    /// cannot read a tiny PDF (PDFium missing, say).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        services: Arc<Services>,
        registry: Arc<PluginRegistry>,
        worker: PdfWorker,
        uploads_dir: PathBuf,
        options: IngestOptions,
        metrics: Arc<Metrics>,
        parallel_reads: usize,
    ) -> Result<IngestJobs, String> {
        worker.check().map_err(|e| format!("PDF reading does not work: {e}"))?;
        let (read_tx, read_rx) = mpsc::channel::<ReadJob>();
        let (index_tx, index_rx) = mpsc::channel::<IndexJob>();
        let shared = Arc::new(Shared {
            services,
            registry,
            worker,
            uploads_dir,
            options,
            metrics,
            jobs: Mutex::default(),
            next_id: AtomicU64::new(1),
            reads: Mutex::new(read_tx),
            index: Mutex::new(index_tx.clone()),
        });
        let read_rx = Arc::new(Mutex::new(read_rx));
        for n in 0..parallel_reads.max(1) {
            let (shared, read_rx) = (shared.clone(), read_rx.clone());
            std::thread::Builder::new()
                .name(format!("evident-read-{n}"))
                .spawn(move || {
                    loop {
                        // The lock is held only while waiting, so readers take turns at the queue.
                        let next = crate::error::lock(&read_rx).recv();
                        match next {
                            Ok(job) => shared.read(job),
                            Err(_) => return,
                        }
                    }
                })
                .map_err(|e| format!("cannot start a reader thread: {e}"))?;
        }
        let indexer = shared.clone();
        std::thread::Builder::new()
            .name("evident-index".into())
            .spawn(move || {
                for job in index_rx {
                    indexer.index(job);
                }
            })
            .map_err(|e| format!("cannot start the index thread: {e}"))?;
        queue_stale(&shared, &index_tx);
        shared.resume_uploads();
        Ok(IngestJobs { shared })
    }

    /// Checks an upload in a PDF worker of its own and queues it for reading; answers once the
    /// PDF has been opened (or refused).
    pub async fn submit(&self, bytes: Vec<u8>, file_name: String) -> Result<Accepted, ApiError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || shared.accept(bytes, file_name))
            .await
            .map_err(|_| ApiError::internal("the check of the upload stopped unexpectedly; try again"))?
    }

    /// A job by id.
    pub fn get(&self, id: &str) -> Option<JobView> {
        crate::error::lock(&self.shared.jobs).get(id).map(|j| j.view())
    }
}

/// Queues every stored document whose indexes are missing or out of date, or whose enrich
/// stages have work left.
fn queue_stale(shared: &Shared, index: &mpsc::Sender<IndexJob>) {
    let services = &shared.services;
    let (stages, _) = enrich_stages(&shared.registry);
    let docs = match services.store.documents() {
        Ok(docs) => docs,
        Err(e) => {
            warn!("cannot list the stored documents to bring their indexes up to date: {e}");
            return;
        }
    };
    for doc in docs {
        match needs_index(&services.store, &doc) {
            Ok(true) => {
                info!(doc = %doc.id, "indexing a document an earlier run left unindexed");
                let _ = index.send(IndexJob { job: None, doc });
            }
            Ok(false) if matches!(needs_enrich(&services.store, &doc, &stages, EnrichWhen::Ingest), Ok(true)) => {
                info!(doc = %doc.id, "enriching a document an earlier run left unfinished");
                let _ = index.send(IndexJob { job: None, doc });
            }
            Ok(false) => {}
            Err(e) => warn!(doc = %doc.id, "cannot read the index state: {e}"),
        }
    }
}

impl Shared {
    fn accept(&self, bytes: Vec<u8>, file_name: String) -> Result<Accepted, ApiError> {
        let name = safe_name(&file_name);
        let hash = hex(&Sha256::digest(&bytes));
        if let Some(doc) = self.services.store.find_by_hash(&hash)? {
            return Ok(Accepted::Present(doc));
        }
        let page_count = match self.worker.open(&bytes, self.options.password.as_deref()) {
            Ok(pdf) => pdf.page_count(),
            Err(e) => {
                self.metrics.jobs.get_or_create(&JobLabels { outcome: "refused".into() }).inc();
                return Err(ApiError::new(e.kind(), format!("{name} {e}")));
            }
        };
        let dir = self.uploads_dir.join(&hash[..16]);
        let path = dir.join(&name);
        // Written under another name and renamed, so a file in uploads/ is always whole: at
        // start, those not yet in the store are read again (an accepted upload is never lost).
        let part = dir.join(format!("{name}{PART}"));
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&part, &bytes))
            .and_then(|()| std::fs::rename(&part, &path))
            .map_err(|e| ApiError::internal(format!("the upload could not be saved in {}: {e}", dir.display())))?;
        let view = self.queue_read(name, &hash, page_count, path)?;
        Ok(Accepted::Job(view))
    }

    /// Makes a job for a saved upload and hands it to the readers.
    fn queue_read(&self, file_name: String, hash: &str, page_count: u32, path: PathBuf) -> Result<JobView, ApiError> {
        let id = format!("job-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let job = Arc::new(Job {
            view: Mutex::new(JobView {
                id: id.clone(),
                file_name,
                state: JobState::Reading,
                pages: page_count,
                pages_read: 0,
                pages_ocr: 0,
                pages_indexed: 0,
                pages_enriched: 0,
                document: crate::store::document_id(hash),
                error: None,
                notices: Vec::new(),
            }),
            progress: IngestProgress::hidden(),
            pages_indexed: AtomicU32::new(0),
            pages_enriched: AtomicU32::new(0),
        });
        {
            let mut all = crate::error::lock(&self.jobs);
            if all.len() >= KEPT_JOBS {
                all.retain(|_, j| !matches!(j.view().state, JobState::Done | JobState::Failed));
            }
            all.insert(id, job.clone());
        }
        let view = job.view();
        crate::error::lock(&self.reads).send(ReadJob { job, path }).map_err(|_| ApiError::internal("the PDF readers have stopped; restart the appliance"))?;
        Ok(view)
    }

    /// Queues the saved uploads a stopped server had accepted but not stored, and removes
    /// half-written ones (their uploads were never accepted).
    fn resume_uploads(&self) {
        let Ok(dirs) = std::fs::read_dir(&self.uploads_dir) else { return };
        // Each upload's folder is named by its document's id: a stored one needs no reading.
        let unstored = dirs.flatten().filter(|d| !matches!(self.services.store.document(&d.file_name().to_string_lossy()), Ok(Some(_))));
        for file in unstored.filter_map(|d| std::fs::read_dir(d.path()).ok()).flatten().flatten() {
            let path = file.path();
            let name = file.file_name().to_string_lossy().into_owned();
            if name.ends_with(PART) {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let Ok(bytes) = std::fs::read(&path) else { continue };
            let hash = hex(&Sha256::digest(&bytes));
            match self.services.store.find_by_hash(&hash) {
                Ok(Some(_)) => {}
                Ok(None) => {
                    info!(file = %path.display(), "reading an upload accepted before the server stopped");
                    if let Err(e) = self.queue_read(name, &hash, 0, path) {
                        warn!("cannot resume an upload: {}", e.message);
                    }
                }
                Err(e) => warn!("cannot check a saved upload against the store: {e}"),
            }
        }
    }

    fn read(&self, ReadJob { job, path }: ReadJob) {
        match ingest_file(&self.services.store, &self.worker, &path, &self.options, &job.progress) {
            Ok(IngestOutcome::Added { doc, ocr_pages, .. }) => {
                job.update(|v| {
                    v.state = JobState::Indexing;
                    v.pages = doc.page_count;
                    v.pages_read = doc.page_count;
                    v.pages_ocr = ocr_pages;
                });
                let _ = crate::error::lock(&self.index).send(IndexJob { job: Some(job), doc });
            }
            Ok(IngestOutcome::AlreadyPresent { doc }) => {
                job.update(|v| {
                    v.state = JobState::Indexing;
                    v.pages = doc.page_count;
                    v.pages_read = doc.page_count;
                });
                let _ = crate::error::lock(&self.index).send(IndexJob { job: Some(job), doc });
            }
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                if let Some(dir) = path.parent() {
                    let _ = std::fs::remove_dir(dir);
                }
                // The sentence names the file as it was uploaded, not where it was kept.
                let error = match e {
                    IngestError::Pdf { source, .. } => format!("{} {source}", job.view().file_name),
                    other => other.to_string(),
                };
                job.update(|v| {
                    v.state = JobState::Failed;
                    v.error = Some(error);
                });
                self.metrics.jobs.get_or_create(&JobLabels { outcome: "failed".into() }).inc();
            }
        }
    }

    fn index(&self, IndexJob { job, doc }: IndexJob) {
        let s = &self.services;
        let on_encoded = |n| {
            if let Some(job) = &job {
                job.pages_indexed.store(n, Ordering::Relaxed);
            }
        };
        let result = index_document_with(&s.store, &s.lexical, &s.encoder, &doc, s.token_pool_factor, &on_encoded);
        let notices = if result.is_ok() { self.enrich(job.as_deref(), &doc) } else { Vec::new() };
        let Some(job) = job else {
            if let Err(e) = result {
                warn!(doc = %doc.id, "the document could not be indexed: {e}");
            }
            return;
        };
        match result {
            Ok(_) => {
                job.update(|v| {
                    v.state = JobState::Done;
                    v.pages_indexed = doc.page_count;
                    v.notices = notices;
                });
                self.metrics.jobs.get_or_create(&JobLabels { outcome: "done".into() }).inc();
            }
            Err(e) => {
                // The document is stored and searchable by text; `evident index` can finish it.
                job.update(|v| {
                    v.state = JobState::Failed;
                    v.error = Some(format!("the document was stored but could not be indexed: {e}"));
                });
                self.metrics.jobs.get_or_create(&JobLabels { outcome: "failed".into() }).inc();
            }
        }
    }
}

impl Shared {
    /// Runs the profiles' enrich stages over an indexed document; a sentence for each stage
    /// that failed (the document stays stored and searchable).
    fn enrich(&self, job: Option<&Job>, doc: &DocumentRecord) -> Vec<String> {
        let (stages, problems) = enrich_stages(&self.registry);
        for problem in problems {
            warn!("{problem}");
        }
        if stages.is_empty() {
            return Vec::new();
        }
        if let Some(job) = job {
            job.update(|v| v.state = JobState::Enriching);
        }
        let on_page = |_: &crate::enrich::EnrichStage, _: u32, _: u32| {
            if let Some(job) = job {
                job.pages_enriched.fetch_add(1, Ordering::Relaxed);
            }
        };
        match enrich_all(&self.services, self.registry.runtime(), &stages, EnrichWhen::Ingest, doc, &on_page) {
            Ok(reports) => reports
                .into_iter()
                .filter_map(|r| r.failure)
                .inspect(|f| warn!(doc = %doc.id, "{f}"))
                .map(|f| format!("{f}; the document is stored and searchable"))
                .collect(),
            Err(e) => {
                warn!(doc = %doc.id, "enrich could not run: {e}");
                vec![format!("the document is stored and searchable, but its enrich stages could not run: {e}")]
            }
        }
    }
}

/// Where uploads are kept, inside the data directory.
pub fn uploads_dir(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("uploads")
}

/// Removes a document: its kept upload first (so that a restart cannot read it back in), then
/// its BM25 entries, then everything the store holds for it.
pub fn remove_document(
    store: &crate::store::Store,
    lexical: &crate::retrieval::LexicalIndex,
    data_dir: &std::path::Path,
    doc: &DocumentRecord,
) -> Result<(), String> {
    let kept = uploads_dir(data_dir).join(&doc.id);
    match std::fs::remove_dir_all(&kept) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("the kept upload {} cannot be removed: {e}", kept.display())),
    }
    lexical.remove_document(&doc.id).map_err(|e| e.to_string())?;
    store.remove(doc).map_err(|e| e.to_string())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A file name safe to keep on disk: its last path component, with nothing odd in it.
fn safe_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or("").trim();
    let cleaned: String = base.chars().map(|c| if c.is_alphanumeric() || "._- ()".contains(c) { c } else { '_' }).collect();
    let cleaned = cleaned.trim_start_matches('.').to_string();
    let cleaned = if cleaned.is_empty() { "upload.pdf".to_string() } else { cleaned };
    if cleaned.to_ascii_lowercase().ends_with(".pdf") { cleaned } else { format!("{cleaned}.pdf") }
}

#[cfg(test)]
mod tests {
    use super::safe_name;

    #[test]
    fn upload_names_stay_inside_their_folder() {
        assert_eq!(safe_name("../../etc/passwd"), "passwd.pdf");
        assert_eq!(safe_name("C:\\x\\Report 2024.PDF"), "Report 2024.PDF");
        assert_eq!(safe_name(".hidden.pdf"), "hidden.pdf");
        assert_eq!(safe_name(""), "upload.pdf");
        assert_eq!(safe_name("a;b|c.pdf"), "a_b_c.pdf");
    }
}
