//! Retrieval end to end: ingest indexes pages, `evident search` ranks them in each mode,
//! `evident index` is idempotent, `rm` leaves no hit behind, `evident eval` scores a benchmark.

mod common;

use common::{Appliance, bench_pdf};

const PAPER: &str = "mmlongbench-doc/2303.05039v2.pdf";
const FILING: &str = "financebench/PEPSICO_2023_8K_dated-2023-05-05.pdf";

fn search(app: &Appliance, question: &str, mode: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["search", question, "--mode", mode, "--json", "--k", "5"];
    args.extend(extra);
    serde_json::from_str(&app.ok(&args)).expect("search JSON")
}

fn indexed_appliance() -> Appliance {
    let app = Appliance::new();
    let out = app.ingest(&[&bench_pdf(PAPER), &bench_pdf(FILING)], &["--no-images"]);
    assert!(out.contains("2 indexed"), "ingest indexes what it adds: {out}");
    app
}

#[test]
fn search_ranks_pages_in_every_mode_with_snippets() {
    let app = indexed_appliance();
    for mode in ["maxsim", "bm25", "hybrid"] {
        let hits = search(&app, "Amazon-beauty and Amazon-music personality datasets statistics", mode, &["--doc", "2303.05039v2.pdf"]);
        assert_eq!(hits.len(), 5, "{mode}");
        let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().expect("score")).collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{mode}: scores descend: {scores:?}");
        assert!(hits.iter().all(|h| h["title"].as_str().is_some_and(|t| t.starts_with("Improving Recommendation"))), "{mode}: --doc scopes the search");
        let pages: Vec<u64> = hits.iter().map(|h| h["page"].as_u64().expect("page")).collect();
        assert!(pages.iter().all(|p| (1..=9).contains(p)));
        assert!(hits.iter().all(|h| !h["snippet"].as_str().unwrap_or_default().is_empty()), "{mode}: snippets");
    }
    // The corpus-wide search finds the shareholder vote in the 8-K, not in the paper.
    for mode in ["maxsim", "bm25", "hybrid"] {
        let hits = search(&app, "outcome of the shareholder vote on the congruency report proposal at the annual meeting", mode, &[]);
        assert!(hits[0]["title"].as_str().is_some_and(|t| !t.starts_with("Improving")), "{mode}: {hits:?}");
    }
    // Over both documents a page's score mixes in its document's: at weight 1 it is the
    // document's alone, so the paper's nine pages share the best score and come first; at 0
    // each keeps its own.
    let question = "Amazon-beauty and Amazon-music personality datasets statistics";
    let weighted = |w: &str| -> Vec<serde_json::Value> {
        serde_json::from_str(&app.ok(&["search", question, "--document-weight", w, "--k", "10", "--json"])).expect("search JSON")
    };
    let whole = weighted("1");
    let titles: Vec<bool> = whole.iter().map(|h| h["title"].as_str().is_some_and(|t| t.starts_with("Improving"))).collect();
    assert_eq!(titles, [vec![true; 9], vec![false]].concat(), "{whole:?}");
    let scores = |hits: &[serde_json::Value]| hits.iter().map(|h| h["score"].as_f64().expect("score")).collect::<Vec<_>>();
    assert!(scores(&whole)[..9].iter().all(|s| (s - 1.0).abs() < 1e-6) && scores(&whole)[9] < 1.0, "{:?}", scores(&whole));
    let alone = scores(&weighted("0"));
    assert!(alone.windows(2).all(|w| w[0] > w[1]), "pages alone keep distinct scores: {alone:?}");
    let out = app.run(&["search", "personality", "--document-weight", "2"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("2 is not a weight between 0 and 1"), "{out:?}");
}

#[test]
fn index_is_idempotent_and_rm_leaves_no_hit() {
    let app = indexed_appliance();
    let out = app.ok(&["index"]);
    assert!(out.contains("0 indexed, 2 already up to date"), "{out}");
    app.ok(&["rm", "2303.05039v2.pdf"]);
    for mode in ["maxsim", "bm25"] {
        let hits = search(&app, "personality recommendation Amazon-beauty", mode, &[]);
        assert!(hits.iter().all(|h| !h["title"].as_str().unwrap_or_default().starts_with("Improving")), "{mode}: {hits:?}");
    }
    // Ingested again without indexing, it is found only after `evident index`.
    app.ingest(&[&bench_pdf(PAPER)], &["--no-images", "--no-index"]);
    let out = app.run(&["search", "personality", "--mode", "maxsim", "--doc", "2303.05039v2.pdf"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("run `evident index`"));
    // Over every document, the indexed one is searched and the other is named.
    let out = app.run(&["search", "personality", "--mode", "maxsim", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is still being indexed and was not searched"), "{}", String::from_utf8_lossy(&out.stderr));
    let hits: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("search JSON");
    assert!(!hits.is_empty() && hits.iter().all(|h| !h["title"].as_str().unwrap_or_default().starts_with("Improving")), "{hits:?}");
    // Ingesting the same file again (as after a run killed while indexing) finishes its index.
    let out = app.ingest(&[&bench_pdf(PAPER)], &["--no-images"]);
    assert!(out.contains("0 added") && out.contains("1 indexed"), "{out}");
    let out = app.ok(&["index"]);
    assert!(out.contains("0 indexed, 2 already up to date"), "{out}");
    assert_eq!(search(&app, "personality", "maxsim", &["--doc", "2303.05039v2.pdf"]).len(), 5);
}

#[test]
fn eval_scores_the_benchmark_questions_of_ingested_documents() {
    let app = indexed_appliance();
    let out_json = app.data.path().join("eval.json");
    let questions = common::repo_root().join("../shared/bench/questions.jsonl");
    let out = app.ok(&["eval", "--questions", questions.to_str().expect("path"), "--k", "1,5", "--json", out_json.to_str().expect("path")]);
    // Only the questions on the two ingested documents count, and only those with gold pages.
    let all = std::fs::read_to_string(&questions).expect("questions");
    let ours: Vec<serde_json::Value> = all
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("question"))
        .filter(|q| [PAPER, FILING].contains(&q["doc"].as_str().expect("doc")))
        .collect();
    let scored = ours.iter().filter(|q| !q["evidence_pages"].as_array().expect("pages").is_empty()).count();
    let unanswerable = all.lines().filter(|l| l.contains("\"evidence_pages\": []")).count();
    assert!(scored >= 5);
    assert!(out.contains(&format!("{scored} questions scored; {unanswerable} without evidence pages")), "{out}");
    let report: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&out_json).expect("json written")).expect("JSON");
    for mode in ["maxsim", "bm25", "hybrid"] {
        let overall = report.iter().find(|r| r["mode"] == mode && r["source"] == "overall").expect("overall row");
        assert_eq!(overall["questions"].as_u64(), Some(scored as u64));
        for metric in ["recall", "ndcg", "mrr"] {
            let v: Vec<f64> = overall[metric].as_array().expect("values").iter().map(|x| x.as_f64().expect("number")).collect();
            assert_eq!(v.len(), 2);
            assert!(v.iter().all(|x| (0.0..=1.0).contains(x)), "{mode} {metric}: {v:?}");
            assert!(v[1] >= v[0] - 1e-12 || metric == "ndcg", "{mode} {metric} grows with K: {v:?}");
        }
        // A 9-page paper and a 4-page filing: five pages hold some gold page for most questions.
        let recall5 = overall["recall"][1].as_f64().expect("recall@5");
        assert!(recall5 > 0.3, "{mode}: recall@5 {recall5}");
        assert!(overall.get("document_routing").is_none(), "routing is measured over the corpus only");
    }

    // Over the corpus each question searches both documents; routing asks whether its own
    // document comes first. A paper and a filing share few words, so most questions route right.
    let out = app.ok(&[
        "eval",
        "--questions",
        questions.to_str().expect("path"),
        "--k",
        "1,5",
        "--corpus",
        "--mode",
        "bm25",
        "--json",
        out_json.to_str().expect("path"),
    ]);
    assert!(out.lines().any(|l| l.contains("doc@1") && l.contains("doc@3")), "{out}");
    let report: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&out_json).expect("json written")).expect("JSON");
    let overall = report.iter().find(|r| r["source"] == "overall").expect("overall row");
    assert_eq!(overall["scope"], "corpus");
    let routing: Vec<f64> = overall["document_routing"]["accuracy"].as_array().expect("routing").iter().map(|x| x.as_f64().expect("number")).collect();
    assert_eq!(routing.len(), 2);
    assert!(routing[0] > 0.5 && routing[0] < 1.0 + 1e-12, "the right document first for most questions: {routing:?}");
    assert!(routing[1] >= routing[0] && routing[1] > 0.8, "among the first three of two documents whenever it was found: {routing:?}");
}

#[test]
fn an_ingest_killed_while_indexing_is_finished_by_the_next_ingest() {
    use std::io::{BufRead, BufReader};
    let app = Appliance::new();
    let paper = bench_pdf(PAPER);
    let mut child = app
        .command()
        .args(["ingest", "--no-images"])
        .arg(&paper)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("evident ingest starts");
    let stdout = child.stdout.take().expect("stdout");
    // Its pages are stored once "added" is printed; kill -9 while the encoder runs.
    let added = BufReader::new(stdout).lines().map_while(Result::ok).any(|l| l.starts_with("added"));
    assert!(added, "the document was read");
    child.kill().expect("kill -9");
    child.wait().expect("reaped");
    assert_eq!(app.docs().len(), 1, "the read document stays");
    let out = app.ingest(&[&paper], &["--no-images"]);
    assert!(out.contains("0 added") && out.contains("1 indexed"), "the next ingest indexes it: {out}");
    assert_eq!(search(&app, "personality", "maxsim", &["--doc", "2303.05039v2.pdf"]).len(), 5);
}

#[test]
fn check_finds_an_index_that_disagrees_with_its_document_and_repair_mends_it() {
    let app = indexed_appliance();
    let consistent = app.ok(&["check"]);
    assert!(consistent.contains("checked 2 documents") && consistent.contains("consistent"), "{consistent}");
    let paper = app.docs().into_iter().find(|d| d["title"].as_str().is_some_and(|t| t.starts_with("Improving"))).expect("paper");
    let id = paper["id"].as_str().expect("id").to_string();
    {
        // What a process killed between the two halves of a removal would leave: the store
        // holds the document, BM25 does not; and BM25 entries of a document that is gone.
        let lexical = evident::retrieval::LexicalIndex::open(&evident::retrieval::lexical_dir(app.data.path())).expect("lexical index");
        lexical.remove_document(&id).expect("remove");
        lexical.replace_document("00000000deadbeef", &[(1, "stray page".into())]).expect("stray");
    }
    let out = app.run(&["check"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains(&format!("problem  {id}")) && said.contains("BM25 holds 0 of its 9 pages"), "{said}");
    assert!(said.contains("00000000deadbeef: BM25 holds pages of no stored document"), "{said}");
    let repaired = app.ok(&["check", "--repair"]);
    assert!(repaired.contains("2 repaired, 0 left"), "{repaired}");
    assert!(app.ok(&["index"]).contains("1 indexed"));
    assert!(app.ok(&["check"]).contains("consistent"));
    assert_eq!(search(&app, "personality", "bm25", &["--doc", "2303.05039v2.pdf"]).len(), 5);
}

/// The page-token vectors `evident bench search` counts over every stored document.
fn stored_vectors(app: &Appliance, config: Option<&std::path::Path>) -> u64 {
    let pages: u64 = app.docs().iter().map(|d| d["page_count"].as_u64().expect("page count")).sum();
    let mut args = Vec::new();
    if let Some(c) = config {
        args.extend(["--config".to_string(), c.display().to_string()]);
    }
    args.extend(["bench", "search", "--pages", &pages.to_string(), "--runs", "1", "--k", "3"].map(String::from));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = app.ok(&refs);
    let line = out.lines().find(|l| l.contains("page-token vectors")).unwrap_or_else(|| panic!("no vector count in {out}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "page-token").unwrap_or_else(|| panic!("no vector count in {line}"));
    words[at - 1].parse().unwrap_or_else(|_| panic!("no vector count in {line}"))
}

#[test]
fn pooled_vectors_and_the_candidate_stage_keep_the_top_pages() {
    let app = indexed_appliance();
    let pages: u64 = app.docs().iter().map(|d| d["page_count"].as_u64().expect("page count")).sum();
    let question = "Amazon-beauty and Amazon-music personality datasets statistics";
    let page_ids = |hits: &[serde_json::Value]| {
        hits.iter().map(|h| (h["doc"].as_str().unwrap_or_default().to_string(), h["page"].as_u64().unwrap_or(0))).collect::<Vec<_>>()
    };
    let exact = page_ids(&search(&app, question, "maxsim", &[]));
    let before = stored_vectors(&app, None);

    // Pooling by 2, and a candidate stage for every search that scores 8 pages exactly.
    let config = app.data.path().join("pooled.toml");
    std::fs::write(&config, "[ingest]\ntoken_pool_factor = 2\n[compute]\ncandidate_stage_pages = 1\ncandidates_per_question = 8\ncentroids = 64\n")
        .expect("config");
    let c = config.display().to_string();
    let out = app.ok(&["--config", &c, "index"]);
    assert!(out.contains("2 indexed"), "a new pool factor pools the stored vectors: {out}");
    let out = app.ok(&["--config", &c, "index"]);
    assert!(out.contains("0 indexed, 2 already up to date"), "{out}");
    let after = stored_vectors(&app, Some(&config));
    // Each page keeps ceil(n / 2) of its n vectors.
    assert!(after * 2 >= before && after * 2 <= before + 2 * pages, "{before} vectors pooled by 2 became {after}");
    app.ok(&["check"]);

    // The pooled vectors still find the page exact search put first, among their top 3.
    let pooled = page_ids(&search(&app, question, "maxsim", &[]));
    assert!(pooled[..3].contains(&exact[0]), "before pooling {exact:?}, after {pooled:?}");
    // Through the candidate stage: with every page a candidate, exactly the exact search's top
    // 3; with 8 pages a question, most of it (each question's own centroid scores pick them).
    let kept = |candidates: &str| -> (u64, u64) {
        let n = pages.to_string();
        let out = app.ok(&["--config", &c, "bench", "search", "--pages", &n, "--runs", "1", "--k", "3", "--candidates", candidates, "--centroids", "64"]);
        let line = out.lines().find(|l| l.contains("it keeps")).unwrap_or_else(|| panic!("no candidate line in {out}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = words.iter().position(|w| *w == "keeps").expect("keeps");
        (words[at + 1].parse().expect("kept"), words[at + 3].parse::<u64>().unwrap_or(0))
    };
    let (all, _) = kept("1000");
    assert_eq!(all, 18, "every page a candidate: the exact top 3 of 6 questions");
    let (some, _) = kept("8");
    assert!(some >= 12, "8 candidates a question keep {some} of the exact top-3 pages of 6 questions");
    // Back to factor 1, `index` encodes the pages again.
    let out = app.ok(&["index"]);
    assert!(out.contains("2 indexed"), "{out}");
    assert_eq!(stored_vectors(&app, None), before);
}
