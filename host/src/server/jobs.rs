//! Uploaded PDFs become ingest jobs. One thread owns PDFium (it is not thread-safe) and reads
//! pages; another encodes them for retrieval, so a long index does not hold up the next
//! upload's check. Each job's progress is visible at `GET /v1/jobs/{id}`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

use super::Metrics;
use super::metrics::JobLabels;
use crate::ingest::{IngestOptions, IngestOutcome, IngestProgress, PdfReader, ingest_file};
use crate::pipeline::Services;
use crate::retrieval::index_document_with;
use crate::store::DocumentRecord;

/// Jobs kept for `GET /v1/jobs/{id}` after they end.
const KEPT_JOBS: usize = 1000;

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Reading,
    Indexing,
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
    pub pages_indexed: u32,
    /// The document's id (known from the upload's bytes).
    pub document: String,
    pub error: Option<String>,
}

struct Job {
    view: Mutex<JobView>,
    progress: IngestProgress,
    pages_indexed: AtomicU32,
}

impl Job {
    fn view(&self) -> JobView {
        let mut v = self.view.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if v.state == JobState::Reading {
            v.pages_read = self.progress.pages_read() as u32;
        }
        if v.state == JobState::Indexing {
            v.pages_indexed = self.pages_indexed.load(Ordering::Relaxed);
        }
        v
    }

    fn update(&self, f: impl FnOnce(&mut JobView)) {
        f(&mut self.view.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

/// What an upload became.
pub enum Accepted {
    /// A new job.
    Job(JobView),
    /// The same bytes are already stored.
    Present(DocumentRecord),
}

struct Upload {
    bytes: Vec<u8>,
    file_name: String,
    reply: oneshot::Sender<Result<Accepted, String>>,
}

/// The ingest workers and their jobs.
pub struct IngestJobs {
    uploads: Mutex<mpsc::Sender<Upload>>,
    jobs: Arc<Mutex<HashMap<String, Arc<Job>>>>,
}

impl IngestJobs {
    /// Starts the workers; fails when PDFium cannot be loaded.
    pub fn start(services: Arc<Services>, pdfium: &Path, uploads_dir: PathBuf, options: IngestOptions, metrics: Arc<Metrics>) -> Result<IngestJobs, String> {
        let (tx, rx) = mpsc::channel::<Upload>();
        let (index_tx, index_rx) = mpsc::channel::<(Arc<Job>, DocumentRecord)>();
        let jobs: Arc<Mutex<HashMap<String, Arc<Job>>>> = Arc::default();
        let pdfium = pdfium.to_path_buf();
        let reader_jobs = jobs.clone();
        let reader_services = services.clone();
        let reader_metrics = metrics.clone();
        // PDFium is bound on its thread; a missing library stops the server at start, not at the first upload.
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<(), String>>(1);
        std::thread::Builder::new()
            .name("evident-ingest".into())
            .spawn(move || {
                let reader = match PdfReader::new(&pdfium) {
                    Ok(r) => {
                        let _ = ready_tx.send(Ok(()));
                        r
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let next_id = AtomicU64::new(1);
                for upload in rx {
                    read_upload(&reader, &reader_services, &uploads_dir, &options, &reader_jobs, &next_id, upload, &index_tx, &reader_metrics);
                }
            })
            .map_err(|e| format!("cannot start the ingest thread: {e}"))?;
        ready_rx.recv().map_err(|_| "the ingest thread stopped at start".to_string())??;
        std::thread::Builder::new()
            .name("evident-index".into())
            .spawn(move || {
                for (job, doc) in index_rx {
                    let s = &services;
                    let result = index_document_with(&s.store, &s.lexical, &s.encoder, &doc, &|n| job.pages_indexed.store(n, Ordering::Relaxed));
                    match result {
                        Ok(_) => {
                            job.update(|v| {
                                v.state = JobState::Done;
                                v.pages_indexed = doc.page_count;
                            });
                            metrics.jobs.get_or_create(&JobLabels { outcome: "done".into() }).inc();
                        }
                        Err(e) => {
                            // The document is stored and searchable by text; `evident index` can finish it.
                            job.update(|v| {
                                v.state = JobState::Failed;
                                v.error = Some(format!("the document was stored but could not be indexed: {e}"));
                            });
                            metrics.jobs.get_or_create(&JobLabels { outcome: "failed".into() }).inc();
                        }
                    }
                }
            })
            .map_err(|e| format!("cannot start the index thread: {e}"))?;
        Ok(IngestJobs { uploads: Mutex::new(tx), jobs })
    }

    /// Hands an upload to the workers; answers once the PDF has been opened (or refused).
    pub async fn submit(&self, bytes: Vec<u8>, file_name: String) -> Result<Accepted, String> {
        let (reply, answer) = oneshot::channel();
        self.uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(Upload { bytes, file_name, reply })
            .map_err(|_| "the ingest worker has stopped; restart the appliance".to_string())?;
        answer.await.map_err(|_| "the ingest worker stopped while reading the upload".to_string())?
    }

    /// A job by id.
    pub fn get(&self, id: &str) -> Option<JobView> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).get(id).map(|j| j.view())
    }
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

#[allow(clippy::too_many_arguments)]
fn read_upload(
    reader: &PdfReader,
    services: &Services,
    uploads_dir: &Path,
    options: &IngestOptions,
    jobs: &Mutex<HashMap<String, Arc<Job>>>,
    next_id: &AtomicU64,
    upload: Upload,
    index_tx: &mpsc::Sender<(Arc<Job>, DocumentRecord)>,
    metrics: &Metrics,
) {
    let Upload { bytes, file_name, reply } = upload;
    let name = safe_name(&file_name);
    let hash = hex(&Sha256::digest(&bytes));
    match services.store.find_by_hash(&hash) {
        Ok(Some(doc)) => {
            let _ = reply.send(Ok(Accepted::Present(doc)));
            return;
        }
        Ok(None) => {}
        Err(e) => {
            let _ = reply.send(Err(format!("the store cannot be read: {e}")));
            return;
        }
    }
    let page_count = match reader.open(&bytes, options.password.as_deref()) {
        Ok(pdf) => pdf.page_count(),
        Err(e) => {
            metrics.jobs.get_or_create(&JobLabels { outcome: "refused".into() }).inc();
            let _ = reply.send(Err(format!("{name} {e}")));
            return;
        }
    };
    let dir = uploads_dir.join(&hash[..16]);
    let path = dir.join(&name);
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, &bytes)) {
        let _ = reply.send(Err(format!("the upload could not be saved in {}: {e}", dir.display())));
        return;
    }
    let id = format!("job-{}", next_id.fetch_add(1, Ordering::Relaxed));
    let job = Arc::new(Job {
        view: Mutex::new(JobView {
            id: id.clone(),
            file_name: name.clone(),
            state: JobState::Reading,
            pages: page_count,
            pages_read: 0,
            pages_indexed: 0,
            document: crate::store::document_id(&hash),
            error: None,
        }),
        progress: IngestProgress::hidden(),
        pages_indexed: AtomicU32::new(0),
    });
    {
        let mut all = jobs.lock().unwrap_or_else(|p| p.into_inner());
        if all.len() >= KEPT_JOBS {
            all.retain(|_, j| !matches!(j.view().state, JobState::Done | JobState::Failed));
        }
        all.insert(id, job.clone());
    }
    let _ = reply.send(Ok(Accepted::Job(job.view())));
    match ingest_file(&services.store, reader, &path, options, &job.progress) {
        Ok(IngestOutcome::Added { doc, .. }) | Ok(IngestOutcome::AlreadyPresent { doc }) => {
            job.update(|v| {
                v.state = JobState::Indexing;
                v.pages_read = v.pages;
            });
            let _ = index_tx.send((job, doc));
        }
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_dir(&dir);
            job.update(|v| {
                v.state = JobState::Failed;
                v.error = Some(e.to_string());
            });
            metrics.jobs.get_or_create(&JobLabels { outcome: "failed".into() }).inc();
        }
    }
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
