//! `evident bench ocr`: OCR's quality and speed on born-digital pages. Each page is rendered as
//! ingest renders a scan, read by Evident's engine and by Tesseract on the same image, and both
//! readings are scored against the page's own text layer (character and word error rates,
//! `eval::ocr_errors`); pages/s are timed per engine on the same images.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Args;
use evident::config::ComputeBackend;
use evident::config::CpuPrecision;
use evident::eval::ocr_errors::{OcrErrorCounts, page_errors};
use evident::ingest::{OCR_ENGINE, OCR_MAX_DPI, collect_pdfs, ocr_text};
use evident::ocr::OcrEngine;
use evident::store::{BoundingBox, Line, Word};

use super::Context;

/// Arguments of `evident bench ocr`.
#[derive(Args)]
pub struct BenchOcrArgs {
    /// PDFs or folders to take pages from (the README's figures use ../shared/bench/docs).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Pages to read, shared equally among the kinds found (slides, reports, filings, papers);
    /// a kind with too few pages leaves its share to the others.
    #[arg(long, default_value_t = 240)]
    pages: usize,
    /// A page is used only if its text layer has at least this many words.
    #[arg(long, default_value_t = 20)]
    min_words: usize,
    /// Longer side of the page images in pixels (default: `ingest.ocr_max_px`).
    #[arg(long)]
    max_px: Option<u32>,
    /// Longer side of the image the text detector sees (default: `ingest.ocr_detect_px`).
    #[arg(long)]
    detect_px: Option<u32>,
    /// Backend for Evident's engine (default: `compute.ocr_backend`).
    #[arg(long, value_enum)]
    backend: Option<ComputeBackend>,
    /// The Tesseract program to compare with (Debian: apt-get install tesseract-ocr tesseract-ocr-eng).
    #[arg(long, default_value = "tesseract")]
    tesseract: String,
    /// Measure Evident's engine only.
    #[arg(long)]
    no_tesseract: bool,
    /// On the CPU, the native networks' products: a row for each (default: `compute.ocr_precision`).
    #[arg(long, value_enum, value_delimiter = ',')]
    precisions: Vec<CpuPrecision>,
    /// On the CPU, also run burn's generated networks (the engine before the native one) on the
    /// same pages, as a row of their own.
    #[arg(long)]
    burn_cpu: bool,
    /// Write each page's scores here, one JSON object a line.
    #[arg(long, value_name = "FILE")]
    pages_out: Option<PathBuf>,
    /// Print the table as JSON.
    #[arg(long)]
    json: bool,
}

/// The kinds of page the table reports on, told apart by file name and page shape.
const KINDS: [&str; 4] = ["slides", "reports", "filings", "papers"];

/// One page to read: where it is and what its text layer says.
struct SamplePage {
    kind: &'static str,
    path: PathBuf,
    number: u32,
    width: f32,
    reference: Vec<Line>,
    png: Vec<u8>,
}

/// A document to take pages from: its path, bytes and page count.
type SourcePdf = (PathBuf, Vec<u8>, u32);

/// One engine's totals over a kind of page.
#[derive(Default, Clone)]
struct EngineTotals {
    errors: OcrErrorCounts,
    pages: usize,
    seconds: f64,
    detect: Duration,
    recognise: Duration,
}

pub fn run(ctx: &Context, args: BenchOcrArgs) -> Result<ExitCode> {
    let max_px = args.max_px.unwrap_or(ctx.config.ingest.ocr_max_px);
    let tesseract = if args.no_tesseract { None } else { Some(tesseract_version(&args.tesseract)?) };
    eprintln!("choosing {} pages with a text layer of {}+ words ...", args.pages, args.min_words);
    let sample = choose_pages(ctx, &collect_pdfs(&args.paths)?, args.pages, args.min_words, max_px)?;
    if sample.is_empty() {
        bail!("no page with a text layer of {}+ words in the PDFs given", args.min_words);
    }
    let device = evident::models::burn_device(args.backend.unwrap_or(ctx.config.compute.ocr_backend));
    let detect_px = args.detect_px.unwrap_or(ctx.config.ingest.ocr_detect_px);
    let dir = ctx.config.models_dir.join(evident::ocr::MODEL_DIR);
    let mut engines = Vec::new();
    if device.wgpu {
        engines.push((format!("{OCR_ENGINE} (burn wgpu)"), OcrEngine::load(&dir, &device.device)?.with_detector_side(detect_px)));
    } else {
        let precisions = if args.precisions.is_empty() { vec![ctx.config.compute.ocr_precision] } else { args.precisions.clone() };
        for precision in precisions {
            let engine = OcrEngine::load_native(&dir, precision)?.with_detector_side(detect_px);
            engines.push((format!("{OCR_ENGINE} (native CPU, {})", if engine.is_int8() { "int8" } else { "f32" }), engine));
        }
    }
    if args.burn_cpu && !device.wgpu {
        engines.push((format!("{OCR_ENGINE} (burn flex CPU)"), OcrEngine::load(&dir, &burn::prelude::Device::flex())?.with_detector_side(detect_px)));
    }

    let mut page_rows: Vec<serde_json::Value> = Vec::new();
    let mut ours: Vec<BTreeMap<&str, EngineTotals>> = Vec::new();
    // Each page image's pixels a point, for Tesseract's boxes too.
    let mut scales = Vec::with_capacity(sample.len());
    for (e, (engine_label, engine)) in engines.iter().enumerate() {
        engine.read(&image::RgbImage::new(64, 64))?; // warm-up: first allocations, shaders on wgpu
        let mut totals: BTreeMap<&str, EngineTotals> = BTreeMap::new();
        for (i, page) in sample.iter().enumerate() {
            let started = Instant::now();
            let image = image::load_from_memory(&page.png).context("a rendered page is not an image")?.to_rgb8();
            let (lines, times) = engine.read_timed(&image)?;
            let seconds = started.elapsed().as_secs_f64();
            let scale = image.width() as f32 / page.width;
            if e == 0 {
                scales.push(scale);
            }
            let area = BoundingBox { x0: 0.0, y0: 0.0, x1: page.width, y1: image.height() as f32 / scale };
            let words: Vec<Word> = ocr_text(&lines, &area, scale, &[]).blocks.into_iter().flat_map(|b| b.lines).flat_map(|l| l.words).collect();
            let errors = page_errors(&page.reference, &words);
            let t = totals.entry(page.kind).or_default();
            t.errors.add(&errors);
            t.pages += 1;
            t.seconds += seconds;
            t.detect += times.detect;
            t.recognise += times.recognise;
            let scores = serde_json::json!({ "engine": engine_label, "cer": errors.cer(), "wer": errors.wer(), "seconds": seconds, "lines": times.lines });
            if e == 0 {
                page_rows.push(serde_json::json!({ "kind": page.kind, "pdf": page.path.display().to_string(), "page": page.number, "evident": scores }));
            } else {
                page_rows[i][format!("evident_{e}")] = scores;
            }
            let name = page.path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
            eprint!("\r{engine_label}: {}/{} pages (last: {name} page {})\x1b[K", i + 1, sample.len(), page.number);
        }
        eprintln!();
        ours.push(totals);
    }

    let mut theirs: BTreeMap<&str, EngineTotals> = BTreeMap::new();
    if let Some(version) = &tesseract {
        for kind in KINDS {
            let pages: Vec<(usize, &SamplePage)> = sample.iter().enumerate().filter(|(_, p)| p.kind == kind).collect();
            if pages.is_empty() {
                continue;
            }
            eprintln!("{version}: {} {kind} pages ...", pages.len());
            let (words, seconds) = run_tesseract(&args.tesseract, &pages.iter().map(|(_, p)| p.png.as_slice()).collect::<Vec<_>>())?;
            let t = theirs.entry(kind).or_default();
            t.seconds = seconds;
            for ((i, page), words) in pages.into_iter().zip(words) {
                let words: Vec<Word> = words.into_iter().map(|w| Word { text: w.text, bbox: scaled(&w.bbox, scales[i]) }).collect();
                let errors = page_errors(&page.reference, &words);
                t.errors.add(&errors);
                t.pages += 1;
                page_rows[i]["tesseract"] = serde_json::json!({ "cer": errors.cer(), "wer": errors.wer() });
            }
        }
    }

    if let Some(path) = &args.pages_out {
        let mut out = std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?;
        for row in &page_rows {
            writeln!(out, "{row}")?;
        }
    }
    let mut rows = Vec::new();
    let labelled = engines.iter().map(|(label, _)| label.as_str()).zip(&ours).chain([(tesseract.as_deref().unwrap_or(""), &theirs)]);
    for (label, totals) in labelled {
        if totals.is_empty() {
            continue;
        }
        let mut all = EngineTotals::default();
        for kind in KINDS {
            if let Some(t) = totals.get(kind) {
                rows.push((kind, label, t.clone()));
                all.errors.add(&t.errors);
                all.pages += t.pages;
                all.seconds += t.seconds;
                all.detect += t.detect;
                all.recognise += t.recognise;
            }
        }
        rows.push(("all", label, all));
    }
    rows.sort_by_key(|(kind, _, _)| KINDS.iter().position(|k| k == kind).unwrap_or(KINDS.len()));
    if args.json {
        let out: Vec<_> = rows
            .iter()
            .map(|(kind, label, t)| {
                serde_json::json!({
                    "kind": kind, "engine": label, "pages": t.pages, "cer": t.errors.cer(), "wer": t.errors.wer(),
                    "reference_chars": t.errors.reference_chars, "reference_words": t.errors.reference_words,
                    "seconds": t.seconds, "pages_per_s": t.pages as f64 / t.seconds,
                })
            })
            .collect();
        println!("{}", serde_json::to_string(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("OCR of born-digital pages rendered at up to {OCR_MAX_DPI} dpi, {max_px} px (detector: {detect_px} px); reference: each page's text layer");
    println!("{:<8} {:<34} {:>5} {:>7} {:>7} {:>8} {:>9} {:>9}", "kind", "engine", "pages", "CER", "WER", "pages/s", "detect s", "read s");
    for (kind, label, t) in &rows {
        let split = |d: Duration| if d.is_zero() { "-".to_string() } else { format!("{:.2}", d.as_secs_f64() / t.pages as f64) };
        println!(
            "{kind:<8} {label:<34} {:>5} {:>7.3} {:>7.3} {:>8.2} {:>9} {:>9}",
            t.pages,
            t.errors.cer(),
            t.errors.wer(),
            t.pages as f64 / t.seconds,
            split(t.detect),
            split(t.recognise)
        );
    }
    println!("detect s / read s: seconds a page in the detector and in the recogniser (Evident's engine only).");
    Ok(ExitCode::SUCCESS)
}

/// The kind of a document's pages: landscape pages are slides; then arXiv and TACL papers,
/// SEC filings (FinanceBench, UDA, 10-Ks) and, for the rest, reports.
fn kind_of(path: &Path, first_page: (f32, f32)) -> &'static str {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let folder = path.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).unwrap_or("");
    let arxiv = name.len() > 10 && name[..4].bytes().all(|b| b.is_ascii_digit()) && name.as_bytes()[4] == b'.';
    if first_page.0 > first_page.1 {
        "slides"
    } else if arxiv || name.starts_with("tacl") {
        "papers"
    } else if matches!(folder, "financebench" | "uda-finqa") || name.contains("10K") || name.contains("10-K") {
        "filings"
    } else {
        "reports"
    }
}

/// Pages spread over the documents of each kind (every document in turn, its pages taken at
/// even steps), rendered as ingest renders a page for OCR.
fn choose_pages(ctx: &Context, files: &[PathBuf], pages: usize, min_words: usize, max_px: u32) -> Result<Vec<SamplePage>> {
    let reader = ctx.pdf_reader()?;
    let mut by_kind: BTreeMap<&str, Vec<SourcePdf>> = BTreeMap::new();
    for path in files {
        let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let Ok(pdf) = reader.open(&bytes, None) else { continue };
        let Ok(first) = pdf.read_page(1, None) else { continue };
        let count = pdf.page_count();
        drop(pdf);
        by_kind.entry(kind_of(path, (first.page.width, first.page.height))).or_default().push((path.clone(), bytes, count));
    }
    // Kinds with the fewest documents first, each taking an equal share of the pages still to
    // choose, so that what a small kind lacks goes to the others.
    let mut kinds: Vec<(&str, Vec<SourcePdf>)> = by_kind.into_iter().collect();
    kinds.sort_by_key(|(_, docs)| docs.len());
    let mut out = Vec::new();
    for (k, (kind, docs)) in kinds.iter().enumerate() {
        let kind = KINDS.iter().find(|name| *name == kind).copied().unwrap_or("reports");
        let per_kind = (pages - out.len()).div_ceil(kinds.len() - k);
        let opened: Vec<_> = docs.iter().filter_map(|(path, bytes, count)| reader.open(bytes, None).ok().map(|pdf| (path, pdf, *count))).collect();
        // Each document's pages in an order that spreads them out: a stride coprime to the count.
        let mut next = vec![0u32; opened.len()];
        let mut taken = 0;
        while taken < per_kind && next.iter().zip(&opened).any(|(n, (_, _, count))| n < count) {
            for (d, (path, pdf, count)) in opened.iter().enumerate() {
                if taken == per_kind || next[d] >= *count {
                    continue;
                }
                let stride = (1..).map(|s| s * 7 + 3).find(|s| gcd(*s, *count) == 1).unwrap_or(1);
                let number = (next[d] * stride) % count + 1;
                next[d] += 1;
                let Ok(read) = pdf.read_page(number, None) else { continue };
                let words: usize = read.page.blocks.iter().flat_map(|b| &b.lines).map(|l| l.words.len()).sum();
                if !read.page.has_text_layer || words < min_words {
                    continue;
                }
                let whole = BoundingBox { x0: 0.0, y0: 0.0, x1: read.page.width, y1: read.page.height };
                let png = pdf.render_crop(number, whole, OCR_MAX_DPI, max_px)?;
                let reference = read.page.blocks.into_iter().flat_map(|b| b.lines).collect();
                out.push(SamplePage { kind, path: (*path).clone(), number, width: read.page.width, reference, png });
                taken += 1;
            }
        }
    }
    Ok(out)
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn scaled(b: &BoundingBox, scale: f32) -> BoundingBox {
    BoundingBox { x0: b.x0 / scale, y0: b.y0 / scale, x1: b.x1 / scale, y1: b.y1 / scale }
}

/// Tesseract's first version line, or an error that says how to install it.
fn tesseract_version(program: &str) -> Result<String> {
    let out = Command::new(program)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {program}; install Tesseract (apt-get install tesseract-ocr tesseract-ocr-eng) or pass --no-tesseract"))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    Ok(text.lines().next().unwrap_or("tesseract").trim().replace("tesseract", "Tesseract"))
}

/// Words with their boxes in pixels.
struct PixelWord {
    text: String,
    bbox: BoundingBox,
}

/// Reads the images with one Tesseract process (English, its default page segmentation), as
/// one multi-page input so that its model loads once; each image's words, and the wall time.
fn run_tesseract(program: &str, images: &[&[u8]]) -> Result<(Vec<Vec<PixelWord>>, f64)> {
    let dir = tempfile::tempdir()?;
    let mut list = String::new();
    for (i, png) in images.iter().enumerate() {
        let path = dir.path().join(format!("{i:04}.png"));
        std::fs::write(&path, png)?;
        list.push_str(&format!("{}\n", path.display()));
    }
    std::fs::write(dir.path().join("list.txt"), list)?;
    let started = Instant::now();
    let status = Command::new(program)
        .arg(dir.path().join("list.txt"))
        .arg(dir.path().join("out"))
        .args(["-l", "eng", "tsv"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("cannot run {program}"))?;
    let seconds = started.elapsed().as_secs_f64();
    if !status.success() {
        bail!("{program} failed ({status}); is its English model installed (tesseract-ocr-eng)?");
    }
    let tsv = std::fs::read_to_string(dir.path().join("out.tsv")).context("Tesseract wrote no TSV")?;
    let mut pages: Vec<Vec<PixelWord>> = (0..images.len()).map(|_| Vec::new()).collect();
    for row in tsv.lines().skip(1) {
        // level page_num block par line word left top width height conf text
        let cols: Vec<&str> = row.split('\t').collect();
        if cols.len() < 12 || cols[0] != "5" || cols[11].trim().is_empty() {
            continue;
        }
        let num = |i: usize| cols[i].parse::<f32>().unwrap_or(0.0);
        let page = cols[1].parse::<usize>().unwrap_or(0);
        if let Some(words) = page.checked_sub(1).and_then(|p| pages.get_mut(p)) {
            let (x, y, w, h) = (num(6), num(7), num(8), num(9));
            words.push(PixelWord { text: cols[11].to_string(), bbox: BoundingBox { x0: x, y0: y, x1: x + w, y1: y + h } });
        }
    }
    Ok((pages, seconds))
}
