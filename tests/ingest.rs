//! Ingest, end to end: the built `evident` binary on real benchmark PDFs, each test with a
//! store of its own.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use common::{Appliance, bbox, bench_page_counts, bench_pdf, block_text, blocks, page_text};

const PAPER: &str = "mmlongbench-doc/2303.05039v2.pdf";
const FILING: &str = "financebench/3M_2022_10K.pdf";
const SMALL: &str = "financebench/PEPSICO_2023_8K_dated-2023-05-05.pdf";

fn doc_id(app: &Appliance, file: &str) -> String {
    let name = Path::new(file).file_name().and_then(|n| n.to_str()).expect("file name");
    app.docs()
        .iter()
        .find(|d| d["source_path"].as_str().is_some_and(|p| p.ends_with(name)))
        .and_then(|d| d["id"].as_str())
        .map(str::to_string)
        .unwrap_or_else(|| panic!("{file} is not in the store"))
}

#[test]
fn page_counts_match_the_benchmark_and_a_second_ingest_adds_nothing() {
    let app = Appliance::new();
    let files = [
        PAPER,
        "mmlongbench-doc/User_Manual_1500S_Classic_EN.pdf",
        "mmlongbench-doc/efis-140411041451-phpapp01_95.pdf",
        "financebench/PEPSICO_2023_8K_dated-2023-05-05.pdf",
        "financebench/AMAZON_2017_10K.pdf",
        "uda-finqa/ADI_2009.pdf",
    ];
    let paths: Vec<_> = files.iter().map(|f| bench_pdf(f)).collect();
    let refs: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
    // Page counts need no OCR (the slide deck is scanned; tests/ocr.rs reads such pages).
    let first = app.ingest(&refs, &["--no-images", "--no-index", "--ocr", "never"]);
    assert!(first.contains(&format!("{} added", files.len())), "{first}");

    let expected = bench_page_counts();
    let docs = app.docs();
    assert_eq!(docs.len(), files.len());
    for file in files {
        let name = Path::new(file).file_name().and_then(|n| n.to_str()).expect("name");
        let doc = docs.iter().find(|d| d["source_path"].as_str().is_some_and(|p| p.ends_with(name))).expect("document listed");
        assert_eq!(doc["page_count"].as_u64(), Some(expected[file]), "{file}");
        assert_eq!(doc["content_hash"].as_str().map(str::len), Some(64));
    }

    let second = app.ingest(&refs, &["--no-images", "--no-index"]);
    assert!(second.contains(&format!("0 added (0 pages), {} already present", files.len())), "{second}");
    assert_eq!(app.docs().len(), files.len());
}

#[test]
fn known_pages_hold_known_text_in_reading_order() {
    let app = Appliance::new();
    app.ingest(&[&bench_pdf(PAPER), &bench_pdf(FILING)], &["--no-images", "--no-index"]);
    let paper = doc_id(&app, PAPER);
    let filing = doc_id(&app, FILING);

    let text = page_text(&app.page(&paper, 1));
    let abstract_at = text.find("Personality is a psychological factor that reflects people’s").expect("abstract text");
    // Two columns: the left column's last paragraph comes before the right column's first.
    let left = text.find("Online recommendation systems are algorithms").expect("left column text");
    let right = text.find("profile is important as people with different ages").expect("right column text");
    assert!(abstract_at < left && left < right, "columns out of order:\n{text}");

    let text = page_text(&app.page(&filing, 50));
    assert!(text.contains("Consolidated Balance Sheet"), "{text}");
    // Tables read by rows: a label comes right before its own figures.
    let text = page_text(&app.page(&filing, 27));
    let row = text.find("Cost of sales").expect("row label");
    let figure = text.find("56.2 %").expect("row figure");
    let next_row = text.find("Selling, general and administrative").expect("next row");
    assert!(row < figure && figure < next_row, "table not read by rows:\n{text}");
}

#[test]
fn headings_are_marked_by_size_and_weight() {
    let app = Appliance::new();
    app.ingest(&[&bench_pdf(PAPER)], &["--no-images", "--no-index"]);
    let page = app.page(&doc_id(&app, PAPER), 1);
    let blocks = blocks(&page);
    let title = blocks.iter().find(|b| block_text(b).starts_with("Improving Recommendation Systems")).expect("title block");
    let body = blocks.iter().find(|b| block_text(b).starts_with("Personality is a psychological")).expect("body block");
    assert!(title["bold"].as_bool() == Some(true));
    assert!(title["font_size"].as_f64() > body["font_size"].as_f64());
    let heading = blocks.iter().find(|b| block_text(b) == "ABSTRACT").expect("heading block");
    assert_eq!(heading["bold"].as_bool(), Some(true));
    assert_eq!(body["bold"].as_bool(), Some(false));
}

/// The regions a page's figures, pictures and tables cover, with their captions; body text in
/// two columns is no table.
#[test]
fn figures_pictures_and_tables_are_recorded_with_their_captions() {
    let app = Appliance::new();
    app.ingest(&[&bench_pdf(PAPER), &bench_pdf("financebench/ULTABEAUTY_2023Q4_EARNINGS.pdf")], &["--no-images", "--no-index"]);
    let regions = |doc: &str, page: u32| -> Vec<serde_json::Value> {
        let out = app.ok(&["show", doc, "--page", &page.to_string(), "--json"]);
        serde_json::from_str::<serde_json::Value>(&out).expect("JSON")["regions"].as_array().expect("regions").clone()
    };
    let paper = doc_id(&app, PAPER);
    let captioned = |doc: &str, page: u32, kind: &str, caption: &str| {
        let found = regions(doc, page);
        assert!(found.iter().any(|r| r["kind"] == kind && r["caption"].as_str().is_some_and(|c| c.starts_with(caption))), "page {page}: {found:?}");
    };
    captioned(&paper, 5, "image", "Figure 1: The overall structure of our model");
    captioned(&paper, 4, "table", "Table 1:");
    captioned(&paper, 8, "table", "Table 5:");
    // Pages of two-column prose and nothing drawn have no region at all.
    assert!(regions(&paper, 2).is_empty(), "{:?}", regions(&paper, 2));
    let filing = doc_id(&app, "financebench/ULTABEAUTY_2023Q4_EARNINGS.pdf");
    captioned(&filing, 6, "table", "Exhibit 2");
    // A region's blocks are blocks of its page, inside its box.
    for (doc, page) in [(&paper, 4), (&filing, 6)] {
        let p = app.page(doc, page);
        let page_blocks = blocks(&p);
        for r in regions(doc, page) {
            let (x0, y0, x1, y1) = bbox(&r["bbox"]);
            for b in r["blocks"].as_array().expect("blocks") {
                let (bx0, by0, bx1, by1) = bbox(&page_blocks[b.as_u64().expect("index") as usize]["bbox"]);
                let (cx, cy) = ((bx0 + bx1) / 2.0, (by0 + by1) / 2.0);
                assert!(cx >= x0 && cx <= x1 && cy >= y0 && cy <= y1, "block {b} of page {page} lies outside its region");
            }
        }
    }
}

/// Every box on every page lies inside its page, and no block is read before a block that
/// sits above it in the same column.
#[test]
fn boxes_lie_inside_pages_and_blocks_come_in_reading_order() {
    let app = Appliance::new();
    let files = [PAPER, "mmlongbench-doc/tacl_a_00660.pdf", "uda-finqa/GS_2016.pdf", "mmlongbench-doc/camry_ebrochure.pdf"];
    let paths: Vec<_> = files.iter().map(|f| bench_pdf(f)).collect();
    let refs: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
    app.ingest(&refs, &["--no-images", "--no-index"]);
    let mut checked_words = 0;
    for doc in app.docs() {
        let id = doc["id"].as_str().expect("id");
        let pages = doc["page_count"].as_u64().expect("page count") as u32;
        for n in 1..=pages {
            let page = app.page(id, n);
            let (w, h) = (page["width"].as_f64().expect("width"), page["height"].as_f64().expect("height"));
            let inside = |b: (f64, f64, f64, f64)| b.0 >= 0.0 && b.1 >= 0.0 && b.2 <= w && b.3 <= h && b.0 <= b.2 && b.1 <= b.3;
            let blocks = blocks(&page);
            for block in &blocks {
                assert!(inside(bbox(&block["bbox"])), "{id} p{n}: block {:?} outside {w}x{h}", bbox(&block["bbox"]));
                for line in block["lines"].as_array().expect("lines") {
                    assert!(inside(bbox(&line["bbox"])), "{id} p{n}: line outside");
                    for word in line["words"].as_array().expect("words") {
                        assert!(inside(bbox(&word["bbox"])), "{id} p{n}: word {} outside", word["text"]);
                        checked_words += 1;
                    }
                }
            }
            for (i, earlier) in blocks.iter().enumerate() {
                let a = bbox(&earlier["bbox"]);
                for later in &blocks[i + 1..] {
                    let b = bbox(&later["bbox"]);
                    let above = b.3 <= a.1;
                    let same_column = b.0.max(a.0) < b.2.min(a.2);
                    assert!(
                        !(above && same_column),
                        "{id} p{n}: block {:?} ({:?}) is read after {:?} ({:?}) though it sits above it",
                        block_text(later),
                        b,
                        block_text(earlier),
                        a
                    );
                }
            }
        }
    }
    assert!(checked_words > 10_000, "only {checked_words} words checked");
}

#[test]
fn outline_and_page_images_are_stored() {
    let app = Appliance::new();
    let manual = "mmlongbench-doc/User_Manual_1500S_Classic_EN.pdf";
    app.ingest(&[&bench_pdf(manual)], &["--no-index"]);
    let id = doc_id(&app, manual);
    let shown: serde_json::Value = serde_json::from_str(&app.ok(&["show", &id, "--json"])).expect("JSON");
    let outline = shown["outline"].as_array().expect("outline");
    assert!(outline.len() > 10, "the manual has bookmarks");
    let pages = shown["document"]["page_count"].as_u64().expect("pages");
    assert!(outline.iter().all(|e| e["page"].as_u64().is_none_or(|p| (1..=pages).contains(&p))));
    assert!(outline.iter().any(|e| e["level"].as_u64() == Some(1)), "nested entries keep their level");

    let png = app.data.path().join("page3.png");
    app.ok(&["show", &id, "--page", "3", "--image", png.to_str().expect("path")]);
    let bytes = std::fs::read(&png).expect("image written");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    // IHDR: width and height, big-endian, at bytes 16..24. The longer side is the configured bound.
    let w = u32::from_be_bytes(bytes[16..20].try_into().expect("width"));
    let h = u32::from_be_bytes(bytes[20..24].try_into().expect("height"));
    assert_eq!(w.max(h), 1024, "{w}x{h}");
}

#[test]
fn an_encrypted_pdf_needs_its_password() {
    let app = Appliance::new();
    let pdf = common::repo_root().join("tests/fixtures/encrypted.pdf");
    let out = app.run(&["ingest", "--no-index", pdf.to_str().expect("path")]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("is encrypted; give its password with --password"), "{said}");

    let out = app.run(&["ingest", "--no-index", "--password", "not-it", pdf.to_str().expect("path")]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("the password given is wrong"));
    assert!(app.docs().is_empty(), "nothing stored for a refused PDF");

    app.ok(&["ingest", "--no-index", "--password", "evident-secret", pdf.to_str().expect("path")]);
    let text = page_text(&app.page("encrypted", 1));
    assert!(text.contains("Improving Recommendation Systems"), "{text}");
}

#[test]
fn broken_pdfs_get_a_clear_error_and_leave_the_store_untouched() {
    let app = Appliance::new();
    app.ingest(&[&bench_pdf(PAPER)], &["--no-images", "--no-index"]);
    let before = app.ok(&["docs", "--json"]);

    let dir = tempfile::tempdir().expect("temp dir");
    let whole = std::fs::read(bench_pdf(FILING)).expect("read");
    let truncated = dir.path().join("truncated.pdf");
    std::fs::write(&truncated, &whole[..whole.len() / 2]).expect("write");
    let garbage = dir.path().join("garbage.pdf");
    let noise: Vec<u8> = (0..50_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&garbage, noise).expect("write");
    let damaged = dir.path().join("damaged.pdf");
    let mut body = b"%PDF-1.7\n".to_vec();
    body.extend((0..20_000u32).map(|i| (i.wrapping_mul(40_503) >> 7) as u8));
    body.extend(b"\n%%EOF\n");
    std::fs::write(&damaged, body).expect("write");

    for (file, sentence) in
        [(&truncated, "is truncated: it has no end-of-file marker"), (&garbage, "is not a PDF file"), (&damaged, "is damaged and PDFium cannot read it")]
    {
        let out = app.run(&["ingest", "--no-index", file.to_str().expect("path")]);
        assert!(!out.status.success(), "{} was accepted", file.display());
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains(sentence), "{said}");
        assert_eq!(said.lines().filter(|l| l.starts_with("failed")).count(), 1, "one line per failed file: {said}");
        assert_eq!(app.ok(&["docs", "--json"]), before, "the store changed after {}", file.display());
    }
    // A bad file among good ones fails alone.
    let out = app.run(&["ingest", "--no-index", "--no-images", garbage.to_str().expect("path"), bench_pdf(FILING).to_str().expect("path")]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 added (252 pages), 0 already present, 1 failed"));
}

#[test]
fn a_page_without_text_is_flagged() {
    let app = Appliance::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let scan = dir.path().join("drawing.pdf");
    std::fs::write(&scan, pdf_with_one_drawn_page()).expect("write");
    let out = app.ingest(&[&scan], &["--no-index"]);
    // OCR (ingest.ocr = auto) reads the page and finds no words in a drawing.
    assert!(out.contains("1 without a text layer, 1 read by OCR"), "{out}");
    let page = app.page("drawing", 1);
    assert_eq!(page["has_text_layer"].as_bool(), Some(false));
    assert!(blocks(&page).is_empty());
    let shown: serde_json::Value = serde_json::from_str(&app.ok(&["show", "drawing", "--page", "1", "--json"])).expect("page JSON");
    assert_eq!(shown["ocr"]["word_confidence"].as_array().map(Vec::len), Some(0), "{shown}");
}

#[test]
fn a_killed_ingest_leaves_no_trace_of_its_document() {
    let app = Appliance::new();
    app.ingest(&[&bench_pdf(PAPER)], &["--no-images", "--no-index"]);
    let before = app.ok(&["docs", "--json"]);

    let big = bench_pdf("financebench/CVSHEALTH_2018_10K.pdf");
    let mut child = app
        .command()
        .args(["ingest", "--no-index", big.to_str().expect("path")])
        .env("EVIDENT_LOG", "evident=debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ingest starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut reached = false;
    for line in BufReader::new(stderr).lines() {
        let line = line.expect("log line");
        if line.contains("page 40/392") {
            reached = true;
            break;
        }
    }
    assert!(reached, "the ingest never reported page 40");
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("child reaped");
    assert!(!status.success(), "the ingest finished before it was killed");

    // Reopening repairs the store to its last commit: the paper is whole, the filing absent.
    assert_eq!(app.ok(&["docs", "--json"]), before);
    let paper_text = page_text(&app.page(&doc_id(&app, PAPER), 1));
    assert!(paper_text.contains("Personality is a psychological factor"));
    let out = app.run(&["show", "CVSHEALTH_2018_10K.pdf"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no document matches"));

    // And the same file ingests cleanly afterwards.
    let out = app.ingest(&[&big], &["--no-images", "--no-index"]);
    assert!(out.contains("1 added (392 pages)"), "{out}");
    // Its metadata title is an SEC accession number, "0000064803-19-000013": the file's name
    // stands in for it.
    let docs = app.docs();
    assert!(docs.iter().any(|d| d["title"] == "CVSHEALTH_2018_10K"), "{docs:?}");
}

#[test]
fn rm_removes_a_document_and_its_pages() {
    let app = Appliance::new();
    app.ingest(&[&bench_pdf(PAPER), &bench_pdf("financebench/PEPSICO_2023_8K_dated-2023-05-05.pdf")], &["--no-index"]);
    let id = doc_id(&app, PAPER);
    let out = app.ok(&["rm", &id[..6]]);
    assert!(out.contains(&format!("removed  {id}")), "{out}");
    assert_eq!(app.docs().len(), 1);
    let out = app.run(&["show", &id, "--page", "1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no document matches"));
    // Ingesting it again brings it back whole.
    let out = app.ingest(&[&bench_pdf(PAPER)], &["--no-index"]);
    assert!(out.contains("1 added (9 pages)"), "{out}");
    assert!(page_text(&app.page(&id, 9)).len() > 100);
}

#[test]
fn a_second_process_gets_a_clear_sentence_while_the_store_is_busy() {
    let app = Appliance::new();
    let mut child = app
        .command()
        .args(["ingest", "--no-index", bench_pdf("financebench/CVSHEALTH_2018_10K.pdf").to_str().expect("path")])
        .env("EVIDENT_LOG", "evident=debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ingest starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    assert!(lines.any(|l| l.is_ok_and(|l| l.contains("page 2/"))), "ingest started");
    let out = app.run(&["docs"]);
    child.kill().expect("kill");
    child.wait().expect("reaped");
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("is in use by another evident process"), "{said}");
}

/// A one-page PDF that draws a rectangle and has no text at all, like a scan.
fn pdf_with_one_drawn_page() -> Vec<u8> {
    let objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>".to_vec(),
        common::hostile::stream_object("", b"0.2 0.4 0.6 rg 100 100 400 600 re f"),
    ];
    common::hostile::pdf_of_bytes(&objects, "")
}

#[test]
fn a_truncated_pdf_is_rebuilt_where_pdfium_can_and_an_unreadable_page_is_named() {
    let app = Appliance::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let whole = std::fs::read(bench_pdf(PAPER)).expect("read");
    // The last 1% gone (the end-of-file marker with it): PDFium rebuilds the rest.
    let cut = dir.path().join("cut.pdf");
    std::fs::write(&cut, &whole[..whole.len() * 99 / 100]).expect("write");
    let looped = dir.path().join("looped.pdf");
    std::fs::write(&looped, common::hostile::page_tree_loop()).expect("write");
    let out = app.ingest(&[&cut, &looped], &["--no-index"]);
    assert!(out.contains("cut.pdf (9 pages; it was truncated and PDFium rebuilt what was there"), "{out}");
    assert!(out.contains("looped.pdf (2 pages") && out.contains("1 unreadable and kept empty: page 2"), "{out}");
    let show = |name: &str| -> serde_json::Value { serde_json::from_str(&app.ok(&["show", name, "--json"])).expect("show JSON") };
    assert_eq!(show("cut.pdf")["damage"], serde_json::json!({ "truncated": true, "lost_pages": [] }));
    assert_eq!(show("looped.pdf")["damage"], serde_json::json!({ "truncated": false, "lost_pages": [2] }));
    assert!(page_text(&app.page("cut.pdf", 1)).contains("Improving Recommendation"));
    assert!(blocks(&app.page("looped.pdf", 2)).is_empty(), "a lost page is kept empty");
    assert!(app.ok(&["show", "cut.pdf"]).contains("damaged: it was truncated"));
    // A lost page has no image, and the check knows it.
    assert!(app.ok(&["check"]).contains("consistent"));
}

#[test]
fn a_page_that_crashes_pdfium_is_lost_alone_and_a_fresh_worker_reads_the_rest() {
    let app = Appliance::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("limits.toml");
    std::fs::write(&config, "[ingest]\nworker_memory_mib = 1024\n").expect("config");
    let pdf = dir.path().join("one-bad-page.pdf");
    std::fs::write(&pdf, common::hostile::bomb_on_page_two(1536)).expect("write");
    let out = app.command().arg("--config").arg(&config).args(["ingest", "--no-index"]).arg(&pdf).output().expect("runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("(3 pages") && said.contains("1 unreadable and kept empty: page 2"), "{said}");
    assert!(page_text(&app.page("one-bad-page.pdf", 1)).contains("Page one"));
    assert!(blocks(&app.page("one-bad-page.pdf", 2)).is_empty());
    assert!(page_text(&app.page("one-bad-page.pdf", 3)).contains("Page three"), "the page after the crash is read by a fresh worker");
}

#[test]
fn hostile_pdfs_end_in_a_document_or_a_sentence_within_their_deadlines() {
    let app = Appliance::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("limits.toml");
    let (open_s, doc_s) = (10, 20);
    std::fs::write(&config, format!("[ingest]\nopen_timeout_s = {open_s}\npage_timeout_s = 10\ndocument_timeout_s = {doc_s}\nworker_memory_mib = 1024\n"))
        .expect("config");
    let real = std::fs::read(bench_pdf(SMALL)).expect("read");
    let files: Vec<(String, std::path::PathBuf)> = common::hostile::corpus(&real)
        .into_iter()
        .map(|(name, bytes)| {
            let path = dir.path().join(&name);
            std::fs::write(&path, bytes).expect("write");
            (name, path)
        })
        .collect();
    let started = std::time::Instant::now();
    let out = app
        .command()
        .arg("--config")
        .arg(&config)
        .args(["ingest", "--no-index"])
        .args(files.iter().map(|(_, p)| p))
        .arg(bench_pdf(SMALL))
        .output()
        .expect("evident runs");
    let elapsed = started.elapsed();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "ingest ends by itself, reporting failures: {said}\n{}", String::from_utf8_lossy(&out.stderr));
    // Each document is bounded by its own deadlines, never by another's.
    let bound = std::time::Duration::from_secs(((open_s + doc_s) * (files.len() as u64 + 1)) as u64);
    assert!(elapsed < bound, "took {elapsed:?}");

    let line = |path: &Path| -> String {
        let shown = path.display().to_string();
        let mine: Vec<&str> = said.lines().filter(|l| (l.starts_with("added") || l.starts_with("failed")) && l.contains(shown.as_str())).collect();
        assert_eq!(mine.len(), 1, "one verdict for {shown}: {said}");
        mine[0].to_string()
    };
    let verdicts: Vec<(String, String)> = files.iter().map(|(name, path)| (name.clone(), line(path))).collect();
    let verdict = |name: &str| verdicts.iter().find(|(n, _)| n == name).map(|(_, l)| l.clone()).expect("verdict");
    assert!(line(&bench_pdf(SMALL)).starts_with("added"), "a normal PDF after the hostile ones is read");
    assert!(verdict("empty.pdf").contains("is empty"), "{}", verdict("empty.pdf"));
    assert!(verdict("not-a-pdf.pdf").contains("is not a PDF file"));
    assert!(verdict("shared-form-fields.pdf").contains("took longer than 10 s to read page 1"), "{}", verdict("shared-form-fields.pdf"));
    for (name, l) in &verdicts {
        if let Some(rest) = l.strip_prefix("failed") {
            assert!(rest.trim().len() > 30 && !rest.contains("panicked"), "{name}: {l}");
        }
    }
    let added = verdicts.iter().filter(|(_, l)| l.starts_with("added")).count();
    let failed = verdicts.len() - added;
    eprintln!("hostile files: {} tried, {added} stored, {failed} refused with a sentence, 0 host crashes, 0 hangs", verdicts.len());
    for (name, l) in &verdicts {
        eprintln!("  {name}: {}", l.split(dir.path().to_str().expect("path")).last().unwrap_or(l));
    }
    // Whatever was stored reads back whole.
    let docs = app.docs();
    assert_eq!(docs.len(), added + 1);
    for d in &docs {
        let id = d["id"].as_str().expect("id");
        let pages = d["page_count"].as_u64().expect("pages") as u32;
        for n in 1..=pages.min(3) {
            app.page(id, n);
        }
    }
}

#[test]
fn page_counts_and_page_images_are_bounded() {
    let app = Appliance::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("bounds.toml");
    std::fs::write(&config, "[ingest]\nmax_pages = 5\npage_image_max_px = 300\n").expect("config");
    let out = app.command().arg("--config").arg(&config).args(["ingest", "--no-index"]).arg(bench_pdf(PAPER)).output().expect("runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && said.contains("has 9 pages, more than the 5 a document may have (max_pages in [ingest])"), "{said}");
    // The largest page PDF allows, and a sliver: each image's longer side is the configured one.
    let pages = [("huge", "[0 0 14400 14400]"), ("sliver", "[0 0 3 14400]")];
    for (name, media_box) in pages {
        let pdf = common::hostile::pdf_of(
            &["<</Type/Catalog/Pages 2 0 R>>".into(), "<</Type/Pages/Kids[3 0 R]/Count 1>>".into(), format!("<</Type/Page/Parent 2 0 R/MediaBox{media_box}>>")],
            "",
        );
        let path = dir.path().join(format!("{name}.pdf"));
        std::fs::write(&path, pdf).expect("write");
        let out = app.command().arg("--config").arg(&config).args(["ingest", "--no-index"]).arg(&path).output().expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
        let png = dir.path().join(format!("{name}.png"));
        app.ok(&["show", &format!("{name}.pdf"), "--page", "1", "--image", png.to_str().expect("path")]);
        let bytes = std::fs::read(&png).expect("png");
        let (w, h) = (u32::from_be_bytes(bytes[16..20].try_into().expect("width")), u32::from_be_bytes(bytes[20..24].try_into().expect("height")));
        assert_eq!(w.max(h), 300, "{name}: {w} x {h}");
        assert!(w >= 1 && h >= 1);
    }
}

#[test]
fn the_binary_finds_its_home_from_any_directory() {
    let app = Appliance::new();
    let root = common::repo_root();
    let pdf = bench_pdf(SMALL);
    let elsewhere = tempfile::tempdir().expect("temp dir");
    // An install: the binary in <home>/bin beside set-up's .evident/ and the profiles, run from
    // a directory that has neither, with no EVIDENT_HOME.
    let home = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(root.join(".evident"), home.path().join(".evident")).expect("link");
    std::os::unix::fs::symlink(root.join("appliance-config"), home.path().join("appliance-config")).expect("link");
    std::fs::create_dir(home.path().join("bin")).expect("bin");
    let installed = home.path().join("bin/evident");
    std::fs::copy(env!("CARGO_BIN_EXE_evident"), &installed).expect("copy the binary");
    let out = std::process::Command::new(&installed)
        .current_dir(elsewhere.path())
        .env_remove("EVIDENT_HOME")
        .env_remove("EVIDENT_CONFIG")
        .arg("--data-dir")
        .arg(app.data.path())
        .args(["ingest", "--no-images"])
        .arg(&pdf)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 indexed"));
    // EVIDENT_HOME is believed: the repository works, a folder without set-up's files is named.
    let out = app.command().current_dir(elsewhere.path()).env("EVIDENT_HOME", &root).args(["search", "shareholder vote", "--k", "1"]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out =
        app.command().current_dir(elsewhere.path()).env("EVIDENT_HOME", elsewhere.path()).args(["ingest", "--no-index"]).arg(&pdf).output().expect("runs");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains(&elsewhere.path().join(".evident/lib/libpdfium.so").display().to_string()), "{said}");
}

/// A page of Helvetica lines: (font size, text) from the top.
fn text_page_stream(lines: &[(f32, &str)]) -> String {
    let mut ops = String::from("BT\n");
    let mut y = 760.0;
    for (size, text) in lines {
        ops.push_str(&format!("/F1 {size} Tf 1 0 0 1 72 {y} Tm ({text}) Tj\n"));
        y -= size * 2.5;
    }
    ops.push_str("ET");
    format!("<</Length {}>>\nstream\n{ops}\nendstream", ops.len())
}

#[test]
fn a_pdf_without_bookmarks_gets_an_outline_of_its_headings() {
    let body = "The committee reviewed the accounts of the year with the auditors present";
    let pages = [
        text_page_stream(&[(22.0, "Results of the Year"), (11.0, body), (11.0, body), (15.0, "Revenue by Segment"), (11.0, body)]),
        text_page_stream(&[(11.0, body), (22.0, "Outlook"), (11.0, body), (11.0, body)]),
    ];
    let font = "<</Type/Font/Subtype/Type1/BaseFont/Helvetica>>";
    let objects = vec![
        "<</Type/Catalog/Pages 2 0 R>>".to_string(),
        "<</Type/Pages/Kids[3 0 R 4 0 R]/Count 2>>".to_string(),
        format!("<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Resources<</Font<</F1 {font}>>>>/Contents 5 0 R>>"),
        format!("<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Resources<</Font<</F1 {font}>>>>/Contents 6 0 R>>"),
        pages[0].clone(),
        pages[1].clone(),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("no-bookmarks.pdf");
    std::fs::write(&path, common::hostile::pdf_of(&objects, "")).expect("write");
    let app = Appliance::new();
    app.ingest(&[&path], &["--no-images"]);
    let id = app.docs()[0]["id"].as_str().expect("id").to_string();
    let shown: serde_json::Value = serde_json::from_str(&app.ok(&["show", &id, "--json"])).expect("JSON");
    let outline: Vec<(String, u64, u64)> = shown["outline"]
        .as_array()
        .expect("outline")
        .iter()
        .map(|e| (e["title"].as_str().expect("title").to_string(), e["level"].as_u64().expect("level"), e["page"].as_u64().expect("page")))
        .collect();
    let want = [("Results of the Year", 0, 1), ("Revenue by Segment", 1, 1), ("Outlook", 0, 2)].map(|(t, l, p)| (t.to_string(), l, p));
    assert_eq!(outline, want, "{shown}");
}
