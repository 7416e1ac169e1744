//! Helpers shared by the end-to-end tests: they run the built `evident` binary the way an
//! operator would, each test with a store of its own.

#![allow(dead_code)]

pub mod hostile;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root (tests run the binary from there, so the default config's relative
/// paths find the set-up's files).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("repository root")
}

/// The benchmark's PDFs, beside the repository as `../shared/bench/docs`.
pub fn bench_docs() -> PathBuf {
    let dir = repo_root().join("../shared/bench/docs");
    assert!(dir.is_dir(), "the benchmark PDFs are expected at {}", dir.display());
    dir
}

/// One benchmark PDF, by its path under docs/.
pub fn bench_pdf(rel: &str) -> PathBuf {
    bench_docs().join(rel)
}

/// A store of the test's own, removed when dropped.
pub struct Appliance {
    pub data: tempfile::TempDir,
}

impl Appliance {
    pub fn new() -> Appliance {
        Appliance { data: tempfile::tempdir().expect("temp dir") }
    }

    /// The `evident` command with this store selected.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_evident"));
        cmd.current_dir(repo_root()).arg("--data-dir").arg(self.data.path()).env_remove("EVIDENT_CONFIG");
        cmd
    }

    /// Runs `evident ARGS` and returns its output, whatever its exit status.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("evident runs")
    }

    /// Runs `evident ARGS`, asserts success and returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "evident {args:?} failed: {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    /// Ingests paths, asserting success.
    pub fn ingest(&self, paths: &[&Path], extra: &[&str]) -> String {
        let mut args: Vec<String> = vec!["ingest".into()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(paths.iter().map(|p| p.display().to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.ok(&refs)
    }

    /// The documents, as `evident docs --json` gives them.
    pub fn docs(&self) -> Vec<serde_json::Value> {
        serde_json::from_str(&self.ok(&["docs", "--json"])).expect("docs JSON")
    }

    /// One page, as `evident show DOC --page N --json` gives it.
    pub fn page(&self, doc: &str, page: u32) -> serde_json::Value {
        let out = self.ok(&["show", doc, "--page", &page.to_string(), "--json"]);
        serde_json::from_str::<serde_json::Value>(&out).expect("page JSON")["page"].clone()
    }
}

/// The text of a page JSON: blocks joined by blank lines, lines by newlines.
pub fn page_text(page: &serde_json::Value) -> String {
    blocks(page).iter().map(block_text).collect::<Vec<_>>().join("\n\n")
}

/// A page's blocks.
pub fn blocks(page: &serde_json::Value) -> Vec<serde_json::Value> {
    page["blocks"].as_array().cloned().unwrap_or_default()
}

/// A block's text.
pub fn block_text(block: &serde_json::Value) -> String {
    block["lines"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| l["words"].as_array().into_iter().flatten().filter_map(|w| w["text"].as_str()).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// (x0, y0, x1, y1) of a JSON box.
pub fn bbox(v: &serde_json::Value) -> (f64, f64, f64, f64) {
    let f = |k: &str| v[k].as_f64().expect("box coordinate");
    (f("x0"), f("y0"), f("x1"), f("y1"))
}

/// Pages per benchmark document, from questions.jsonl.
pub fn bench_page_counts() -> std::collections::HashMap<String, u64> {
    let text = std::fs::read_to_string(bench_docs().join("../questions.jsonl")).expect("questions.jsonl");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("question JSON"))
        .map(|q| (q["doc"].as_str().expect("doc").to_string(), q["num_pages"].as_u64().expect("num_pages")))
        .collect()
}

/// A JSON fixture from tests/fixtures.
pub fn fixture(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(repo_root().join("tests/fixtures").join(name)).expect("fixture");
    serde_json::from_str(&text).expect("fixture JSON")
}

/// A JSON array of token ids.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().expect("ids").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

/// A JSON array of numbers, as f32.
pub fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().expect("floats").iter().map(|x| x.as_f64().expect("number") as f32).collect()
}

/// Three scanned slides (no text layer; the second shows "Wave Speed = Frequency x Wavelength")
/// cut out of a benchmark deck into `dir`.
pub fn scanned_pages(dir: &Path) -> PathBuf {
    pages_of("mmlongbench-doc/b3m5kaeqm2w8n4bwcesw-140602121350-phpapp02_95.pdf", &[7, 8, 9], &dir.join("waves.pdf"))
}

/// Pages `pages` (from 1) of a benchmark PDF as a PDF of their own at `out`, cut by PDFium
/// through the set-up's Python environment.
pub fn pages_of(pdf: &str, pages: &[u32], out: &Path) -> PathBuf {
    let src = bench_pdf(pdf);
    let script = "import sys, pypdfium2 as pdfium\nsrc = pdfium.PdfDocument(sys.argv[1])\nnew = pdfium.PdfDocument.new()\n\
                  new.import_pages(src, [int(p) - 1 for p in sys.argv[3:]])\nnew.save(sys.argv[2])\n";
    let status = Command::new(repo_root().join(".evident/venv/bin/python"))
        .args(["-c", script])
        .arg(&src)
        .arg(out)
        .args(pages.iter().map(u32::to_string))
        .status()
        .expect("the set-up's Python runs");
    assert!(status.success(), "cutting pages out of {}", src.display());
    out.to_path_buf()
}
