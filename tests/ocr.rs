//! PP-OCRv5 against onnxruntime (a fixture made once by tests/fixtures/make_ocr_reference.py):
//! the detector's probability map and the recogniser's best class at every step, natively on
//! the CPU, in burn's CPU backend and on wgpu (lavapipe here); and the native networks beside
//! burn's on inputs the fixture does not have (a batch of lines, another page size).

mod common;

use std::path::PathBuf;

use burn::prelude::Device;
use evident::config::CpuPrecision;
use evident::ocr::{self, OcrEngine, detector_input, write_line_input};

/// How far int8 products may move a probability from onnxruntime's f32 one.
const INT8_TOLERANCE: f64 = 0.05;

fn model_dir() -> PathBuf {
    common::repo_root().join(".evident/models").join(ocr::MODEL_DIR)
}

fn reference() -> serde_json::Value {
    let text = std::fs::read_to_string(common::repo_root().join("tests/fixtures/ocr_reference.json")).expect("fixture");
    serde_json::from_str(&text).expect("fixture JSON")
}

fn numbers(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().expect("array").iter().map(|x| x.as_f64().expect("number")).collect()
}

fn check_against_onnxruntime(engine: &OcrEngine, backend: &str, tolerance: f64) {
    let fixture = reference();
    let image = image::open(common::repo_root().join("tests/fixtures/ocr_reference.png")).expect("fixture image").to_rgb8();
    let (w, h) = (fixture["width"].as_u64().expect("width") as usize, fixture["height"].as_u64().expect("height") as usize);
    assert_eq!(image.dimensions(), (w as u32, h as u32));

    let prob = engine.probability_map(detector_input(&image, w as u32, h as u32), w, h).expect("detector runs");
    let stride = fixture["det_stride"].as_u64().expect("stride") as usize;
    let want = numbers(&fixture["det_prob"]);
    let got: Vec<f64> = (0..h).step_by(stride).flat_map(|y| (0..w).step_by(stride).map(move |x| (y, x))).map(|(y, x)| f64::from(prob[y * w + x])).collect();
    assert_eq!(got.len(), want.len());
    let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    if tolerance < INT8_TOLERANCE {
        assert!(worst < tolerance, "{backend}: the detector's probabilities differ from onnxruntime's by up to {worst}");
    } else {
        // Rounded products move single pixels on the steep edges of the text (by up to a
        // quarter here); what the boxes are made of, the text mask, and the mean stay put.
        let mean = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).sum::<f64>() / got.len() as f64;
        let flipped = got.iter().zip(&want).filter(|(a, b)| (**a > 0.3) != (**b > 0.3)).count();
        assert!(
            mean < 0.01 && flipped * 100 <= got.len(),
            "{backend}: detector mean difference {mean}, {flipped} of {} pixels on the other side of 0.3 (worst {worst})",
            got.len()
        );
    }
    let text_pixels = want.iter().filter(|&&p| p > 0.3).count();
    assert!(text_pixels > 100, "the fixture has text for the detector to find ({text_pixels} pixels)");

    let (top, left, width) = (
        fixture["rec_top"].as_u64().expect("top") as u32,
        fixture["rec_left"].as_u64().expect("left") as u32,
        fixture["rec_width"].as_u64().expect("width") as u32,
    );
    let line = image::imageops::crop_imm(&image, left, top, width, ocr::LINE_HEIGHT).to_image();
    let (best, best_prob, steps) = engine.best_classes(vec_line(&line, width), 1, width as usize).expect("recogniser runs");
    assert_eq!(steps as u64, fixture["rec_steps"].as_u64().expect("steps"), "{backend}: output steps");
    let want_best: Vec<usize> = numbers(&fixture["rec_argmax"]).into_iter().map(|v| v as usize).collect();
    assert_eq!(best, want_best, "{backend}: the recogniser's best class differs from onnxruntime's");
    let worst = best_prob.iter().zip(numbers(&fixture["rec_max"])).map(|(a, b)| (f64::from(*a) - b).abs()).fold(0.0, f64::max);
    assert!(worst < tolerance, "{backend}: the recogniser's probabilities differ from onnxruntime's by up to {worst}");
    let text = engine.recognise_input(vec_line(&line, width), 1, width as usize).expect("decodes")[0].text();
    assert_eq!(text, "Revenue grew 12.5% in 2023", "{backend}: the decoded line");
}

fn vec_line(line: &image::RgbImage, width: u32) -> Vec<f32> {
    let mut input = vec![0.0f32; (3 * ocr::LINE_HEIGHT * width) as usize];
    write_line_input(line, width, width, &mut input);
    input
}

#[test]
fn the_networks_match_onnxruntime_on_the_cpu() {
    let engine = OcrEngine::load(&model_dir(), &Device::flex()).expect("OCR models load");
    check_against_onnxruntime(&engine, "flex", 2e-3);
}

#[test]
fn the_networks_match_onnxruntime_on_wgpu() {
    let device = Device::wgpu(burn::prelude::DeviceKind::DefaultDevice);
    let engine = OcrEngine::load(&model_dir(), &device).expect("OCR models load");
    check_against_onnxruntime(&engine, "wgpu", 2e-3);
}

#[test]
fn the_native_networks_match_onnxruntime() {
    let engine = OcrEngine::load_native(&model_dir(), CpuPrecision::F32).expect("OCR models load");
    assert!(engine.is_native());
    check_against_onnxruntime(&engine, "native", 2e-3);
    // The element-wise nodes after each convolution run inside it: of the recogniser's 387
    // nodes other than Identity, and the detector's 334, these are what is left.
    let steps = |file: &str| ocr::NativeNetwork::load(&model_dir().join(file), CpuPrecision::F32).expect("loads").steps();
    let (recogniser, detector) = (steps(ocr::RECOGNISER_FILE), steps(ocr::DETECTOR_FILE));
    assert!(recogniser <= 387 / 2 && detector <= 334 / 2, "steps after fusion: recogniser {recogniser}, detector {detector}");
}

#[test]
fn the_native_networks_agree_with_burns_on_a_batch_and_another_size() {
    let native = OcrEngine::load_native(&model_dir(), CpuPrecision::F32).expect("OCR models load");
    let burn = OcrEngine::load(&model_dir(), &Device::flex()).expect("OCR models load");
    let image = image::open(common::repo_root().join("tests/fixtures/ocr_reference.png")).expect("fixture image").to_rgb8();
    // The detector on the page scaled to another multiple of 32 than the fixture's.
    let (w, h) = ocr::input_size(image.width(), image.height(), 0.77);
    let input = detector_input(&image, w, h);
    let (a, b) =
        (native.probability_map(input.clone(), w as usize, h as usize).expect("native"), burn.probability_map(input, w as usize, h as usize).expect("burn"));
    let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    assert!(worst < 1e-3, "detector maps differ by up to {worst}");
    assert!(a.iter().filter(|&&p| p > 0.3).count() > 100, "the scaled page still has text");
    // Three lines of different widths in one batch, each padded to the widest.
    let crops: Vec<image::RgbImage> = [(0u32, 200u32), (40, 330), (90, 123)]
        .iter()
        .map(|&(top, width)| {
            image::imageops::crop_imm(&image, 5, top.min(image.height() - ocr::LINE_HEIGHT), width.min(image.width() - 5), ocr::LINE_HEIGHT).to_image()
        })
        .collect();
    let width = crops.iter().map(|c| c.width()).max().expect("lines");
    let slot = (3 * ocr::LINE_HEIGHT * width) as usize;
    let mut input = vec![0.0f32; slot * crops.len()];
    for (k, c) in crops.iter().enumerate() {
        write_line_input(c, c.width(), width, &mut input[k * slot..(k + 1) * slot]);
    }
    let (na, np, ns) = native.best_classes(input.clone(), crops.len(), width as usize).expect("native");
    let (ba, bp, bs) = burn.best_classes(input, crops.len(), width as usize).expect("burn");
    assert_eq!((ns, &na), (bs, &ba), "best classes of a batch of lines");
    let worst = np.iter().zip(&bp).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    assert!(worst < 1e-3, "line probabilities differ by up to {worst}");
    assert!(na.iter().filter(|&&c| c != 0).count() > 10, "the lines hold characters, not only blanks");
}

#[test]
fn int8_networks_read_the_fixture_as_onnxruntime_does_and_stay_near_f32() {
    let int8 = OcrEngine::load_native(&model_dir(), CpuPrecision::Int8).expect("OCR models load");
    if !int8.is_int8() {
        // The kernels' own tests check the int8 products on every CPU; here f32 would run.
        eprintln!("no AVX-512 VNNI: OCR's products fell back to f32, as the engine reports");
        return;
    }
    check_against_onnxruntime(&int8, "native int8", INT8_TOLERANCE);
    let f32 = OcrEngine::load_native(&model_dir(), CpuPrecision::F32).expect("OCR models load");
    let image = image::open(common::repo_root().join("tests/fixtures/ocr_reference.png")).expect("fixture image").to_rgb8();
    let texts = |e: &OcrEngine| e.read(&image).expect("reads").iter().map(|l| l.text()).collect::<Vec<_>>();
    assert_eq!(texts(&int8), texts(&f32), "the same lines");
    // The confidences are compared on the same crops: the two detectors may place a line's
    // edge a pixel apart, which alone moves a line's confidence by 0.02.
    let lines = f32.read(&image).expect("reads");
    let crops: Vec<image::RgbImage> = lines
        .iter()
        .map(|l| image::imageops::crop_imm(&image, l.bbox.x0 as u32, l.bbox.y0 as u32, l.bbox.width() as u32, l.bbox.height() as u32).to_image())
        .collect();
    let scaled: Vec<u32> = crops.iter().map(|c| ocr::scaled_width(c.width(), c.height())).collect();
    let width = ocr::batch_width(&scaled);
    let slot = (3 * ocr::LINE_HEIGHT * width) as usize;
    let mut input = vec![0.0f32; slot * crops.len()];
    for (k, (c, &w)) in crops.iter().zip(&scaled).enumerate() {
        write_line_input(c, w, width, &mut input[k * slot..(k + 1) * slot]);
    }
    let (ia, ip, steps) = int8.best_classes(input.clone(), crops.len(), width as usize).expect("int8");
    let (fa, fp, _) = f32.best_classes(input, crops.len(), width as usize).expect("f32");
    // CTC's reading of a line's steps: repeats merged, blanks (class 0) dropped.
    let collapsed = |classes: &[usize]| {
        let mut out: Vec<usize> = classes.to_vec();
        out.dedup();
        out.retain(|&c| c != 0);
        out
    };
    for (k, line) in lines.iter().enumerate() {
        let span = k * steps..(k + 1) * steps;
        assert_eq!(collapsed(&ia[span.clone()]), collapsed(&fa[span.clone()]), "{:?}: the same characters", line.text());
        let agree: Vec<(f32, f32)> = span.filter(|&i| ia[i] == fa[i]).map(|i| (ip[i], fp[i])).collect();
        assert!(agree.len() * 100 >= steps * 95, "{:?}: the best class differs on {} of {steps} steps", line.text(), steps - agree.len());
        let mean_gap = agree.iter().map(|(x, y)| (x - y).abs()).sum::<f32>() / agree.len() as f32;
        let (ca, cf) = (confidence(&ia[k * steps..(k + 1) * steps], &ip[k * steps..]), confidence(&fa[k * steps..(k + 1) * steps], &fp[k * steps..]));
        assert!(mean_gap < 0.01, "{:?}: the steps' probabilities differ by {mean_gap} on average", line.text());
        assert!((ca - cf).abs() < 0.02, "{:?}: confidence {ca} in int8 against {cf} in f32", line.text());
    }
}

/// A line's confidence as the decoder counts it: the mean probability of each character's
/// first step.
fn confidence(classes: &[usize], probabilities: &[f32]) -> f32 {
    let firsts: Vec<f32> = (0..classes.len()).filter(|&i| classes[i] != 0 && (i == 0 || classes[i - 1] != classes[i])).map(|i| probabilities[i]).collect();
    firsts.iter().sum::<f32>() / firsts.len().max(1) as f32
}

#[test]
fn a_whole_image_reads_as_its_three_lines_in_order() {
    let engine = OcrEngine::load_native(&model_dir(), CpuPrecision::F32).expect("OCR models load");
    let image = image::open(common::repo_root().join("tests/fixtures/ocr_reference.png")).expect("fixture image").to_rgb8();
    let lines = engine.read(&image).expect("reads");
    let texts: Vec<String> = lines.iter().map(|l| l.text()).collect();
    assert_eq!(texts, ["Revenue grew 12.5% in 2023", "Net income: $4,210 million", "see page 47 (unaudited)"]);
    for line in &lines {
        assert!(line.confidence > 0.8, "{:?} is read with confidence {}", line.text(), line.confidence);
        // Characters advance left to right inside their line's box.
        assert!(line.chars.windows(2).all(|p| p[0].x0 <= p[1].x0), "{:?}", line.chars);
        assert!(line.chars.first().is_some_and(|c| c.x0 >= line.bbox.x0) && line.chars.last().is_some_and(|c| c.x1 <= line.bbox.x1));
    }
    // "2023" ends the first line: its characters lie in the right part of the line.
    let first = &lines[0];
    let two = first.chars.iter().rev().nth(3).expect("a character");
    assert_eq!(two.ch, '2');
    assert!(two.x0 > first.bbox.x0 + 0.7 * first.bbox.width(), "{two:?} in {:?}", first.bbox);
}

#[test]
fn the_generated_networks_are_what_burn_onnx_writes_from_the_shipped_files() {
    let out = tempfile::tempdir().expect("temp dir");
    for (onnx, generated) in [(ocr::DETECTOR_FILE, "detector.rs"), (ocr::RECOGNISER_FILE, "recogniser.rs")] {
        ocr::weights::generate(&model_dir().join(onnx), out.path()).expect("burn-onnx converts the file");
        let stem = onnx.trim_end_matches(".onnx");
        let fresh = std::fs::read_to_string(out.path().join(format!("{stem}.rs"))).expect("generated source");
        let committed = std::fs::read_to_string(common::repo_root().join("host/src/ocr/networks").join(generated)).expect("committed source");
        // The committed file's header (comment lines) replaces the generator's one-line header.
        let body = |text: &str| text.lines().skip_while(|l| l.starts_with("//")).collect::<Vec<_>>().join("\n");
        assert!(body(&fresh) == body(&committed), "host/src/ocr/networks/{generated} is not what burn-onnx generates from {onnx}");
    }
}

/// Pages 7 to 9 of a scanned slide deck of the benchmark (no text layer) as a PDF of their own,
/// cut by PDFium through the set-up's Python environment.
#[test]
fn a_scanned_page_is_found_by_words_only_its_image_has_and_cited_where_they_are() {
    let app = common::Appliance::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let pdf = common::scanned_pages(dir.path());
    // Ingested without OCR, as before OCR existed: the pages have no words to find.
    let out = app.ingest(&[&pdf], &["--no-images", "--no-enrich", "--ocr", "never"]);
    assert!(out.contains("3 without a text layer,") && !out.contains("read by OCR"), "{out}");
    assert!(common::page_text(&app.page("waves", 2)).is_empty());
    // `index` reads them with OCR (ingest.ocr is auto) and indexes them again.
    let out = app.ok(&["index"]);
    assert!(out.contains("(3 pages read by OCR)") && out.contains("1 indexed"), "{out}");

    let hits: serde_json::Value = serde_json::from_str(&app.ok(&["search", "wave speed frequency wavelength", "--k", "1", "--json"])).expect("search JSON");
    assert_eq!(hits[0]["page"].as_u64(), Some(2), "the slide with the wave formula comes first: {hits}");

    let shown: serde_json::Value = serde_json::from_str(&app.ok(&["show", "waves", "--page", "2", "--json"])).expect("page JSON");
    let ocr = &shown["ocr"];
    let page: evident::store::PageRecord = serde_json::from_value(shown["page"].clone()).expect("a page record");
    assert_eq!(ocr["blocks"].as_array().map(Vec::len), Some(page.blocks.len()), "every block of a scanned page is OCR's");
    let words = page.blocks.iter().flat_map(|b| &b.lines).flat_map(|l| &l.words).count();
    assert_eq!(ocr["word_confidence"].as_array().map(Vec::len), Some(words), "one confidence per OCR'd word");

    // onnxruntime's run of the same networks (tests/fixtures/make_ocr_reference.py's pipeline)
    // finds the line "Wave Speed = Frequency x Wavelength" at pixels (762, 106)-(1427, 147) of
    // the page drawn 1600 pixels wide. The citation's word boxes must lie on that line.
    let scale = 1600.0 / page.width;
    let line = (762.0 / scale, 106.0 / scale, 1427.0 / scale, 147.0 / scale);
    let blocks: Vec<&evident::store::Block> = page.blocks.iter().collect();
    let boxes = evident::retrieval::matching_word_boxes(&blocks, "frequency wavelength");
    assert!(!boxes.is_empty(), "the cited words are found on the page: {}", page.text());
    for b in &boxes {
        let inside = b.x0 >= line.0 - 4.0 && b.y0 >= line.1 - 4.0 && b.x1 <= line.2 + 4.0 && b.y1 <= line.3 + 4.0;
        assert!(inside, "the evidence box {b:?} lies on the line {line:?}");
    }
    let covered: f32 = boxes.iter().map(|b| b.width()).sum();
    assert!(covered > 0.4 * (line.2 - line.0), "the boxes cover the two words, not a sliver: {boxes:?} on {line:?}");
}

#[test]
fn bench_ocr_scores_a_born_digital_page_against_its_text_layer() {
    let app = common::Appliance::new();
    let report = common::bench_pdf("mmlongbench-doc/7c3f6204b3241f142f0f8eb8e1fefe7a.pdf");
    let report = report.to_str().expect("a UTF-8 path");
    // Without Tesseract the bench says how to get it, before any page is read.
    let out = app.run(&["bench", "ocr", report, "--pages", "1", "--tesseract", "/nonexistent/tesseract"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("apt-get install tesseract-ocr"), "{stderr}");

    let rows: serde_json::Value = serde_json::from_str(&app.ok(&["bench", "ocr", report, "--pages", "1", "--no-tesseract", "--json"])).expect("bench JSON");
    let rows = rows.as_array().expect("rows");
    let all = rows.iter().find(|r| r["kind"] == "all").expect("a row over all pages");
    assert_eq!(all["pages"].as_u64(), Some(1), "{rows:?}");
    assert!(all["reference_words"].as_u64().unwrap_or(0) >= 20, "the page's text layer is the reference: {rows:?}");
    // A clean report page: onnxruntime's run of these networks misreads about 1 % of its characters.
    let (cer, wer) = (all["cer"].as_f64().unwrap_or(1.0), all["wer"].as_f64().unwrap_or(1.0));
    assert!(cer < 0.05 && wer < 0.1, "CER {cer}, WER {wer}: {rows:?}");
}
