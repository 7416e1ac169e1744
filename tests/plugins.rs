//! The stage plugin host with real components (built by scripts/build-plugins.sh), a real store
//! holding a benchmark PDF, the real encoder and generator: hostile components each get a clear
//! error and the host answers the next request normally; a component of the wrong world is
//! refused at load, naming what it lacks; `evident ask` answers with cited pages.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use evident::generate::EmbeddedGenerator;
use evident::models::{ComputeDevice, TextEncoder};
use evident::pipeline::{PipelineError, Profile, RequestHost, ResolvedProfile, RetrieveSettings, Services, StageBinding};
use evident::plugins::{PluginError, StageKind, StageLimits, StageRuntime};
use evident::retrieval::{LexicalIndex, MaxSimBackend, SearchMode, lexical_dir};
use evident::store::Store;

const PDF: &str = "mmlongbench-doc/PIP_Seniors-and-Tech-Use_040314.pdf";
const QUESTION: &str = "What share of seniors go online?";

fn component_bytes(name: &str) -> Vec<u8> {
    let root = common::repo_root();
    let path = [root.join(".evident/plugins"), root.join(".evident/test-plugins")]
        .into_iter()
        .map(|d| d.join(format!("{name}.wasm")))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name}.wasm is not built; run scripts/build-plugins.sh"));
    std::fs::read(path).expect("reads")
}

struct Fixture {
    _app: common::Appliance,
    services: Arc<Services>,
}

impl Fixture {
    fn new() -> Fixture {
        let app = common::Appliance::new();
        app.ingest(&[&common::bench_pdf(PDF)], &["--no-images"]);
        let cpu = ComputeDevice { device: burn::prelude::Device::flex(), wgpu: false };
        let models = common::repo_root().join(".evident/models");
        let services = Services {
            store: Arc::new(Store::open(app.data.path()).expect("store")),
            lexical: Arc::new(LexicalIndex::open(&lexical_dir(app.data.path())).expect("lexical")),
            encoder: Arc::new(TextEncoder::load(&models.join("all-minilm-l6-v2"), &cpu.device).expect("encoder")),
            maxsim: Arc::new(MaxSimBackend::Cpu(evident_kernels::MaxSimCpu::default())),
            vectors: Arc::new(evident::retrieval::PageVectorCache::new(64)),
            artifacts: Arc::new(evident::retrieval::ArtifactCache::new(64)),
            token_pool_factor: 1,
            candidates: Arc::new(evident::retrieval::CandidateStage::new(evident::retrieval::CandidateSettings {
                min_pages: 0,
                per_question: 1000,
                centroids: 1024,
            })),
            generator: Arc::new(EmbeddedGenerator::load(&models.join("smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"), &cpu).expect("generator")),
            thinking: None,
            generator_images: false,
            prompt_cache_bytes: 256 << 20,
            limits: evident::config::PipelineLimits { max_tokens_per_call: 4096, max_pages_per_search: 1000, log_lines: 1000 },
            document_weight: 0.5,
            pdf: None,
        };
        Fixture { _app: app, services: Arc::new(services) }
    }

    /// A registry of the bundled components over this store and the profiles in `profiles`.
    fn bundled_registry(&self, profiles: &std::path::Path) -> evident::registry::PluginRegistry {
        let runtime =
            Arc::new(StageRuntime::new(StageLimits { memory_mib: 128, fuel: 20_000_000_000, timeout_s: 600, enrich_timeout_s: 1800 }).expect("runtime"));
        evident::registry::PluginRegistry::new(runtime, self.services.store.clone(), common::repo_root().join(".evident/plugins"), profiles.to_path_buf())
    }

    fn host(&self) -> Arc<RequestHost> {
        let docs = self.services.store.documents().expect("documents");
        Arc::new(RequestHost::new(self.services.clone(), docs, 7))
    }
}

/// A stage of a test profile: its kind, plugin and parameters.
type StageSpec<'a> = (StageKind, &'a str, &'a [(&'a str, &'a str)]);

fn profile(runtime: &StageRuntime, stages: &[StageSpec]) -> ResolvedProfile {
    let mut bindings = BTreeMap::new();
    let mut components = HashMap::new();
    for (kind, plugin, params) in stages {
        let params = params.iter().map(|(k, v)| (k.to_string(), toml::Value::String(v.to_string()))).collect();
        bindings.insert(*kind, StageBinding { plugin: plugin.to_string(), params, at_ingest: true });
        let component = runtime.compile(&component_bytes(plugin), *kind).expect("compiles");
        components.insert(*kind, (plugin.to_string(), Arc::new(component)));
    }
    let profile = Profile { name: "test".into(), description: String::new(), retrieve: RetrieveSettings { k: 4, mode: SearchMode::Bm25 }, stages: bindings };
    ResolvedProfile { profile, components }
}

fn verify_with(runtime: &StageRuntime, behaviour: &str) -> ResolvedProfile {
    profile(runtime, &[(StageKind::Verify, "test-hostile-verify", &[("behaviour", behaviour)]), (StageKind::Memory, "test-hostile-memory", &[])])
}

fn stage_error(result: Result<evident::pipeline::Outcome, PipelineError>) -> (StageKind, PluginError) {
    match result {
        Err(PipelineError::Stage { stage, source, .. }) => (stage, source),
        Err(other) => panic!("expected a stage error, got {other}"),
        Ok(o) => panic!("expected a stage error, got an answer: {}", o.answer),
    }
}

#[test]
fn hostile_components_get_clear_errors_and_the_host_keeps_serving() {
    let fixture = Fixture::new();
    let limits = StageLimits { memory_mib: 64, fuel: 2_000_000_000, timeout_s: 30, enrich_timeout_s: 1800 };
    let runtime = StageRuntime::new(limits).expect("runtime");
    let normal = verify_with(&runtime, "served-by-a");
    let answer_normally = |runtime: &StageRuntime| {
        let out = evident::pipeline::run(runtime, &normal, fixture.host(), QUESTION).expect("a normal request is answered");
        assert_eq!(out.answer.split(',').next(), Some("served-by-a"), "{}", out.answer);
        assert_eq!(out.evidence.len(), 1);
    };
    answer_normally(&runtime);

    // An endless loop runs out of fuel.
    let (stage, err) = stage_error(evident::pipeline::run(&runtime, &verify_with(&runtime, "loop"), fixture.host(), QUESTION));
    assert_eq!(stage, StageKind::Verify);
    assert!(matches!(err, PluginError::OutOfFuel(_)), "{err}");
    answer_normally(&runtime);

    // With fuel to spare, the wall-clock deadline stops it.
    let patient = StageRuntime::new(StageLimits { memory_mib: 64, fuel: u64::MAX / 4, timeout_s: 2, enrich_timeout_s: 1800 }).expect("runtime");
    let started = std::time::Instant::now();
    let (_, err) = stage_error(evident::pipeline::run(&patient, &verify_with(&patient, "loop"), fixture.host(), QUESTION));
    assert!(matches!(err, PluginError::Timeout { seconds: 2, .. }), "{err}");
    assert!(started.elapsed().as_secs() < 10, "stopped near its deadline");
    assert!(err.to_string().contains("time limit of 2 s (plugins.limits.timeout_s)"), "{err}");

    // A stage that ignores what the host says is still stopped when its request is cancelled:
    // the host ends the call at its next host function, long before fuel or time run out.
    let host = fixture.host();
    let canceller = {
        let host = host.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(1000));
            host.cancel();
        })
    };
    let patient = StageRuntime::new(StageLimits { memory_mib: 64, fuel: u64::MAX / 4, timeout_s: 600, enrich_timeout_s: 1800 }).expect("runtime");
    let (_, err) = stage_error(evident::pipeline::run(&patient, &verify_with(&patient, "host-loop"), host, QUESTION));
    canceller.join().expect("cancels");
    assert!(matches!(err, PluginError::Cancelled), "{err}");
    answer_normally(&runtime);

    // A memory bomb hits the cap.
    let (_, err) = stage_error(evident::pipeline::run(&runtime, &verify_with(&runtime, "memory"), fixture.host(), QUESTION));
    assert!(matches!(err, PluginError::Memory(64)), "{err}");
    answer_normally(&runtime);

    // A panic is a crash of that stage only.
    let (_, err) = stage_error(evident::pipeline::run(&runtime, &verify_with(&runtime, "trap"), fixture.host(), QUESTION));
    assert!(matches!(err, PluginError::Trap(_)), "{err}");
    answer_normally(&runtime);

    // A verdict about a page it was not given, and citations of pages or blocks that do not exist.
    let (_, err) = stage_error(evident::pipeline::run(&runtime, &verify_with(&runtime, "foreign-page"), fixture.host(), QUESTION));
    assert!(matches!(err, PluginError::BadOutput(_)), "{err}");
    for (behaviour, says) in [("missing-page", "cited a page that does not exist"), ("missing-block", "cited block 10000 of page")] {
        let bad = profile(&runtime, &[(StageKind::Memory, "test-hostile-memory", &[("behaviour", behaviour)])]);
        let (stage, err) = stage_error(evident::pipeline::run(&runtime, &bad, fixture.host(), QUESTION));
        assert_eq!(stage, StageKind::Memory);
        assert!(matches!(err, PluginError::BadOutput(_)), "{behaviour}: {err}");
        assert!(err.to_string().contains(says), "{behaviour}: {err}");
    }
    // A verify stage that leaves a page unjudged would silently drop it from the evidence.
    let (stage, err) = stage_error(evident::pipeline::run(&runtime, &verify_with(&runtime, "drop-page"), fixture.host(), QUESTION));
    assert_eq!(stage, StageKind::Verify);
    assert!(matches!(err, PluginError::BadOutput(_)) && err.to_string().contains("no verdict for page"), "{err}");
    answer_normally(&runtime);
}

#[test]
fn an_answer_cites_only_what_it_rests_on() {
    let fixture = Fixture::new();
    let runtime = StageRuntime::new(StageLimits { memory_mib: 64, fuel: 2_000_000_000, timeout_s: 30, enrich_timeout_s: 1800 }).expect("runtime");
    let with = |behaviour: &str| profile(&runtime, &[(StageKind::Memory, "test-hostile-memory", &[("behaviour", behaviour)])]);
    // A quote found on the page: the page is cited with the box of the block that holds it.
    let quoted = evident::pipeline::run(&runtime, &with("labels"), fixture.host(), QUESTION).expect("answers");
    assert_eq!(quoted.evidence.len(), 1);
    assert_eq!(quoted.evidence[0].boxes.len(), 1, "the quoted block is drawn");
    let [bx0, by0, bx1, by1] = quoted.evidence[0].boxes[0];
    assert!(!quoted.evidence[0].words.is_empty(), "the quoted words are located");
    for [x0, y0, x1, y1] in &quoted.evidence[0].words {
        assert!(*x0 >= bx0 - 0.5 && *y0 >= by0 - 0.5 && *x1 <= bx1 + 0.5 && *y1 <= by1 + 0.5, "a word box lies in its block");
    }
    assert!(!quoted.evidence[0].snippet.is_empty());
    assert_eq!(quoted.notice, None);
    // A quote that is on no block: the page the stage cited, but no box drawn for it.
    let unmatched = evident::pipeline::run(&runtime, &with("unmatched-quote"), fixture.host(), QUESTION).expect("answers");
    assert_eq!(unmatched.evidence.len(), 1);
    assert!(unmatched.evidence[0].boxes.is_empty() && unmatched.evidence[0].snippet.is_empty(), "{:?}", unmatched.evidence[0]);
    // No citation at all: no evidence, and the answer says so.
    let uncited = evident::pipeline::run(&runtime, &with("no-citation"), fixture.host(), QUESTION).expect("answers");
    assert!(uncited.answerable && uncited.evidence.is_empty(), "{:?}", uncited.evidence);
    assert_eq!(uncited.notice.as_deref(), Some(evident::pipeline::UNCITED));
}

#[test]
fn ask_puts_one_question_through_two_profiles_side_by_side() {
    let app = common::Appliance::new();
    app.ingest(&[&common::bench_pdf(PDF)], &["--no-images"]);
    let profiles = tempfile::tempdir().expect("temp dir");
    for (name, behaviour) in [("quoting", "labels"), ("uncited", "no-citation")] {
        let text = format!(
            "description = \"{name}\"\n[retrieve]\nk = 3\nmode = \"bm25\"\n[stages.memory]\nplugin = \"test-hostile-memory\"\nparams = {{ behaviour = \"{behaviour}\" }}\n"
        );
        std::fs::write(profiles.path().join(format!("{name}.toml")), text).expect("profile");
    }
    let config = profiles.path().join("appliance.toml");
    let plugins = common::repo_root().join(".evident/test-plugins");
    std::fs::write(&config, format!("[plugins]\ndir = {:?}\nprofiles_dir = {:?}\n", plugins.to_str().expect("path"), profiles.path().to_str().expect("path")))
        .expect("config");
    let config = config.to_str().expect("path");
    let both = |extra: &[&str]| app.ok(&[&["--config", config, "ask", QUESTION, "--profile", "quoting", "--profile", "uncited"], extra].concat());
    let v: serde_json::Value = serde_json::from_str(&both(&["--json"])).expect("JSON");
    assert_eq!(v["question"], QUESTION);
    let answers = v["answers"].as_array().expect("answers");
    assert_eq!(answers.iter().map(|a| a["profile"].as_str().expect("profile")).collect::<Vec<_>>(), ["quoting", "uncited"]);
    assert_eq!(answers[0]["evidence"].as_array().expect("evidence").len(), 1);
    assert!(answers[1]["evidence"].as_array().expect("evidence").is_empty());
    assert!(answers[1]["notice"].as_str().is_some_and(|n| n.contains("cites no page")), "{}", answers[1]);
    let text = both(&[]);
    assert!(text.contains("== quoting ==") && text.contains("== uncited =="), "{text}");
    assert!(text.contains("pages both cite: 0; only quoting: 1; only uncited: 0"), "{text}");
    // A misspelt profile is named before anything is asked.
    let out = app.run(&["--config", config, "ask", QUESTION, "--profile", "quoting", "--profile", "nonesuch"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no profile named nonesuch"));
}

#[test]
fn a_component_of_the_wrong_world_is_refused_naming_what_it_lacks() {
    let runtime = StageRuntime::new(StageLimits { memory_mib: 64, fuel: 1_000_000, timeout_s: 5, enrich_timeout_s: 1800 }).expect("runtime");
    let err = runtime.compile(&component_bytes("test-hostile-verify"), StageKind::Memory).expect_err("a verify component is no memory stage");
    let text = err.to_string();
    assert!(matches!(err, PluginError::WrongWorld { kind: StageKind::Memory, .. }), "{text}");
    assert!(text.contains("`answer`") && text.contains("memory-stage"), "{text}");
    let err = runtime.compile(b"\0asm not really", StageKind::Verify).expect_err("garbage");
    assert!(matches!(err, PluginError::Invalid(_)), "{err}");
}

#[test]
fn eval_compares_profiles_on_the_same_questions_and_goes_on_from_its_results_log() {
    let app = common::Appliance::new();
    app.ingest(&[&common::bench_pdf(PDF)], &["--no-images"]);
    // Two profiles: the shipped baseline and a variant that reads three pages instead of five.
    let profiles = app.data.path().join("profiles");
    std::fs::create_dir_all(&profiles).expect("profiles dir");
    let baseline = std::fs::read_to_string(common::repo_root().join("appliance-config/profiles/baseline.toml")).expect("baseline");
    std::fs::write(profiles.join("baseline.toml"), &baseline).expect("write");
    std::fs::write(profiles.join("top3.toml"), baseline.replace("k = 5", "k = 3").replace("top_k = 5", "top_k = 3")).expect("write");
    let config = app.data.path().join("eval.toml");
    // The small model: this checks the evaluation's bookkeeping, not answers.
    std::fs::write(&config, format!("[generator]\nmodel = \"smollm2-135m\"\n[plugins]\nprofiles_dir = {:?}\n", profiles.to_str().expect("path")))
        .expect("config");
    let log = app.data.path().join("results.jsonl");
    let questions = common::repo_root().join("../shared/bench/questions.jsonl");
    let traces = app.data.path().join("traces.jsonl");
    let eval = |limit: &str, more: &[&str]| {
        let mut args = vec![
            "--config",
            config.to_str().expect("path"),
            "eval",
            "--questions",
            questions.to_str().expect("path"),
            "--profile",
            "baseline",
            "--profile",
            "top3",
            "--limit",
            limit,
            "--k",
            "1,3",
            "--results",
            log.to_str().expect("path"),
        ];
        args.extend_from_slice(more);
        app.run(&args)
    };
    let lines = || -> Vec<serde_json::Value> { std::fs::read_to_string(&log).expect("log").lines().filter_map(|l| serde_json::from_str(l).ok()).collect() };
    let row = |table: &str, name: &str| -> Vec<String> {
        table.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} row in {table}")).split_whitespace().map(String::from).collect()
    };

    let out = eval("1", &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let first = lines();
    assert_eq!(first.len(), 2, "one answer per profile: {first:?}");
    assert_eq!(first[0]["qid"], first[1]["qid"], "each question is asked of every profile in turn");
    assert!(first.iter().all(|r| r["failed"] == false && r["llm_calls"].as_u64() == Some(1)), "{first:?}");
    assert!(first.iter().any(|r| r["profile"] == "top3" && r["ranked"].as_array().is_some_and(|p| !p.is_empty() && p.len() <= 10)));

    // A killed run leaves a torn last line; the next run asks that answer again and adds only
    // what is missing.
    std::fs::write(&log, format!("{}{{\"profile\": \"baseline\", \"qid", std::fs::read_to_string(&log).expect("log"))).expect("tear");
    let out = eval("2", &["--traces", traces.to_str().expect("path")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("2 answers already in the results log"), "{stderr}");
    let all = lines();
    assert_eq!(all.len(), 4, "two new answers: {all:?}");
    assert_eq!(all[..2], first[..], "the earlier answers are kept as they were");
    // The trace log holds the traces of the answers asked in this run, matched to them.
    let traced: Vec<serde_json::Value> =
        std::fs::read_to_string(&traces).expect("trace log").lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    assert_eq!(traced.len(), 2, "one trace per answer asked: {traced:?}");
    for (t, r) in traced.iter().zip(&all[2..]) {
        assert_eq!((&t["profile"], &t["qid"]), (&r["profile"], &r["qid"]));
        let stages: Vec<&str> = t["trace"].as_array().expect("steps").iter().filter_map(|s| s["stage"].as_str()).collect();
        assert_eq!(stages, ["retrieve", "memory"], "{t}");
        assert!(t["log"].is_array(), "the stages' log beside the trace: {t}");
    }
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    for name in ["baseline", "top3"] {
        let cells = row(&table, name);
        assert_eq!(cells[1], "2", "{name} counts both questions, old and new: {table}");
        let calls: f64 = cells[cells.len() - 3].parse().expect("calls/q");
        assert_eq!(calls, 1.0, "{table}");
    }
    // The same answers by the kind of evidence the benchmark names: the second question's
    // sources hold a chart; the first names none, so it has no such row.
    assert!(table.contains("by the kind of evidence"), "{table}");
    let kind = row(&table, "baseline / chart or figure");
    assert_eq!(kind[5], "1", "one question of that kind: {table}");
    assert_eq!(table.lines().filter(|l| l.starts_with("baseline / ")).count(), 1, "{table}");
}

#[test]
fn ask_answers_with_cited_pages_and_a_trace() {
    let app = common::Appliance::new();
    app.ingest(&[&common::bench_pdf(PDF)], &["--no-images"]);
    let out = app.ok(&["ask", QUESTION, "--profile", "baseline", "--json", "--trace"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["profile"], "baseline");
    let stages: Vec<&str> = v["trace"].as_array().expect("trace").iter().map(|s| s["stage"].as_str().expect("stage")).collect();
    assert_eq!(stages, ["retrieve", "memory"]);
    assert!(v["trace"][1]["llm_calls"].as_u64() >= Some(1), "the answer stage asked the model");
    let doc = &app.docs()[0];
    let evidence = v["evidence"].as_array().expect("evidence");
    if v["answerable"] == true && evidence.is_empty() {
        assert!(v["notice"].as_str().is_some_and(|n| n.contains("cites no page")), "an uncited answer says so: {v}");
    }
    for e in evidence {
        assert_eq!(e["document"], doc["id"]);
        let page = e["page"].as_u64().expect("page");
        assert!(page >= 1 && page <= doc["page_count"].as_u64().expect("count"));
        let drawn = !e["boxes"].as_array().expect("boxes").is_empty();
        assert_eq!(drawn, !e["snippet"].as_str().expect("snippet").is_empty(), "a drawn box comes with its words: {e}");
    }
    // Without documents there is nothing to ask about, and the sentence says what to do.
    let empty = common::Appliance::new();
    let out = empty.run(&["ask", QUESTION]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("evident ingest"));
    // An unknown profile is named, with the ones there are.
    let out = app.run(&["ask", QUESTION, "--profile", "nonesuch"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nonesuch") && err.contains("baseline"), "{err}");
}

#[test]
fn swapping_the_verify_stage_mid_stream_drops_nothing_and_mixes_nothing() {
    let fixture = Fixture::new();
    let profiles = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        profiles.path().join("swap.toml"),
        "description = \"hot-swap test\"\n[retrieve]\nk = 3\nmode = \"bm25\"\n\
         [stages.verify]\nplugin = \"test-hostile-verify\"\nparams = { behaviour = \"hostile-ok\" }\n\
         [stages.memory]\nplugin = \"test-hostile-memory\"\n",
    )
    .expect("profile");
    let runtime = Arc::new(StageRuntime::new(StageLimits { memory_mib: 64, fuel: 2_000_000_000, timeout_s: 30, enrich_timeout_s: 1800 }).expect("runtime"));
    let registry = evident::registry::PluginRegistry::new(
        runtime,
        fixture.services.store.clone(),
        common::repo_root().join(".evident/test-plugins"),
        profiles.path().to_path_buf(),
    );
    let swaps_done = std::sync::atomic::AtomicBool::new(false);
    let labels: Vec<Vec<String>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let mut seen = Vec::new();
                    let mut after = 0;
                    // Keep asking until the swaps are over, then a few more.
                    while after < 3 {
                        if swaps_done.load(std::sync::atomic::Ordering::SeqCst) {
                            after += 1;
                        }
                        let profile = registry.resolve("swap").expect("resolves");
                        let out = evident::pipeline::run(registry.runtime(), &profile, fixture.host(), QUESTION).expect("every request completes");
                        let set: std::collections::BTreeSet<&str> = out.answer.split(',').collect();
                        assert_eq!(set.len(), 1, "one request, one verify plugin: {}", out.answer);
                        seen.push(out.answer.split(',').next().unwrap_or_default().to_string());
                    }
                    seen
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(300));
        registry.swap("swap", StageKind::Verify, "test-labeler-verify").expect("first swap");
        let now = registry.resolve("swap").expect("resolves");
        assert_eq!(now.components[&StageKind::Verify].0, "test-labeler-verify", "a new request sees the swap at once");
        std::thread::sleep(std::time::Duration::from_millis(300));
        registry.swap("swap", StageKind::Verify, "test-hostile-verify").expect("second swap");
        swaps_done.store(true, std::sync::atomic::Ordering::SeqCst);
        workers.into_iter().map(|w| w.join().expect("worker")).collect()
    });
    let all: Vec<&String> = labels.iter().flatten().collect();
    assert!(all.iter().all(|l| *l == "hostile-ok" || *l == "labeler"), "{all:?}");
    assert!(all.iter().any(|l| *l == "labeler"), "some requests ran on the swapped-in plugin: {all:?}");
    for worker in &labels {
        assert_eq!(worker.last().map(String::as_str), Some("hostile-ok"), "the last requests run after the swap back");
    }
    // The swap is recorded: a fresh registry over the same store resolves the same binding.
    assert_eq!(fixture.services.store.stage_bindings("swap").expect("bindings"), [("verify".to_string(), "test-hostile-verify".to_string())]);
}

#[test]
fn plugins_command_installs_lists_and_refuses_the_wrong_world() {
    let app = common::Appliance::new();
    let test_plugins = common::repo_root().join(".evident/test-plugins");
    let hostile = test_plugins.join("test-hostile-verify.wasm");
    let out = app.run(&["plugins", "install", hostile.to_str().expect("utf-8"), "--kind", "memory"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("does not implement the memory stage") && err.contains("`answer`"), "{err}");
    let labeler = test_plugins.join("test-labeler-verify.wasm");
    let out = app.ok(&["plugins", "install", labeler.to_str().expect("utf-8"), "--version", "2.0.1"]);
    assert!(out.contains("installed test-labeler-verify 2.0.1 as a verify stage"), "{out}");
    let list: Vec<serde_json::Value> = serde_json::from_str(&app.ok(&["plugins", "list", "--json"])).expect("JSON");
    let names: Vec<&str> = list.iter().map(|p| p["name"].as_str().expect("name")).collect();
    assert!(names.contains(&"baseline-memory") && names.contains(&"hievi-verify") && names.contains(&"test-labeler-verify"), "{names:?}");
    let entry = list.iter().find(|p| p["name"] == "test-labeler-verify").expect("listed");
    assert_eq!(entry["kind"], "verify");
    assert_eq!(entry["sha256"].as_str().map(str::len), Some(64));
    let out = app.run(&["plugins", "swap", "memory", "test-labeler-verify", "--profile", "baseline"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a verify stage, not a memory stage"));
    let out = app.ok(&["plugins", "swap", "verify", "hievi-verify", "--profile", "hievi"]);
    assert!(out.contains("now runs hievi-verify"), "{out}");
}

#[test]
fn hievi_runs_end_to_end_through_wasmtime() {
    let fixture = Fixture::new();
    let profiles = tempfile::tempdir().expect("temp dir");
    // HiEvi-RAG with small numbers so the embedded model gets through it in a test.
    std::fs::write(
        profiles.path().join("hievi-small.toml"),
        "description = \"HiEvi-RAG, small\"\n[retrieve]\nk = 4\nmode = \"maxsim\"\n\
         [stages.decompose]\nplugin = \"hievi-decompose\"\nparams = { max_children = 2, max_tokens = 60 }\n\
         [stages.verify]\nplugin = \"hievi-verify\"\nparams = { window = 2, page_tokens = 80 }\n\
         [stages.rerank]\nplugin = \"hievi-rerank\"\n\
         [stages.memory]\nplugin = \"hievi-memory\"\nparams = { window = 2, page_tokens = 80, max_tokens = 32 }\n",
    )
    .expect("profile");
    let registry = fixture.bundled_registry(profiles.path());
    let profile = registry.resolve("hievi-small").expect("all four HiEvi components load");
    // Built for contract 0.1.0, and served through its bindings beside 0.2.0's.
    assert!(profile.components.values().all(|(_, c)| c.api == evident::plugins::ApiVersion::V0_1));
    let out = evident::pipeline::run(registry.runtime(), &profile, fixture.host(), QUESTION).expect("answers");
    let stages: Vec<&str> = out.trace.iter().map(|s| s.stage.as_str()).collect();
    assert_eq!(stages[..2], ["decompose", "retrieve"]);
    assert_eq!(stages.last(), Some(&"memory"));
    let questions = 1 + out.trace[0].output.split(" | ").filter(|q| !q.is_empty()).count();
    assert!(questions <= 3, "at most two children: {}", out.trace[0].output);
    assert_eq!(stages.iter().filter(|s| **s == "verify").count(), questions, "each question verified");
    assert_eq!(stages.iter().filter(|s| **s == "rerank").count(), questions, "each question reranked");
    assert!(out.llm_calls > 4, "decomposition and per-page judging asked the model: {}", out.llm_calls);
    // Each verify step names every page it judged, its label and the judge's log-odds.
    for step in out.trace.iter().filter(|s| s.stage == "verify") {
        let (counts, verdicts) = step.output.split_once(" relevant: ").unwrap_or_else(|| panic!("no verdicts in {}", step.output));
        let verdicts: Vec<Vec<&str>> = verdicts.split(", ").map(|v| v.split(' ').collect()).collect();
        assert!(verdicts.iter().all(|v| v.len() == 3 && v[0].starts_with('p') && ["T", "F"].contains(&v[1]) && v[2].parse::<f32>().is_ok()), "{}", step.output);
        let trues = verdicts.iter().filter(|v| v[1] == "T").count();
        assert_eq!(counts, format!("{trues} of {}", verdicts.len()), "{}", step.output);
    }
    assert_eq!(out.ranked_pages.len(), 4, "the root keeps all its pages, verified first");
    assert!(out.evidence.iter().all(|e| out.ranked_pages.iter().any(|(d, p)| *d == e.document && *p == e.page)), "citations come from the root's pages");
    if out.answerable && out.evidence.is_empty() {
        assert_eq!(out.notice.as_deref(), Some(evident::pipeline::UNCITED), "an uncited answer says so");
    }
}

#[test]
fn sleuth_runs_end_to_end_through_wasmtime_on_contract_0_2() {
    let fixture = Fixture::new();
    let profiles = tempfile::tempdir().expect("temp dir");
    // SLEUTH with small numbers so the embedded model gets through it in a test.
    std::fs::write(
        profiles.path().join("sleuth-small.toml"),
        "description = \"SLEUTH, small\"\n[retrieve]\nk = 3\nmode = \"maxsim\"\n\
         [stages.verify]\nplugin = \"sleuth-verify\"\nparams = { page_tokens = 80 }\n\
         [stages.memory]\nplugin = \"sleuth-memory\"\nparams = { page_tokens = 80, clue_tokens = 40, max_clues = 2, answer_tokens = 24 }\n",
    )
    .expect("profile");
    let registry = fixture.bundled_registry(profiles.path());
    let profile = registry.resolve("sleuth-small").expect("both SLEUTH components load");
    assert!(profile.components.values().all(|(_, c)| c.api == evident::plugins::ApiVersion::V0_2));
    let out = evident::pipeline::run(registry.runtime(), &profile, fixture.host(), QUESTION).expect("answers");
    assert_eq!(out.trace.iter().map(|s| s.stage.as_str()).collect::<Vec<_>>(), ["retrieve", "verify", "memory"]);
    // Each of the three pages screened with one of the paper's labels, then clues, difficulty
    // and the decision, all in the log.
    let screened: Vec<&String> = out.log.iter().filter(|l| l.starts_with("screening: page ")).collect();
    assert_eq!(screened.len(), 3, "{:?}", out.log);
    assert!(screened.iter().all(|l| [" CR (", " R (", " IR ("].iter().any(|label| l.contains(label))), "{screened:?}");
    assert!(out.log.iter().any(|l| l.starts_with("decision") || l.starts_with("no clues")), "{:?}", out.log);
    assert!(out.llm_calls >= 4, "screening and clues asked the model: {}", out.llm_calls);
    if out.answerable {
        assert!(out.evidence.iter().all(|e| out.ranked_pages.iter().any(|(d, p)| *d == e.document && *p == e.page)), "citations come from the retrieved pages");
    } else {
        assert!(out.evidence.is_empty(), "nothing found cites nothing");
    }
}

#[test]
fn bundled_plugins_follow_the_bundle_and_installed_ones_stay() {
    let app = common::Appliance::new();
    let root = common::repo_root();
    let bundle = tempfile::tempdir().expect("temp dir");
    for entry in std::fs::read_dir(root.join(".evident/plugins")).expect("plugins are built (scripts/build-plugins.sh)") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, bundle.path().join(path.file_name().expect("name"))).expect("copy");
    }
    let config = app.data.path().join("bundle.toml");
    std::fs::write(&config, format!("[plugins]\ndir = {:?}\n", bundle.path().to_str().expect("path"))).expect("config");
    let cfg = config.to_str().expect("path");
    let sha_of = |name: &str| -> String {
        let list: Vec<serde_json::Value> = serde_json::from_str(&app.ok(&["--config", cfg, "plugins", "list", "--json"])).expect("JSON");
        list.iter().find(|p| p["name"] == name).and_then(|p| p["sha256"].as_str()).unwrap_or_else(|| panic!("{name} listed")).to_string()
    };
    let sha_of_file = |path: &std::path::Path| -> String {
        use sha2::Digest;
        sha2::Sha256::digest(std::fs::read(path).expect("read")).iter().map(|b| format!("{b:02x}")).collect()
    };
    let test_plugins = root.join(".evident/test-plugins");
    let (labeler, hostile) = (test_plugins.join("test-labeler-verify.wasm"), test_plugins.join("test-hostile-verify.wasm"));
    // A bundled component installs itself; a newer one in the bundle replaces it when next used.
    std::fs::copy(&labeler, bundle.path().join("shipped-verify.wasm")).expect("copy");
    assert_eq!(sha_of("shipped-verify"), sha_of_file(&labeler));
    std::fs::copy(&hostile, bundle.path().join("shipped-verify.wasm")).expect("copy");
    app.ok(&["--config", cfg, "plugins", "swap", "verify", "shipped-verify", "--profile", "hievi"]);
    assert_eq!(sha_of("shipped-verify"), sha_of_file(&hostile), "the store follows the bundle");
    // One the operator installed stays, whatever the bundle holds under its name.
    app.ok(&["--config", cfg, "plugins", "install", labeler.to_str().expect("path"), "--name", "own-verify", "--version", "1.0.0"]);
    std::fs::copy(&hostile, bundle.path().join("own-verify.wasm")).expect("copy");
    app.ok(&["--config", cfg, "plugins", "swap", "verify", "own-verify", "--profile", "hievi"]);
    assert_eq!(sha_of("own-verify"), sha_of_file(&labeler), "an installed plugin is not replaced");
}
