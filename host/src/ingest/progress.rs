//! Progress of a long ingest: one bar over files, one over the current document's pages.

use std::path::Path;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Progress bars on stderr; invisible when stderr is not a terminal.
pub struct IngestProgress {
    files: ProgressBar,
    pages: ProgressBar,
    /// Pages of the current document read by OCR so far.
    ocr_pages: std::sync::atomic::AtomicU64,
    _multi: MultiProgress,
}

impl IngestProgress {
    /// Bars for `file_count` files.
    pub fn new(file_count: usize) -> IngestProgress {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let files = multi.add(ProgressBar::new(file_count as u64));
        files.set_style(
            ProgressStyle::with_template("{prefix:>6} [{bar:30.cyan/blue}] {pos}/{len} files  {elapsed_precise}  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        files.set_prefix("files");
        let pages = multi.add(ProgressBar::new(0));
        pages.set_style(
            ProgressStyle::with_template("{prefix:>6} [{bar:30.green/white}] {pos}/{len} pages  {per_sec}  eta {eta}  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        pages.set_prefix("pages");
        IngestProgress { files, pages, ocr_pages: Default::default(), _multi: multi }
    }

    /// A hidden progress, for library callers.
    pub fn hidden() -> IngestProgress {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
        let files = multi.add(ProgressBar::hidden());
        let pages = multi.add(ProgressBar::hidden());
        IngestProgress { files, pages, ocr_pages: Default::default(), _multi: multi }
    }

    /// A document with `pages` pages starts.
    pub fn start_document(&self, path: &Path, pages: u32) {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        self.files.set_message(name);
        self.pages.reset();
        self.pages.set_message("");
        self.ocr_pages.store(0, std::sync::atomic::Ordering::Relaxed);
        self.pages.set_length(u64::from(pages));
    }

    /// One more page read.
    pub fn page_done(&self) {
        self.pages.inc(1);
    }

    /// One more page of the current document read by OCR.
    pub fn page_ocr_done(&self) {
        let n = self.ocr_pages.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        self.pages.set_message(format!("{n} read by OCR"));
    }

    /// Pages of the current document read by OCR so far.
    pub fn pages_ocr(&self) -> u64 {
        self.ocr_pages.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Pages of the current document read so far.
    pub fn pages_read(&self) -> u64 {
        self.pages.position()
    }

    /// Pages of the current document (0 before it is opened).
    pub fn pages_total(&self) -> u64 {
        self.pages.length().unwrap_or(0)
    }

    /// One more file finished (ingested, skipped or failed).
    pub fn file_done(&self) {
        self.files.inc(1);
    }

    /// Prints a line above the bars (or plainly, when they are hidden).
    pub fn println(&self, line: &str) {
        if self.files.is_hidden() {
            println!("{line}");
        } else {
            self.files.suspend(|| println!("{line}"));
        }
    }

    /// Removes the bars.
    pub fn finish(&self) {
        self.pages.finish_and_clear();
        self.files.finish_and_clear();
    }
}
