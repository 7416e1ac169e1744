//! PDFium in a supervised worker process, one per document, as Chromium keeps PDFium out of
//! its browser process: a document that makes PDFium loop, exhaust memory or crash ends in one
//! sentence naming the cause, and the next document gets a fresh worker.

use std::io::{BufReader, BufWriter};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tracing::warn;

use super::pdf::{PageRead, PdfError, PdfReader};
use super::wire::{Reply, Request, read_frame, write_frame};
use crate::config::IngestConfig;
use crate::store::{BoundingBox, OutlineEntry};

/// The subcommand of the `evident` binary that runs a worker.
pub const WORKER_SUBCOMMAND: &str = "pdf-worker";

/// What one document may take from the worker reading it.
#[derive(Debug, Clone, Copy)]
pub struct ReadLimits {
    /// Opening the document (parsing, forms, outline).
    pub open: Duration,
    /// Any one page.
    pub page: Duration,
    /// The whole document.
    pub document: Duration,
    /// The worker's address space, MiB.
    pub memory_mib: u64,
    /// Pages a document may have.
    pub max_pages: u32,
}

impl ReadLimits {
    /// The limits `[ingest]` sets.
    pub fn from_config(c: &IngestConfig) -> ReadLimits {
        ReadLimits {
            open: Duration::from_secs(c.open_timeout_s),
            page: Duration::from_secs(c.page_timeout_s),
            document: Duration::from_secs(c.document_timeout_s),
            memory_mib: c.worker_memory_mib,
            max_pages: c.max_pages,
        }
    }
}

/// Starts PDF workers: the `evident` binary run as `evident pdf-worker`.
#[derive(Debug, Clone)]
pub struct PdfWorker {
    program: PathBuf,
    library: PathBuf,
    limits: ReadLimits,
}

/// A smallest valid one-page PDF, read once at start to prove the worker and PDFium work.
const PROBE_PDF: &[u8] = b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 200 200]>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n";

impl PdfWorker {
    /// Workers run by `program` (the `evident` binary), binding PDFium from `library`.
    pub fn new(program: PathBuf, library: PathBuf, limits: ReadLimits) -> PdfWorker {
        PdfWorker { program, library, limits }
    }

    /// Workers run by this very binary.
    pub fn current_exe(library: PathBuf, limits: ReadLimits) -> Result<PdfWorker, PdfError> {
        let program = std::env::current_exe().map_err(|e| PdfError::Worker(format!("cannot find the evident binary ({e})")))?;
        Ok(PdfWorker::new(program, library, limits))
    }

    /// The limits each document is read under.
    pub fn limits(&self) -> ReadLimits {
        self.limits
    }

    /// Reads a tiny built-in PDF, so that a missing PDFium stops a command at start rather
    /// than at its first document.
    pub fn check(&self) -> Result<(), PdfError> {
        self.open(PROBE_PDF, None).map(drop)
    }

    /// Opens `bytes` in a fresh worker.
    pub fn open(&self, bytes: &[u8], password: Option<&str>) -> Result<WorkerDocument, PdfError> {
        self.open_since(bytes, password, Instant::now())
    }

    /// Opens the document of `earlier`, whose worker is gone, in a fresh worker that keeps
    /// the document's deadline.
    pub fn reopen(&self, bytes: &[u8], password: Option<&str>, earlier: &WorkerDocument) -> Result<WorkerDocument, PdfError> {
        self.open_since(bytes, password, earlier.started)
    }

    fn open_since(&self, bytes: &[u8], password: Option<&str>, started: Instant) -> Result<WorkerDocument, PdfError> {
        let mut child = self.spawn()?;
        let stdin = child.stdin.take().ok_or_else(|| PdfError::Worker("its input is missing".into()))?;
        let stdout = child.stdout.take().ok_or_else(|| PdfError::Worker("its output is missing".into()))?;
        let (tx, replies) = mpsc::channel();
        std::thread::Builder::new()
            .name("evident-pdf-replies".into())
            .spawn(move || {
                let mut out = BufReader::new(stdout);
                loop {
                    let frame = read_frame::<Reply>(&mut out);
                    let end = !matches!(frame, Ok(Some(_)));
                    if tx.send(frame).is_err() || end {
                        return;
                    }
                }
            })
            .map_err(|e| PdfError::Worker(format!("cannot start its reader thread ({e})")))?;
        let mut doc = WorkerDocument {
            child,
            stdin: BufWriter::new(stdin),
            replies,
            started,
            limits: self.limits,
            page_count: 0,
            title: None,
            outline: Vec::new(),
            truncated: false,
        };
        let request = Request::Open { bytes: bytes.to_vec(), password: password.map(str::to_string) };
        match doc.call(&request, self.limits.open, "to open")? {
            Reply::Opened { page_count, title, outline, truncated } => {
                if page_count == 0 {
                    return Err(PdfError::NoPages);
                }
                if page_count > self.limits.max_pages {
                    return Err(PdfError::TooManyPages { count: page_count, limit: self.limits.max_pages });
                }
                doc.page_count = page_count;
                doc.title = title;
                doc.outline = outline;
                doc.truncated = truncated;
                Ok(doc)
            }
            other => Err(unexpected(&other)),
        }
    }

    fn spawn(&self) -> Result<Child, PdfError> {
        let mut cmd = Command::new(&self.program);
        cmd.arg(WORKER_SUBCOMMAND).arg("--library").arg(&self.library).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        let memory = self.limits.memory_mib.saturating_mul(1 << 20);
        // SAFETY: between fork and exec only async-signal-safe calls (setrlimit, prctl).
        unsafe {
            cmd.pre_exec(move || {
                let limit = libc::rlimit { rlim_cur: memory, rlim_max: memory };
                if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
                libc::setrlimit(libc::RLIMIT_CORE, &none);
                // A worker must not outlive a host that was killed.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        cmd.spawn().map_err(|e| PdfError::Worker(format!("cannot start {} ({e})", self.program.display())))
    }
}

/// A document open in its worker; dropping it ends the worker.
pub struct WorkerDocument {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    replies: mpsc::Receiver<std::io::Result<Option<Reply>>>,
    started: Instant,
    limits: ReadLimits,
    page_count: u32,
    title: Option<String>,
    outline: Vec<OutlineEntry>,
    truncated: bool,
}

impl WorkerDocument {
    /// Whether the file lacked its end and PDFium rebuilt it.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Whether the whole document's deadline has passed.
    pub fn out_of_time(&self) -> bool {
        self.started.elapsed() >= self.limits.document
    }

    /// Number of pages.
    pub fn page_count(&self) -> u32 {
        self.page_count
    }

    /// The title from the PDF's metadata, when it has a non-empty one.
    pub fn title(&self) -> Option<String> {
        self.title.clone()
    }

    /// The bookmarks, flattened depth-first with their levels.
    pub fn outline(&self) -> Vec<OutlineEntry> {
        self.outline.clone()
    }

    /// Leaves `spent` (time the host took between requests, reading pages with OCR) out of the
    /// document's deadline, which bounds what PDFium may take.
    pub fn exclude_from_deadline(&mut self, spent: Duration) {
        self.started += spent;
    }

    /// Reads one page (1-based) and, when `image_max_px` is given, its image as PNG.
    pub fn read_page(&mut self, number: u32, image_max_px: Option<u32>) -> Result<PageRead, PdfError> {
        let what = format!("to read page {number}");
        match self.call(&Request::Page { number, image_max_px }, self.limits.page, &what)? {
            Reply::Page(read) => Ok(read),
            other => Err(unexpected(&other)),
        }
    }

    /// Renders a region of one page (1-based) at `dpi`, its longer side at most `max_px`, as PNG.
    pub fn render_crop(&mut self, number: u32, bbox: BoundingBox, dpi: u32, max_px: u32) -> Result<Vec<u8>, PdfError> {
        let what = format!("to render a crop of page {number}");
        match self.call(&Request::Crop { number, bbox, dpi, max_px }, self.limits.page, &what)? {
            Reply::Image(png) => Ok(png),
            other => Err(unexpected(&other)),
        }
    }

    /// Sends one request and waits for its reply within `limit` and the document's deadline.
    fn call(&mut self, request: &Request, limit: Duration, what: &str) -> Result<Reply, PdfError> {
        let left = self.limits.document.saturating_sub(self.started.elapsed());
        let (wait, seconds, what) = if left < limit { (left, self.limits.document.as_secs(), "to read") } else { (limit, limit.as_secs(), what) };
        if write_frame(&mut self.stdin, request).is_err() {
            return Err(self.ended());
        }
        match self.replies.recv_timeout(wait) {
            Ok(Ok(Some(Reply::Failed(e)))) => Err(e),
            Ok(Ok(Some(reply))) => Ok(reply),
            Ok(Err(e)) => Err(PdfError::Worker(format!("its reply cannot be read ({e})"))),
            Ok(Ok(None)) | Err(mpsc::RecvTimeoutError::Disconnected) => Err(self.ended()),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.stop();
                Err(PdfError::TimedOut { seconds, what: what.to_string() })
            }
        }
    }

    /// Why the worker went away.
    fn ended(&mut self) -> PdfError {
        match self.child.wait() {
            Ok(status) => match status.signal() {
                Some(signal) => PdfError::Crashed { signal: signal_name(signal), memory_mib: self.limits.memory_mib },
                None => PdfError::Worker(format!("it stopped unexpectedly ({status})")),
            },
            Err(e) => PdfError::Worker(format!("its state is unknown ({e})")),
        }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for WorkerDocument {
    fn drop(&mut self) {
        self.stop();
    }
}

fn unexpected(reply: &Reply) -> PdfError {
    let kind = match reply {
        Reply::Opened { .. } => "opened",
        Reply::Page(_) => "page",
        Reply::Image(_) => "image",
        Reply::Failed(_) => "failed",
    };
    PdfError::Worker(format!("it answered out of turn ({kind})"))
}

fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

/// The worker's side: binds PDFium, opens the one document it is sent and answers page
/// requests until the host closes its input. Frames go to stdout, logs to stderr.
pub fn serve_worker(library: &Path) -> std::io::Result<()> {
    let mut input = BufReader::new(std::io::stdin().lock());
    let mut output = BufWriter::new(std::io::stdout().lock());
    let Some(Request::Open { bytes, password }) = read_frame::<Request>(&mut input)? else {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "the first request must open a document"));
    };
    let reader = match PdfReader::new(library) {
        Ok(r) => r,
        Err(e) => return write_frame(&mut output, &Reply::Failed(e)),
    };
    let pdf = match reader.open(&bytes, password.as_deref()) {
        Ok(pdf) => pdf,
        Err(e) => return write_frame(&mut output, &Reply::Failed(e)),
    };
    write_frame(&mut output, &Reply::Opened { page_count: pdf.page_count(), title: pdf.title(), outline: pdf.outline(), truncated: pdf.truncated() })?;
    while let Some(request) = read_frame::<Request>(&mut input)? {
        let reply = match request {
            Request::Page { number, image_max_px } => match pdf.read_page(number, image_max_px) {
                Ok(read) => Reply::Page(read),
                Err(e) => Reply::Failed(e),
            },
            Request::Crop { number, bbox, dpi, max_px } => match pdf.render_crop(number, bbox, dpi, max_px) {
                Ok(png) => Reply::Image(png),
                Err(e) => Reply::Failed(e),
            },
            Request::Open { .. } => {
                warn!("a PDF worker was asked to open a second document");
                Reply::Failed(PdfError::Worker("a worker reads one document".into()))
            }
        };
        write_frame(&mut output, &reply)?;
    }
    Ok(())
}
