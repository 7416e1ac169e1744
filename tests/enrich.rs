//! Contract 0.2.0 end to end, through the built binary and real components
//! (plugins/test-enrich, plugins/test-artifact-memory): an enrich stage runs at ingest over a
//! benchmark PDF and its artifacts answer a question; a change of its parameters marks its set
//! stale and `index` redoes it; `kill -9` during enrich leaves no half set and `index` resumes;
//! hostile enrich stages each fail with one sentence while the document still lands; a crop a
//! stage sends reaches an OpenAI-compatible server as the image of that region, and one that
//! asks for the thinking model gets it; 0.1.0 stages answer beside 0.2.0 ones; DocMemo's two
//! stages build a document's schema at ingest and answer in rounds of belief-guided reading; a
//! stage marked `at_ingest = false` runs only at `index --profile`; HiKEY builds its tree and
//! routes; MLDocRAG builds its chunk-query graph and answers from the chunks its queries name.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const PAPER: &str = "mmlongbench-doc/2303.05039v2.pdf";
const FILING: &str = "financebench/PEPSICO_2023_8K_dated-2023-05-05.pdf";

/// A store, a profiles folder and a configuration naming the test components.
struct Setup {
    app: common::Appliance,
    dir: tempfile::TempDir,
}

impl Setup {
    fn new(limits: &str) -> Setup {
        Setup::over(".evident/test-plugins", limits, "")
    }

    /// A setup whose profiles find their components in `plugins` (under the repository root),
    /// with `more` added to the configuration.
    fn over(plugins: &str, limits: &str, more: &str) -> Setup {
        let dir = tempfile::tempdir().expect("temp dir");
        let plugins = common::repo_root().join(plugins);
        let config = format!(
            "{more}[plugins]\ndir = {:?}\nprofiles_dir = {:?}\n[plugins.limits]\n{limits}\n",
            plugins.to_str().expect("path"),
            dir.path().to_str().expect("path")
        );
        std::fs::write(dir.path().join("appliance.toml"), config).expect("config");
        Setup { app: common::Appliance::new(), dir }
    }

    fn config(&self) -> String {
        self.dir.path().join("appliance.toml").to_str().expect("path").to_string()
    }

    /// Writes profile `name`: test-enrich with `enrich` parameters, and `memory` as its answer stage.
    fn profile(&self, name: &str, enrich: &str, memory: &str) {
        let enrich = if enrich.is_empty() { String::new() } else { format!("[stages.enrich]\nplugin = \"test-enrich\"\nparams = {{ {enrich} }}\n") };
        let text = format!("description = \"{name}\"\n[retrieve]\nk = 3\nmode = \"bm25\"\n{enrich}[stages.memory]\n{memory}\n");
        std::fs::write(self.dir.path().join(format!("{name}.toml")), text).expect("profile");
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        let config = self.config();
        self.app.run(&[&["--config", config.as_str()], args].concat())
    }

    fn ok(&self, args: &[&str]) -> String {
        let config = self.config();
        self.app.ok(&[&["--config", config.as_str()], args].concat())
    }

    /// The document's enrich sets with every artifact.
    fn sets(&self, doc: &str) -> Vec<Value> {
        let v: Value = serde_json::from_str(&self.ok(&["artifacts", doc, "--k", "1000000", "--json"])).expect("JSON");
        v["sets"].as_array().expect("sets").clone()
    }

    fn only_document(&self) -> String {
        let docs = self.app.docs();
        assert_eq!(docs.len(), 1, "{docs:?}");
        docs[0]["id"].as_str().expect("id").to_string()
    }
}

const ARTIFACT_MEMORY: &str = "plugin = \"test-artifact-memory\"\nparams = { mode = \"bm25\" }";

fn of_kind<'a>(set: &'a Value, kind: &str) -> Vec<&'a Value> {
    set["shown"].as_array().expect("shown").iter().filter(|a| a["kind"] == kind).collect()
}

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

#[test]
fn enrich_runs_at_ingest_its_artifacts_answer_and_a_parameter_change_is_redone_by_index() {
    let s = Setup::new("timeout_s = 60");
    s.profile("cards", "words = 12", ARTIFACT_MEMORY);
    s.profile("labels", "", "plugin = \"test-hostile-memory\"");
    let out = s.ok(&["ingest", "--no-images", common::bench_pdf(PAPER).to_str().expect("path")]);
    let doc = s.only_document();
    let pages = s.app.docs()[0]["page_count"].as_u64().expect("pages");
    assert!(out.contains(&format!("enriched {doc}  test-enrich: ")) && out.contains(&format!("from {pages} pages")), "{out}");

    // One complete set: a page card per page, a heading per heading block (anchored on it),
    // and the document card linking to every heading.
    let sets = s.sets(&doc);
    assert_eq!(sets.len(), 1, "{sets:?}");
    let set = &sets[0];
    assert_eq!((set["state"].as_str(), set["pages_done"].as_u64()), (Some("complete"), Some(pages)));
    let cards = of_kind(set, "page-card");
    let mut card_pages: Vec<u64> = cards.iter().map(|a| a["page"].as_u64().expect("page")).collect();
    card_pages.sort();
    assert_eq!(card_pages, (1..=pages).collect::<Vec<_>>());
    assert!(cards.iter().all(|a| (1..=12).contains(&words(a["text"].as_str().expect("text")))), "{cards:?}");
    let headings = of_kind(set, "heading");
    assert!(headings.len() >= 3, "the paper has headings: {headings:?}");
    for h in &headings {
        let page = s.app.page(&doc, h["page"].as_u64().expect("page") as u32);
        let block = &common::blocks(&page)[h["blocks"][0].as_u64().expect("block") as usize];
        let normalised = common::block_text(block).split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(h["text"].as_str(), Some(normalised.as_str()), "a heading artifact is its block's text");
        assert!(h["bbox"].is_array());
    }
    // Regions reach the stage through pages.regions: the paper's Figure 1 on page 5.
    let regions = of_kind(set, "region");
    let figure = regions.iter().find(|r| r["text"].as_str().is_some_and(|t| t.starts_with("Figure 1:"))).expect("a region captioned Figure 1");
    assert_eq!(figure["page"].as_u64(), Some(5), "{figure}");
    let shown: Value = serde_json::from_str(&s.ok(&["show", &doc, "--page", "5", "--json"])).expect("JSON");
    let stored = shown["regions"].as_array().expect("regions").iter().find(|r| r["caption"] == figure["text"]).expect("the stored region");
    let b = &stored["bbox"];
    let want = [b["x0"].as_f64(), b["y0"].as_f64(), b["x1"].as_f64(), b["y1"].as_f64()].map(|v| v.expect("coordinate"));
    let got: Vec<f64> = figure["bbox"].as_array().expect("bbox").iter().map(|v| v.as_f64().expect("coordinate")).collect();
    assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() < 0.01), "{got:?} {want:?}");
    let doc_cards = of_kind(set, "doc-card");
    assert_eq!(doc_cards.len(), 1);
    assert!(doc_cards[0]["page"].is_null());
    assert_eq!(doc_cards[0]["links"].as_array().expect("links").len(), headings.len());
    assert_eq!(set["artifacts"].as_u64(), Some(set["shown"].as_array().expect("shown").len() as u64));
    // Read as an operator reads it, the set names its cost.
    let plain = s.ok(&["artifacts", &doc]);
    let first = plain.lines().next().unwrap_or_default();
    let calls = set["llm_calls"].as_u64().expect("calls");
    assert!(
        first.contains(&format!("{pages}/{pages} pages")) && first.contains(&format!("; {calls} model calls, ")) && first.contains(" s a page)"),
        "{plain}"
    );

    // The artifacts are searchable: a stage of 0.2.0 answers with the heading that matches,
    // citing its page and block.
    let target = headings.iter().find(|h| words(h["text"].as_str().unwrap_or_default()) >= 3).expect("a heading of three words or more");
    let question = target["text"].as_str().expect("text");
    let v: Value = serde_json::from_str(&s.ok(&["ask", question, "--profile", "cards", "--json"])).expect("JSON");
    assert_eq!(v["answer"].as_str(), Some(question), "{v}");
    let evidence = v["evidence"].as_array().expect("evidence");
    assert_eq!(evidence.len(), 1, "{v}");
    assert_eq!(evidence[0]["page"], target["page"]);
    assert_eq!(evidence[0]["boxes"].as_array().expect("boxes").len(), 1);
    let found: Value = serde_json::from_str(&s.ok(&["artifacts", &doc, "--search", question, "--mode", "bm25", "--kind", "heading", "--json"])).expect("JSON");
    assert_eq!(found["sets"][0]["shown"][0]["text"].as_str(), Some(question));

    // Nearest neighbours: of the same kind, never the artifact itself, best first, scored as
    // the host's similarity of the two texts scores them.
    s.profile("near", "words = 12", "plugin = \"test-artifact-memory\"\nparams = { behaviour = \"neighbours\", kind = \"heading\" }");
    let v: Value = serde_json::from_str(&s.ok(&["ask", question, "--profile", "near", "--json"])).expect("JSON");
    let rows: Vec<Vec<String>> = v["answer"].as_str().expect("answer").lines().map(|l| l.split(' ').map(str::to_string).collect()).collect();
    assert_eq!(rows.len(), 3, "{v}");
    let scores: Vec<f32> = rows.iter().map(|r| r[2].parse().expect("score")).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    for r in &rows {
        assert_eq!(r[1], "heading");
        assert_ne!(r[0], target["key"].as_str().expect("key"));
        let (score, similarity): (f32, f32) = (r[2].parse().expect("score"), r[3].parse().expect("similarity"));
        assert!((score - similarity).abs() < 0.01, "{r:?}");
    }
    std::fs::remove_file(s.dir.path().join("near.toml")).expect("removes the profile");

    // A stage of 0.1.0 answers beside it, and the registry says which contract each was built for.
    let labels: Value = serde_json::from_str(&s.ok(&["ask", "What share of seniors go online?", "--profile", "labels", "--json"])).expect("JSON");
    assert_eq!(labels["evidence"].as_array().expect("evidence").len(), 1, "{labels}");
    let plugins: Value = serde_json::from_str(&s.ok(&["plugins", "list", "--json"])).expect("JSON");
    let api = |name: &str| plugins.as_array().expect("list").iter().find(|p| p["name"] == name).map(|p| p["api"].clone());
    assert_eq!(api("test-enrich"), Some(Value::from("0.2.0")));
    assert_eq!(api("test-artifact-memory"), Some(Value::from("0.2.0")));
    assert_eq!(api("test-hostile-memory"), Some(Value::from("0.1.0")));

    // New parameters name another set: the old one is stale, the profile's stage is told to
    // run `evident index` rather than read it, and `index` builds the new one in its place.
    s.profile("cards", "words = 5", ARTIFACT_MEMORY);
    let sets = s.sets(&doc);
    assert_eq!(sets.iter().map(|x| x["state"].as_str().expect("state")).collect::<Vec<_>>(), ["stale"]);
    let refused = s.run(&["ask", question, "--profile", "cards"]);
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(message.contains("not built for this profile's enrich stage yet") && message.contains("evident index"), "{message}");
    let out = s.ok(&["index"]);
    assert!(out.contains(&format!("enriched {doc}  test-enrich: ")), "{out}");
    let sets = s.sets(&doc);
    assert_eq!(sets.len(), 1, "the stale set is gone: {sets:?}");
    assert_eq!(sets[0]["state"].as_str(), Some("complete"));
    assert!(sets[0]["params"].to_string().contains("\"5\""), "{}", sets[0]["params"]);
    assert!(of_kind(&sets[0], "page-card").iter().all(|a| words(a["text"].as_str().expect("text")) <= 5));
    let again: Value = serde_json::from_str(&s.ok(&["ask", question, "--profile", "cards", "--json"])).expect("JSON");
    assert_eq!(again["answer"].as_str(), Some(question));
}

/// Spins long enough per page (a second or two) that a kill lands while a page is being made.
const SLOW_PAGES: &str = "spin = 2000000000";

#[test]
fn kill_during_enrich_leaves_no_half_set_and_index_resumes_where_it_stopped() {
    let s = Setup::new("timeout_s = 60\nfuel = 100000000000");
    s.profile("slow", SLOW_PAGES, ARTIFACT_MEMORY);
    let config = s.config();
    let pdf = common::bench_pdf(FILING);
    let mut child = s
        .app
        .command()
        .args(["--config", config.as_str(), "ingest", "--no-images", pdf.to_str().expect("path")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ingest starts");
    // Killed as soon as the second page's artifacts are stored, while the third is being made.
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    let started = Instant::now();
    while !(line.starts_with("enrich ") && line.contains(": page 2 of 5")) {
        line.clear();
        assert!(stderr.read_line(&mut line).expect("reads") > 0, "ingest ended before enriching two pages");
        assert!(started.elapsed() < Duration::from_secs(300));
    }
    // SIGKILL: no handler runs, nothing is flushed.
    child.kill().expect("killed");
    child.wait().expect("reaped");

    let doc = s.only_document();
    let pages = 5;
    let sets = s.sets(&doc);
    assert_eq!(sets.len(), 1);
    let set = &sets[0];
    assert_eq!(set["state"].as_str(), Some("unfinished"), "{set}");
    let done = set["pages_done"].as_u64().expect("pages done");
    assert!((2..pages).contains(&done), "killed half-way: {done} of {pages} pages stored");
    // Whole pages only: every artifact kept belongs to a stored page, each stored page has its
    // card, and there is no document card yet.
    let shown = set["shown"].as_array().expect("shown");
    assert_eq!(set["artifacts"].as_u64(), Some(shown.len() as u64));
    assert!(shown.iter().all(|a| a["page"].as_u64().is_some_and(|p| p <= done)), "{shown:?}");
    assert_eq!(of_kind(set, "page-card").len() as u64, done);
    assert!(of_kind(set, "doc-card").is_empty());
    // An unfinished set is never served.
    let refused = s.run(&["ask", "What did PepsiCo announce?", "--profile", "slow"]);
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("not built"), "{refused:?}");

    let out = s.ok(&["index"]);
    assert!(out.contains(&format!("resumed at page {}", done + 1)), "{out}");
    let sets = s.sets(&doc);
    assert_eq!(sets[0]["state"].as_str(), Some("complete"));
    let mut card_pages: Vec<u64> = of_kind(&sets[0], "page-card").iter().map(|a| a["page"].as_u64().expect("page")).collect();
    card_pages.sort();
    assert_eq!(card_pages, (1..=pages).collect::<Vec<_>>(), "each page once, none twice after the resume");
    assert_eq!(of_kind(&sets[0], "doc-card").len(), 1);
}

#[test]
fn hostile_enrich_stages_fail_in_one_sentence_and_the_document_still_lands() {
    // An enrich call answers to its own time limit, not to a question stage's.
    let s = Setup::new("timeout_s = 600\nenrich_timeout_s = 3\nfuel = 100000000000\nmemory_mib = 64");
    let pdf = common::bench_pdf(FILING);
    // At ingest: the stage traps on the first page, and the document lands all the same.
    s.profile("hostile", "behaviour = \"trap\"", ARTIFACT_MEMORY);
    let out = s.run(&["ingest", "--no-images", pdf.to_str().expect("path")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "a failed enrich stage fails the command: {stdout}");
    assert!(stdout.contains("1 added (5 pages)") && stdout.contains("enrich stage test-enrich failed on page 1 of"), "{stdout}");
    let doc = s.only_document();
    // (behaviour, the step it fails on, what its sentence says)
    let cases: [(&str, &str, &[&str]); 7] = [
        ("loop", "page 1", &["time limit of 3 s (plugins.limits.enrich_timeout_s)"]),
        ("memory", "page 1", &["memory limit of 64 MiB"]),
        ("trap", "page 1", &["crashed"]),
        ("huge", "page 1", &["at most 10000"]),
        ("bad-anchor", "page 1", &["anchored on page 99999, and the document has 5 pages"]),
        ("duplicate-key", "page 1", &["two artifacts with the key \"same\""]),
        ("bad-link", "the document step", &["links to \"nobody-made-this\""]),
    ];
    for (behaviour, step, expected) in cases {
        s.profile("hostile", &format!("behaviour = \"{behaviour}\""), ARTIFACT_MEMORY);
        let out = s.run(&["index"]);
        assert!(!out.status.success(), "{behaviour}: a failed stage fails the command");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("failed")).collect();
        assert_eq!(failed.len(), 1, "{behaviour}: {stdout}");
        eprintln!("{behaviour}: {}", failed[0]);
        assert!(failed[0].contains(&format!("enrich stage test-enrich failed on {step} of {doc}: ")), "{behaviour}: {}", failed[0]);
        assert!(expected.iter().any(|e| failed[0].contains(e)), "{behaviour}: {}", failed[0]);
        let sets = s.sets(&doc);
        assert_eq!(sets.len(), 1, "{behaviour}: the earlier behaviour's set was removed as stale");
        assert_eq!(sets[0]["state"].as_str(), Some("failed"), "{behaviour}");
        if step == "page 1" {
            assert_eq!(sets[0]["artifacts"].as_u64(), Some(0), "{behaviour}: nothing of the failed call is kept");
        }
        // A failed set is never served.
        let refused = s.run(&["ask", "What did PepsiCo announce?", "--profile", "hostile"]);
        assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("not built"), "{behaviour}: {refused:?}");
        // The document stays stored and searchable.
        let hits: Value = serde_json::from_str(&s.ok(&["search", "PepsiCo", "--mode", "bm25", "--json"])).expect("JSON");
        assert!(!hits.as_array().expect("hits").is_empty(), "{behaviour}");
    }
}

struct EchoServer {
    child: std::process::Child,
    port: u16,
    images: tempfile::TempDir,
}

impl EchoServer {
    fn start() -> EchoServer {
        let root = common::repo_root();
        let images = tempfile::tempdir().expect("temp dir");
        let mut child = Command::new(root.join(".evident/venv/bin/python"))
            .arg(root.join("tests/fixtures/openai_test_server.py"))
            .arg(images.path())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the test server starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("port line");
        EchoServer { port: line.trim().parse().expect("a port"), child, images }
    }

    fn image(&self, n: usize) -> image::RgbImage {
        image::open(self.images.path().join(format!("{n}.png"))).expect("a saved PNG").to_rgb8()
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn stored_page_image(data: &Path, doc: &str, page: u32) -> image::RgbImage {
    let store = evident::store::Store::open(data).expect("store");
    let record = store.document(doc).expect("reads").expect("stored");
    let png = store.page_image(&record, page).expect("reads").expect("rendered");
    image::load_from_memory(&png).expect("PNG").to_rgb8()
}

#[test]
fn a_crop_reaches_the_openai_server_as_the_image_of_that_region_and_thinking_reaches_the_thinking_model() {
    let server = EchoServer::start();
    let s = Setup::new("timeout_s = 60");
    let generator = format!(
        "[generator]\nbackend = \"openai\"\n[generator.openai]\nbase_url = \"http://127.0.0.1:{}/v1\"\nmodel = \"echo\"\napi_key = \"test-key\"\nimages = true\n",
        server.port
    );
    let config = std::fs::read_to_string(s.config()).expect("config") + &generator;
    std::fs::write(s.config(), config).expect("config");
    // A copy of the filing, so that the test can take the file away later.
    let copy = s.dir.path().join("filing.pdf");
    std::fs::copy(common::bench_pdf(FILING), &copy).expect("copies");
    s.ok(&["ingest", copy.to_str().expect("path")]);
    let doc = s.only_document();
    let page = s.app.page(&doc, 1);
    let (width, height) = (page["width"].as_f64().expect("width") as f32, page["height"].as_f64().expect("height") as f32);
    // The top-left quarter of the first retrieved page.
    let (x1, y1) = (width / 2.0, height / 2.0);
    let memory =
        |dpi: u32| format!("plugin = \"test-artifact-memory\"\nparams = {{ behaviour = \"crop\", x0 = 0, y0 = 0, x1 = {x1}, y1 = {y1}, dpi = {dpi} }}");
    let ask = |dpi: u32| -> u32 {
        s.profile("crop", "", &memory(dpi));
        let v: Value = serde_json::from_str(&s.ok(&["ask", "What is on this page?", "--profile", "crop", "--json"])).expect("JSON");
        assert!(v["answer"].as_str().is_some_and(|a| a.ends_with("images: 1 png")), "{v}");
        v["evidence"][0]["page"].as_u64().expect("page") as u32
    };

    // With the file in place, the region is rendered from it at the resolution asked for (up
    // to 2048 pixels a side), and looks like that region of the page image.
    let cited = ask(600);
    let full = stored_page_image(s.app.data.path(), &doc, cited);
    let scale = full.width() as f32 / width;
    let (w, h) = ((x1 * scale).round() as u32, (y1 * scale).round() as u32);
    let region = image::imageops::crop_imm(&full, 0, 0, w, h).to_image();
    let elsewhere = image::imageops::crop_imm(&full, full.width() - w, full.height() - h, w, h).to_image();
    let sharp = server.image(1);
    assert_eq!(sharp.width().max(sharp.height()), 2048, "600 dpi of a quarter page is capped at 2048 pixels");
    assert!((sharp.width() as f32 / sharp.height() as f32 - x1 / y1).abs() < 0.01, "the region's shape");
    let seen = image::imageops::resize(&sharp, w, h, image::imageops::FilterType::Triangle);
    // Normalised cross-correlation of the two images' ink: 1 for the same drawing.
    let correlation = |a: &image::RgbImage, b: &image::RgbImage| -> f64 {
        let ink = |i: &image::RgbImage| i.pixels().map(|p| 255.0 - (p[0] as f64 + p[1] as f64 + p[2] as f64) / 3.0).collect::<Vec<f64>>();
        let (a, b) = (ink(a), ink(b));
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let (ma, mb) = (mean(&a), mean(&b));
        let cov: f64 = a.iter().zip(&b).map(|(x, y)| (x - ma) * (y - mb)).sum();
        let var = |v: &[f64], m: f64| v.iter().map(|x| (x - m) * (x - m)).sum::<f64>();
        cov / (var(&a, ma) * var(&b, mb)).sqrt().max(1e-9)
    };
    let (same, other) = (correlation(&seen, &region), correlation(&seen, &elsewhere));
    assert!(same > 0.8 && other < 0.3, "the crop is that region: correlation {same:.3}, and {other:.3} with another");
    ask(36);
    let small = server.image(2);
    let expected = (x1.max(y1) * 0.5).round() as i64;
    assert!((small.width().max(small.height()) as i64 - expected).abs() <= 1, "36 dpi is half a pixel a point");

    // Without the file, the crop is cut from the page image stored at ingest, whose resolution
    // it cannot pass.
    std::fs::remove_file(&copy).expect("removes the file");
    ask(600);
    let cut = server.image(3);
    assert_eq!((cut.width(), cut.height()), (w, h), "capped at the stored image's resolution");
    assert!(cut == region, "the region's pixels of the page image");

    // A stage that asks for the thinking model gets it when one is configured.
    let config = std::fs::read_to_string(s.config()).expect("config").replace("[generator]\n", "[generator]\nthinking_model = \"openai:echo-thinking\"\n");
    std::fs::write(s.config(), config).expect("config");
    let thinking = |on: bool| format!("plugin = \"test-artifact-memory\"\nparams = {{ behaviour = \"crop\", x1 = 100, y1 = 100, thinking = {on} }}");
    s.profile("think", "", &thinking(true));
    let v: Value = serde_json::from_str(&s.ok(&["ask", "Think it over", "--profile", "think", "--json"])).expect("JSON");
    assert!(v["answer"].as_str().is_some_and(|a| a.starts_with("[echo-thinking] You said: Think it over")), "its reasoning is not the answer: {v}");
    s.profile("think", "", &thinking(false));
    let v: Value = serde_json::from_str(&s.ok(&["ask", "Answer plainly", "--profile", "think", "--json"])).expect("JSON");
    assert!(v["answer"].as_str().is_some_and(|a| a.starts_with("You said: Answer plainly")), "{v}");
}

#[test]
fn docmemo_builds_a_schema_at_ingest_and_answers_in_rounds_citing_only_pages_it_read() {
    // The bundled DocMemo stages with small numbers and the small model, so that the test
    // takes seconds: generated summaries of a few words, two rounds of two pages. (The default
    // model answers through every stage in tests/plugins.rs and tests/server.rs.)
    let s = Setup::over(".evident/plugins", "timeout_s = 600", "[generator]\nmodel = \"smollm2-135m\"\n");
    let text = "description = \"docmemo, small\"\n[retrieve]\nk = 2\nmode = \"hybrid\"\n\
                [stages.enrich]\nplugin = \"docmemo-enrich\"\nparams = { summaries = true, page_tokens = 120, summary_tokens = 24 }\n\
                [stages.memory]\nplugin = \"docmemo-memory\"\nparams = { rounds = 2, pages_per_round = 2, page_tokens = 150, answer_tokens = 32, query_tokens = 12 }\n";
    std::fs::write(s.dir.path().join("docmemo-small.toml"), text).expect("profile");
    let out = s.ok(&["ingest", "--no-images", common::bench_pdf(FILING).to_str().expect("path")]);
    let doc = s.only_document();
    assert!(out.contains(&format!("enriched {doc}  docmemo-enrich: ")), "{out}");

    // The schema: a generated summary of every page with text, the document card.
    let sets = s.sets(&doc);
    assert_eq!(sets.len(), 1, "{sets:?}");
    let summaries = of_kind(&sets[0], "summary");
    assert!(summaries.len() >= 4, "a summary of each page with text: {summaries:?}");
    assert!(summaries.iter().all(|a| !a["text"].as_str().expect("text").trim().is_empty()));
    assert!(summaries.iter().all(|a| a["fields"][0] == serde_json::json!(["source", "generated"])), "{summaries:?}");
    let cards = of_kind(&sets[0], "doc-card");
    assert_eq!(cards.len(), 1, "{:?}", sets[0]);
    assert!(sets[0]["llm_calls"].as_u64().expect("calls") >= 4, "the summaries' model calls are counted: {}", sets[0]);

    let question = "At the Pepsico AGM held on May 3, 2023, what was the outcome of the shareholder vote on the proposal for a congruency report on net-zero emissions policies?";
    let v: Value = serde_json::from_str(&s.ok(&["ask", "--profile", "docmemo-small", "--json", question])).expect("JSON");
    let log: Vec<&str> = v["log"].as_array().expect("log").iter().map(|l| l.as_str().expect("line")).collect();
    // Each round logs its beliefs, then what it read; no page is read twice, at most two rounds.
    let beliefs: Vec<&&str> = log.iter().filter(|l| l.starts_with("beliefs round ")).collect();
    assert!(beliefs[0].starts_with("beliefs round 1 (λ = 0, "), "{log:?}");
    assert!(beliefs.iter().all(|l| l.contains(" (α ") && l.contains(", β ")), "{beliefs:?}");
    let rounds: Vec<Vec<u64>> = log
        .iter()
        .filter_map(|l| l.strip_prefix("round "))
        .map(|l| {
            let pages = l.split_once("read pages ").expect("pages").1.split(';').next().expect("list");
            pages.split(", ").map(|p| p.parse().expect("a page number")).collect()
        })
        .collect();
    assert!((1..=2).contains(&rounds.len()) && rounds.len() == beliefs.len(), "{log:?}");
    let read: Vec<u64> = rounds.concat();
    let mut once = read.clone();
    once.sort();
    once.dedup();
    assert_eq!(once.len(), read.len(), "a page is read in one round only: {log:?}");
    // The final page order: the retrieve step's pages, then those later rounds read.
    let ranked: Vec<u64> = v["ranked_pages"].as_array().expect("ranked").iter().map(|p| p[1].as_u64().expect("page")).collect();
    assert!(read.iter().all(|p| ranked.contains(p)), "{ranked:?} holds every page read: {read:?}");
    // Citations name only pages a round read; an answer nobody supports cites nothing.
    let cited: Vec<u64> = v["evidence"].as_array().expect("evidence").iter().map(|e| e["page"].as_u64().expect("page")).collect();
    assert!(cited.iter().all(|p| read.contains(p)), "cited {cited:?}, read {read:?}");
    if v["answerable"] == false {
        assert!(cited.is_empty() && rounds.len() == 2, "not answerable after every round: {v}");
    }
}

#[test]
fn pages_read_by_ocr_at_index_are_enriched_again() {
    let s = Setup::new("timeout_s = 60");
    s.profile("cards", "words = 12", ARTIFACT_MEMORY);
    let dir = tempfile::tempdir().expect("temp dir");
    let pdf = common::scanned_pages(dir.path());
    s.ok(&["ingest", "--no-images", "--ocr", "never", pdf.to_str().expect("path")]);
    let doc = s.only_document();
    let card_words = |s: &Setup| -> Vec<String> {
        let sets = s.sets(&doc);
        assert_eq!(sets.len(), 1, "{sets:?}");
        assert_eq!(sets[0]["state"].as_str(), Some("complete"), "{sets:?}");
        of_kind(&sets[0], "page-card")
            .iter()
            .flat_map(|a| a["text"].as_str().unwrap_or("").split_whitespace().map(str::to_lowercase).collect::<Vec<_>>())
            .collect()
    };
    // Enriched at ingest from pages without text.
    assert!(card_words(&s).is_empty(), "{:?}", card_words(&s));
    // `index` reads the pages with OCR; the set made from the empty pages is made again.
    let out = s.ok(&["index"]);
    assert!(out.contains("(3 pages read by OCR)"), "{out}");
    let words = card_words(&s);
    assert!(words.iter().any(|w| w.contains("wave")), "the cards now hold the slides' words: {words:?}");
}

#[test]
fn an_enrich_stage_marked_for_index_only_is_left_out_of_ingest_kept_and_built_by_index() {
    let s = Setup::new("timeout_s = 60");
    s.profile("cards", "words = 12", ARTIFACT_MEMORY);
    let later = format!(
        "description = \"later\"\n[retrieve]\nk = 3\nmode = \"bm25\"\n[stages.enrich]\nplugin = \"test-enrich\"\nat_ingest = false\nparams = {{ words = 7 }}\n[stages.memory]\n{ARTIFACT_MEMORY}\n"
    );
    std::fs::write(s.dir.path().join("later.toml"), later).expect("profile");
    let out = s.run(&["ingest", "--no-images", common::bench_pdf(FILING).to_str().expect("path")]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let doc = s.only_document();
    assert_eq!(stdout.matches(&format!("enriched {doc}  test-enrich: ")).count(), 1, "{stdout}");
    assert!(stderr.contains("the enrich stage of later runs only when asked: `evident index --profile later`"), "{stderr}");
    let params = |sets: &[Value]| -> Vec<String> { sets.iter().map(|x| format!("{} {}", x["state"].as_str().unwrap_or("?"), x["params"])).collect() };
    let sets = s.sets(&doc);
    assert_eq!(sets.len(), 1, "{:?}", params(&sets));
    assert!(sets[0]["params"].to_string().contains("\"12\""), "{:?}", params(&sets));

    let refused = s.run(&["ask", "What did the filing report?", "--profile", "later"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("evident index"));
    // A plain `index` leaves it too; `index --profile later` builds it beside the other set,
    // which stays.
    let out = s.ok(&["index"]);
    assert!(!out.contains("enriched"), "{out}");
    assert_eq!(s.sets(&doc).len(), 1);
    assert!(!s.run(&["index", "--profile", "nosuch"]).status.success());
    let out = s.ok(&["index", "--profile", "later"]);
    assert_eq!(out.matches(&format!("enriched {doc}  test-enrich: ")).count(), 1, "{out}");
    let sets = s.sets(&doc);
    assert_eq!(sets.len(), 2, "{:?}", params(&sets));
    assert!(sets.iter().all(|x| x["state"] == "complete"), "{:?}", params(&sets));
    assert!(sets.iter().any(|x| x["params"].to_string().contains("\"7\"")), "{:?}", params(&sets));
    s.ok(&["ask", "What did the filing report?", "--profile", "later"]);

    // at_ingest belongs to the enrich stage alone.
    std::fs::write(
        s.dir.path().join("bad.toml"),
        format!("description = \"bad\"\n[retrieve]\nk = 3\nmode = \"bm25\"\n[stages.memory]\n{ARTIFACT_MEMORY}\nat_ingest = false\n"),
    )
    .expect("profile");
    let bad = s.run(&["ask", "What did the filing report?", "--profile", "bad"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("at_ingest applies to the enrich stage only"), "{}", String::from_utf8_lossy(&bad.stderr));
}

/// A field of an artifact as `artifacts --json` shows it (a list of [key, value] pairs).
fn field<'a>(artifact: &'a Value, key: &str) -> Option<&'a str> {
    artifact["fields"].as_array()?.iter().find(|f| f[0] == key).and_then(|f| f[1].as_str())
}

#[test]
fn hikey_builds_a_tree_at_ingest_routes_over_two_documents_and_packs_under_its_budget() {
    // The bundled HiKEY stages with the small model and a small budget, over a paper (headings,
    // figures, tables) and a filing.
    let s = Setup::over(".evident/plugins", "timeout_s = 600", "[generator]\nmodel = \"smollm2-135m\"\n");
    let text = "description = \"hikey, small\"\n[retrieve]\nk = 0\nmode = \"hybrid\"\n\
                [stages.enrich]\nplugin = \"hikey-enrich\"\nparams = { ctx_tokens = 60 }\n\
                [stages.memory]\nplugin = \"hikey-memory\"\nparams = { docs = 2, sections = 2, budget = 400, answer_tokens = 32 }\n";
    std::fs::write(s.dir.path().join("hikey-small.toml"), text).expect("profile");
    let out = s.ok(&["ingest", "--no-images", common::bench_pdf(PAPER).to_str().expect("path"), common::bench_pdf(FILING).to_str().expect("path")]);
    let docs = s.app.docs();
    let id_of =
        |file: &str| docs.iter().find(|d| d["source_path"].as_str().is_some_and(|p| p.ends_with(file))).map(|d| d["id"].as_str().expect("id").to_string());
    let (paper, filing) = (id_of(PAPER).unwrap_or_else(|| panic!("{docs:?}")), id_of(FILING).unwrap_or_else(|| panic!("{docs:?}")));
    for doc in [&paper, &filing] {
        assert!(out.contains(&format!("enriched {doc}  hikey-enrich: ")), "{out}");
    }

    // The paper's tree: units typed text and table or figure, sections with their paths from
    // the title, an upper context per visual unit, one Doc_card.
    let sets = s.sets(&paper);
    assert_eq!(sets.len(), 1, "{sets:?}");
    let set = &sets[0];
    let units = of_kind(set, "unit");
    assert!(units.iter().filter(|u| field(u, "type") == Some("text")).count() >= 50, "{}", units.len());
    let visual = units.iter().filter(|u| matches!(field(u, "type"), Some("table" | "figure"))).count();
    assert!(visual >= 1, "the paper's figures and tables are units");
    assert_eq!(of_kind(set, "ctx").len(), visual, "an upper context per table and figure");
    let sections = of_kind(set, "sec-card");
    assert!(sections.iter().filter(|c| c["text"].as_str().is_some_and(|t| t.contains(" > "))).count() >= 3, "{sections:?}");
    let cards = of_kind(set, "doc-card");
    assert_eq!(cards.len(), 1);
    assert!(sections.iter().skip(1).filter_map(|c| field(c, "title")).all(|t| cards[0]["text"].as_str().is_some_and(|card| card.contains(t))));

    // A question about the filing is routed to it; the host retrieves nothing; the evidence is
    // packed within 400 tokens; citations name pages the stage read.
    let question = "At the Pepsico AGM held on May 3, 2023, what was the outcome of the shareholder vote on the proposal for a congruency report on net-zero emissions policies?";
    let v: Value = serde_json::from_str(&s.ok(&["ask", "--profile", "hikey-small", "--json", "--trace", question])).expect("JSON");
    let log: Vec<&str> = v["log"].as_array().expect("log").iter().map(|l| l.as_str().expect("line")).collect();
    let route = log.iter().find_map(|l| l.strip_prefix("route: ")).unwrap_or_else(|| panic!("{log:?}"));
    assert!(route.starts_with(&format!("{filing} (")) && route.contains(&paper), "{route}");
    let retrieve = v["trace"].as_array().expect("trace").iter().find(|t| t["stage"] == "retrieve").expect("retrieve step");
    assert_eq!(retrieve["output"], "skipped (k = 0)");
    let packed = log.iter().find_map(|l| l.strip_prefix("packed: ")).unwrap_or_else(|| panic!("{log:?}"));
    let tokens: u32 = packed.split(", ").nth(1).and_then(|t| t.split(" of ").next()).and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("{packed}"));
    assert!(tokens > 0 && tokens <= 400 && packed.ends_with(" of 400 tokens"), "{packed}");
    let ranked: Vec<(String, u64)> =
        v["ranked_pages"].as_array().expect("ranked").iter().map(|p| (p[0].as_str().expect("doc").to_string(), p[1].as_u64().expect("page"))).collect();
    assert_eq!(ranked.first().map(|p| p.0.as_str()), Some(filing.as_str()), "{ranked:?}");
    for e in v["evidence"].as_array().expect("evidence") {
        let cited = (e["document"].as_str().expect("doc").to_string(), e["page"].as_u64().expect("page"));
        assert!(ranked.contains(&cited), "cited {cited:?}, read {ranked:?}");
    }
}

#[test]
fn mldocrag_builds_its_chunk_query_graph_when_asked_and_answers_from_the_chunks_its_queries_name() {
    // The bundled MLDocRAG stages with the 0.5B model writing at most 3 pairs per chunk, over
    // the two pages of the filing that report the votes.
    let s = Setup::over(".evident/plugins", "timeout_s = 600", "[generator]\nmodel = \"qwen2.5-0.5b\"\n");
    let text = "description = \"mldocrag, small\"\n[retrieve]\nk = 0\nmode = \"hybrid\"\n\
                [stages.enrich]\nplugin = \"mldocrag-enrich\"\nat_ingest = false\nparams = { max_queries = 3 }\n\
                [stages.memory]\nplugin = \"mldocrag-memory\"\nparams = { answer_tokens = 32 }\n";
    std::fs::write(s.dir.path().join("mldocrag-small.toml"), text).expect("profile");
    let pdf = common::pages_of(FILING, &[3, 4], &s.dir.path().join("votes.pdf"));
    s.ok(&["ingest", "--no-images", pdf.to_str().expect("path")]);
    let doc = s.only_document();
    assert!(s.sets(&doc).is_empty(), "MDoc2Query does not run at ingest");
    let out = s.ok(&["index", "--profile", "mldocrag-small"]);
    assert!(out.contains(&format!("enriched {doc}  mldocrag-enrich: ")), "{out}");

    // Chunks carry no text (nothing embeds them) and hold their content in a field; every query
    // node links to its chunk, which links back, and answers from it.
    let sets = s.sets(&doc);
    let set = &sets[0];
    let chunks = of_kind(set, "chunk");
    let queries = of_kind(set, "query");
    assert!(chunks.len() >= 2 && !queries.is_empty(), "{} chunks, {} queries", chunks.len(), queries.len());
    let lower_words = |t: &str| t.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect::<Vec<_>>();
    for c in &chunks {
        assert_eq!(c["text"], "", "{c}");
        assert!(matches!(field(c, "modality"), Some("text" | "table" | "figure")));
    }
    for q in &queries {
        let key = field(q, "chunk").expect("chunk field");
        let chunk = chunks.iter().find(|c| c["key"] == key).unwrap_or_else(|| panic!("no chunk {key}"));
        assert_eq!(q["links"][0], key);
        assert!(chunk["links"].as_array().expect("links").contains(&q["key"]));
        assert_eq!(q["page"], chunk["page"]);
        let content: std::collections::HashSet<String> = lower_words(field(chunk, "content").unwrap_or("")).into_iter().collect();
        let answer = lower_words(field(q, "answer").unwrap_or(""));
        assert!(2 * answer.iter().filter(|w| content.contains(*w)).count() >= answer.len(), "{q}");
    }

    // Asked a node's own question, that node passes the threshold and its chunk is ranked; the
    // best chunk's page leads the request's page order; the host retrieves nothing; citations
    // name pages it read.
    let node = queries[0];
    let question = field(node, "query").expect("query");
    let v: Value = serde_json::from_str(&s.ok(&["ask", "--profile", "mldocrag-small", "--json", "--trace", question])).expect("JSON");
    let log: Vec<&str> = v["log"].as_array().expect("log").iter().map(|l| l.as_str().expect("line")).collect();
    let seeds = log.iter().find_map(|l| l.strip_prefix("query nodes: ")).unwrap_or_else(|| panic!("{log:?}"));
    assert!(!seeds.ends_with(" 0 kept"), "{seeds}");
    assert!(log.iter().any(|l| l.starts_with("expanded: ")), "{log:?}");
    let retrieve = v["trace"].as_array().expect("trace").iter().find(|t| t["stage"] == "retrieve").expect("retrieve step");
    assert_eq!(retrieve["output"], "skipped (k = 0)");
    let chunks_line = log.iter().find_map(|l| l.strip_prefix("chunks: ")).unwrap_or_else(|| panic!("{log:?}"));
    let listed: Vec<(&str, u64)> = chunks_line
        .split(", ")
        .map(|c| {
            let parts: Vec<&str> = c.split(' ').collect();
            (parts[0], parts[2].trim_start_matches('p').parse().expect("page"))
        })
        .collect();
    assert!(listed.iter().any(|(key, _)| Some(*key) == field(node, "chunk")), "{chunks_line}");
    let ranked: Vec<u64> = v["ranked_pages"].as_array().expect("ranked").iter().map(|p| p[1].as_u64().expect("page")).collect();
    assert_eq!(ranked.first(), Some(&listed[0].1), "{ranked:?} {log:?}");
    for e in v["evidence"].as_array().expect("evidence") {
        assert!(ranked.contains(&e["page"].as_u64().expect("page")), "{v}");
    }
}
