//! `evident serve` over real sockets: every endpoint with its roles and errors, uploads that
//! become searchable documents, a broken and an oversized upload, a plugin installed and
//! swapped over HTTP, overload shed with 429 and then normal service, a timed-out question that
//! frees its slot, graceful shutdown, the `openai` Python client, and the web page in headless
//! Chromium.

mod common;

use common::hostile;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const ADMIN: &str = "admin-token-for-tests";
const READ: &str = "read-token-for-tests";
const SENIORS: &str = "mmlongbench-doc/PIP_Seniors-and-Tech-Use_040314.pdf";
const SMALL: &str = "financebench/PEPSICO_2023_8K_dated-2023-05-05.pdf";

/// Profiles the tests run: the real plugins with small budgets, and test components.
const PROFILES: &[(&str, &str)] = &[
    // The real baseline answer stage and the embedded model, kept short.
    (
        "answer",
        "description = \"Baseline, short\"\n[retrieve]\nk = 2\nmode = \"hybrid\"\n[stages.memory]\nplugin = \"baseline-memory\"\nparams = { top_k = 2, page_tokens = 120, max_tokens = 12 }\n",
    ),
    // No model: verify labels each page, memory answers with the labels (shows which plugin ran).
    (
        "quick",
        "description = \"Labels only\"\n[retrieve]\nk = 3\nmode = \"bm25\"\n[stages.verify]\nplugin = \"test-hostile-verify\"\nparams = { behaviour = \"first\" }\n[stages.memory]\nplugin = \"test-hostile-memory\"\n",
    ),
    // As quick, but the verify stage busy-works first.
    (
        "slow",
        "description = \"Labels after a busy wait\"\n[retrieve]\nk = 3\nmode = \"bm25\"\n[stages.verify]\nplugin = \"test-hostile-verify\"\nparams = { behaviour = \"slow\", spin = 400000000 }\n[stages.memory]\nplugin = \"test-hostile-memory\"\n",
    ),
    // An answer stage that cites a page past the end of its document.
    (
        "miscites",
        "description = \"Cites what does not exist\"\n[retrieve]\nk = 3\nmode = \"bm25\"\n[stages.memory]\nplugin = \"test-hostile-memory\"\nparams = { behaviour = \"missing-page\" }\n",
    ),
    // A verify stage that keeps calling the host until the host refuses.
    (
        "stuck",
        "description = \"Never finishes by itself\"\n[retrieve]\nk = 3\nmode = \"bm25\"\n[stages.verify]\nplugin = \"test-hostile-verify\"\nparams = { behaviour = \"host-loop\" }\n[stages.memory]\nplugin = \"test-hostile-memory\"\n",
    ),
];

/// A running `evident serve` with a store, profiles and plugins of its own.
struct Server {
    child: Child,
    url: String,
    app: common::Appliance,
    config: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Ingests `pdfs`, then serves with `server` settings (TOML lines under `[server]`).
    fn start(pdfs: &[&str], server: &str) -> Server {
        Server::start_with(pdfs, server, "")
    }

    /// As [`Server::start`], with `extra` TOML sections at the end of the configuration.
    fn start_with(pdfs: &[&str], server: &str, extra: &str) -> Server {
        let app = common::Appliance::new();
        if !pdfs.is_empty() {
            let paths: Vec<PathBuf> = pdfs.iter().map(|p| common::bench_pdf(p)).collect();
            let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
            app.ingest(&refs, &[]);
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let profiles = dir.path().join("profiles");
        let plugins = dir.path().join("plugins");
        std::fs::create_dir_all(&profiles).expect("profiles dir");
        std::fs::create_dir_all(&plugins).expect("plugins dir");
        for (name, text) in PROFILES {
            std::fs::write(profiles.join(format!("{name}.toml")), text).expect("profile");
        }
        let root = common::repo_root();
        for built in [root.join(".evident/plugins"), root.join(".evident/test-plugins")] {
            for entry in std::fs::read_dir(&built).expect("plugins are built (scripts/build-plugins.sh)") {
                let path = entry.expect("entry").path();
                if path.extension().is_some_and(|e| e == "wasm") && !path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("test-labeler")) {
                    std::fs::copy(&path, plugins.join(path.file_name().expect("name"))).expect("copy plugin");
                }
            }
        }
        // The appliance refuses a stage limit longer than the request's, so a short request
        // timeout brings the stage limit down with it.
        let stage_limit =
            server.lines().find_map(|l| l.strip_prefix("request_timeout_s = ")).map(|v| format!("[plugins.limits]\ntimeout_s = {v}\n")).unwrap_or_default();
        let config = dir.path().join("appliance.toml");
        std::fs::write(
            &config,
            format!(
                "[compute]\nbackend = \"cpu\"\n[server]\n{server}\ntokens = [{{ token = \"{ADMIN}\", role = \"admin\" }}, {{ token = \"{READ}\", role = \"read\" }}]\n[plugins]\ndir = \"{}\"\nprofiles_dir = \"{}\"\ndefault_profile = \"quick\"\n{stage_limit}{extra}",
                plugins.display(),
                profiles.display()
            ),
        )
        .expect("config");
        let (child, url) = Server::spawn(&app, &config);
        Server { child, url, app, config, _dir: dir }
    }

    /// `evident serve` on `app`'s store with `config`, once it listens: (process, base URL).
    fn spawn(app: &common::Appliance, config: &Path) -> (Child, String) {
        Server::spawn_logged(app, config, None)
    }

    /// [`Server::spawn`]; with `log`, every log line at debug level and all of stdout go to
    /// that file.
    fn spawn_logged(app: &common::Appliance, config: &Path, log: Option<&Path>) -> (Child, String) {
        let mut cmd = app.command();
        cmd.arg("--config").arg(config).args(["serve", "--addr", "127.0.0.1:0"]).stdout(Stdio::piped());
        let mut copy = None;
        match log {
            Some(path) => {
                let file = std::fs::File::create(path).expect("log file");
                copy = Some(file.try_clone().expect("log file"));
                cmd.env("EVIDENT_LOG", "debug").stderr(file);
            }
            None => {
                cmd.stderr(Stdio::inherit());
            }
        }
        let mut child = cmd.spawn().expect("evident serve starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            let line = lines.next().expect("serve printed its address").expect("line");
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.split_whitespace().next().expect("url").to_string();
            }
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Some(f) = copy.as_mut() {
                    use std::io::Write;
                    let _ = writeln!(f, "{line}");
                }
            }
        });
        (child, url)
    }

    /// SIGKILL, as a power cut or the OOM killer would: no chance to finish anything.
    fn kill_hard(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again on the same store and configuration.
    fn restart(&mut self) {
        self.kill_hard();
        let (child, url) = Server::spawn(&self.app, &self.config);
        self.child = child;
        self.url = url;
    }

    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(Duration::from_secs(600))).build().into()
    }

    /// `method path` with `token` and an optional JSON body: (status, headers, body bytes).
    fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<(&str, Vec<u8>)>) -> Reply {
        let url = format!("{}{path}", self.url);
        let agent = Server::agent();
        let mut builder = ureq::http::Request::builder().method(method).uri(&url);
        if let Some(t) = token {
            builder = builder.header("Authorization", format!("Bearer {t}"));
        }
        let response = match body {
            Some((content_type, bytes)) => agent.run(builder.header("Content-Type", content_type).body(bytes).expect("request")),
            None => agent.run(builder.body(()).expect("request")),
        }
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let mut bytes = Vec::new();
        response.into_body().into_reader().read_to_end(&mut bytes).expect("body");
        Reply { status, headers, bytes }
    }

    fn get(&self, path: &str, token: Option<&str>) -> Reply {
        self.call("GET", path, token, None)
    }

    fn post_json(&self, path: &str, token: Option<&str>, body: &Value) -> Reply {
        self.call("POST", path, token, Some(("application/json", body.to_string().into_bytes())))
    }

    fn upload(&self, token: &str, file_name: &str, bytes: &[u8]) -> Reply {
        let boundary = "evident-test-boundary-7d1f";
        let mut body =
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{file_name}\"\r\nContent-Type: application/pdf\r\n\r\n")
                .into_bytes();
        body.extend_from_slice(bytes);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        self.call("POST", "/v1/documents", Some(token), Some((&format!("multipart/form-data; boundary={boundary}"), body)))
    }

    /// Polls a job until it is done or failed.
    fn finished_job(&self, id: &str, within: Duration) -> Value {
        let started = Instant::now();
        loop {
            let j = self.get(&format!("/v1/jobs/{id}"), Some(READ)).expect(200, "job").json()["job"].clone();
            if j["state"] == "done" || j["state"] == "failed" {
                return j;
            }
            assert!(started.elapsed() < within, "job {id} did not end within {within:?}: {j}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn documents(&self) -> Vec<Value> {
        self.get("/v1/documents", Some(READ)).json()["documents"].as_array().cloned().expect("documents")
    }

    fn ask(&self, body: Value) -> Reply {
        self.post_json("/v1/query", Some(READ), &body)
    }

    fn child_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn terminate(&self) {
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Reply {
    status: u16,
    headers: ureq::http::HeaderMap,
    bytes: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    fn error(&self) -> String {
        self.json()["error"]["message"].as_str().unwrap_or_default().to_string()
    }

    fn expect(self, status: u16, what: &str) -> Reply {
        assert_eq!(self.status, status, "{what}: {}", self.text());
        self
    }
}

#[test]
fn hostile_uploads_end_in_a_sentence_and_never_hold_up_the_next_upload() {
    let limits = "[ingest]\nopen_timeout_s = 10\npage_timeout_s = 30\ndocument_timeout_s = 30\nworker_memory_mib = 1024\nparallel_reads = 2\n";
    let mut s = Server::start_with(&[], "", limits);
    let small = std::fs::read(common::bench_pdf(SMALL)).expect("read");

    // The shared form-field tree opens, then keeps PDFium walking on its page: one reader is held.
    let stuck = s.upload(ADMIN, "fields.pdf", &hostile::shared_form_fields(48)).expect(202, "the fields bomb opens").json()["job"]["id"]
        .as_str()
        .expect("id")
        .to_string();
    // A normal upload right after is checked, read and indexed while that one is still stuck.
    let normal = s.upload(ADMIN, "pepsico-8k.pdf", &small).expect(202, "normal upload").json()["job"]["id"].as_str().expect("id").to_string();
    let done = s.finished_job(&normal, Duration::from_secs(120));
    assert_eq!(done["state"], "done", "{done}");
    let held = s.get(&format!("/v1/jobs/{stuck}"), Some(READ)).expect(200, "job").json()["job"].clone();
    assert_eq!(held["state"], "reading", "the stuck document is still being read: {held}");
    let failed = s.finished_job(&stuck, Duration::from_secs(90));
    assert_eq!(failed["state"], "failed");
    assert!(failed["error"].as_str().expect("error").starts_with("fields.pdf took longer than 30 s to read"), "{failed}");

    // Every other hostile file: refused with a sentence, or a job that ends within its deadline.
    let (mut stored, mut refused, mut failed_jobs) = (0, 0, 0);
    let mut outcomes = Vec::new();
    for (name, bytes) in hostile::corpus(&small) {
        if name == "shared-form-fields.pdf" {
            continue;
        }
        let reply = s.upload(ADMIN, &name, &bytes);
        match reply.status {
            202 => {
                let id = reply.json()["job"]["id"].as_str().expect("id").to_string();
                let job = s.finished_job(&id, Duration::from_secs(120));
                if job["state"] == "done" {
                    stored += 1;
                } else {
                    let error = job["error"].as_str().expect("a failed job says why");
                    assert!(error.len() > 20 && !error.contains("panicked"), "{name}: {error}");
                    failed_jobs += 1;
                }
            }
            200 => stored += 1,
            422 => {
                let error = reply.error();
                assert!(error.starts_with(&name) && error.len() > name.len() + 6, "{name}: {error}");
                refused += 1;
                outcomes.push((name.clone(), error));
            }
            other => panic!("{name}: status {other}: {}", reply.text()),
        }
    }
    eprintln!("hostile uploads: {stored} stored, {refused} refused, {failed_jobs} failed while reading");
    for (name, sentence) in [("empty.pdf", "is empty"), ("not-a-pdf.pdf", "is not a PDF file")] {
        assert!(outcomes.iter().any(|(n, e)| n == name && e.contains(sentence)), "{name} is refused: {outcomes:?}");
    }

    // The server still serves: a question over the normal document is answered.
    assert!(s.child_alive(), "the server is still running");
    let id = done["document"].as_str().expect("document");
    let r = s.ask(json!({ "question": "PepsiCo shareholder vote", "documents": [id] })).expect(200, "a question after the hostile uploads").json();
    assert_eq!(r["evidence"][0]["document"], id);
}

#[test]
fn a_server_killed_at_random_points_of_uploads_and_indexing_loses_nothing_it_accepted() {
    use rand::{Rng, SeedableRng};
    const POOL: &[&str] = &[
        SMALL,
        "financebench/FOOTLOCKER_2022_8K_dated-2022-05-20.pdf",
        "financebench/ULTABEAUTY_2023Q4_EARNINGS.pdf",
        "mmlongbench-doc/2303.05039v2.pdf",
        "financebench/BESTBUY_2024Q2_10Q.pdf",
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let mut s = Server::start_with(&[], "", "[generator]\nmodel = \"smollm2-135m\"\n");
    let mut accepted = std::collections::BTreeSet::new();
    let mut removed = std::collections::BTreeSet::new();
    let rounds = 20;
    let mut interrupted = 0;
    for round in 0..rounds {
        // One or two uploads (new ones, or ones stored before), sometimes a removal, then
        // SIGKILL after a random wait: during a check, a read, an index or in between.
        for _ in 0..rng.random_range(1..=2) {
            let name = POOL[rng.random_range(0..POOL.len())];
            let bytes = std::fs::read(common::bench_pdf(name)).expect("read");
            let reply = s.upload(ADMIN, name.rsplit('/').next().expect("name"), &bytes);
            let doc = match reply.status {
                202 => reply.json()["job"]["document"].as_str().expect("document").to_string(),
                200 => reply.json()["document"]["id"].as_str().expect("id").to_string(),
                other => panic!("round {round}: upload answered {other}: {}", reply.text()),
            };
            removed.remove(&doc);
            accepted.insert(doc);
        }
        if round % 2 == 1
            && let Some(doc) = s.documents().first().and_then(|d| d["id"].as_str().map(str::to_string))
        {
            s.call("DELETE", &format!("/v1/documents/{doc}"), Some(ADMIN), None).expect(200, "delete");
            accepted.remove(&doc);
            removed.insert(doc);
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(0..3000)));
        let done: std::collections::BTreeSet<String> =
            s.documents().iter().filter(|d| d["indexed"] == true).filter_map(|d| d["id"].as_str().map(str::to_string)).collect();
        if !accepted.is_subset(&done) {
            interrupted += 1;
        }
        s.kill_hard();
        let check = s.app.run(&["check"]);
        assert!(check.status.success(), "round {round}: the store is inconsistent after SIGKILL:\n{}", String::from_utf8_lossy(&check.stdout));
        s.restart();
    }
    // After the last restart every accepted upload is stored and indexed, and nothing else is.
    let started = Instant::now();
    loop {
        let docs = s.documents();
        let ids: std::collections::BTreeSet<String> = docs.iter().filter_map(|d| d["id"].as_str().map(str::to_string)).collect();
        let indexed = docs.iter().all(|d| d["indexed"] == true);
        if ids == accepted && indexed {
            break;
        }
        assert!(ids.is_subset(&accepted) && ids.is_disjoint(&removed), "only accepted uploads are stored: {ids:?} of {accepted:?}");
        assert!(started.elapsed() < Duration::from_secs(300), "the accepted uploads {accepted:?} are not all stored and indexed: {docs:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    s.kill_hard();
    let check = s.app.ok(&["check"]);
    assert!(check.contains(&format!("checked {} documents", accepted.len())) && check.contains("consistent"), "{check}");
    eprintln!(
        "SIGKILL at {rounds} random points ({interrupted} with uploads still reading or indexing): {} uploads kept, {} removals kept, 0 lost, 0 inconsistent",
        accepted.len(),
        removed.len()
    );
    assert!(interrupted >= 3, "the kills fell where uploads were in flight ({interrupted} times)");
}

#[test]
fn tokens_never_reach_the_logs() {
    let mut s = Server::start(&[SMALL], "");
    s.kill_hard();
    let log = s._dir.path().join("server.log");
    let (child, url) = Server::spawn_logged(&s.app, &s.config, Some(&log));
    s.child = child;
    s.url = url;
    let wrong = "a-wrong-token-that-must-not-be-logged";
    s.get("/v1/documents", Some(READ)).expect(200, "read token");
    s.get("/v1/documents", Some(wrong)).expect(401, "wrong token");
    s.upload(READ, "x.pdf", b"%PDF-1.7\n%%EOF\n").expect(403, "read token uploads");
    s.ask(json!({ "question": "PepsiCo shareholder vote" })).expect(200, "question");
    s.kill_hard();
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.lines().count() > 5, "the server logged at debug level: {text}");
    for token in [ADMIN, READ, wrong] {
        assert!(!text.contains(token), "{token} appears in the log:\n{text}");
    }
}

fn is_png(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x89PNG\r\n\x1a\n")
}

/// Server-sent events of a body: (event name, data).
fn events(text: &str) -> Vec<(String, String)> {
    text.split("\n\n")
        .filter_map(|block| {
            let mut name = "message".to_string();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event:") {
                    name = n.trim().to_string();
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push_str(d.trim());
                }
            }
            (!data.is_empty()).then_some((name, data))
        })
        .collect()
}

#[test]
fn every_endpoint_answers_with_its_role_and_plain_errors() {
    let s = Server::start(&[SENIORS], "max_body_kib = 16\nmax_upload_mib = 1\nmax_running = 1\nmax_queued = 4\nrequest_timeout_s = 300");

    // Only /healthz answers without a token; a wrong token is 401 too.
    assert_eq!(s.get("/healthz", None).expect(200, "healthz").json()["status"], "ok");
    for path in ["/v1/documents", "/v1/plugins", "/v1/profiles", "/metrics", "/openapi.json", "/v1/models"] {
        let r = s.get(path, None).expect(401, path);
        assert!(r.headers.get("www-authenticate").is_some(), "{path} names the scheme");
        assert!(r.error().contains("token"), "{path}: {}", r.error());
        s.get(path, Some("not-a-token")).expect(401, path);
    }
    let page = s.get("/", None).expect(200, "web page");
    assert!(page.text().contains("<title>Evident</title>"));
    assert!(s.get("/app.js", None).expect(200, "script").text().contains("/v1/query"));
    s.get("/style.css", None).expect(200, "style");
    let api = s.get("/openapi.json", Some(READ)).expect(200, "openapi").json();
    assert!(api["paths"]["/v1/query"]["post"].is_object());
    s.get("/v1/nothing-here", Some(READ)).expect(404, "unknown path");

    // Documents: list, show, page images with and without boxes.
    let docs = s.documents();
    assert_eq!(docs.len(), 1);
    let id = docs[0]["id"].as_str().expect("id").to_string();
    assert_eq!(docs[0]["indexed"], true);
    let shown = s.get(&format!("/v1/documents/{id}"), Some(READ)).expect(200, "show").json();
    assert_eq!(shown["pages"], docs[0]["pages"]);
    assert!(shown["outline"].is_array());
    s.get("/v1/documents/0123456789abcdef", Some(READ)).expect(404, "unknown document");
    let plain = s.get(&format!("/v1/documents/{id}/pages/2/image"), Some(READ)).expect(200, "page image");
    assert!(is_png(&plain.bytes));
    let boxed = s.get(&format!("/v1/documents/{id}/pages/2/image?boxes=50,60,300,200"), Some(READ)).expect(200, "boxed image");
    assert!(is_png(&boxed.bytes) && boxed.bytes != plain.bytes, "the box changes the picture");
    s.get(&format!("/v1/documents/{id}/pages/2/image?boxes=1,2,3"), Some(READ)).expect(400, "bad box");
    s.get(&format!("/v1/documents/{id}/pages/0/image"), Some(READ)).expect(404, "page 0");

    // A question, answered by the quick profile's components, cites real pages with boxes.
    let r = s.ask(json!({ "question": "What share of seniors go online?", "trace": true })).expect(200, "query").json();
    assert_eq!(r["profile"], "quick");
    assert_eq!(r["answer"], "first,first,first", "the verify plugin's labels reach the answer");
    let cited = &r["evidence"][0];
    assert_eq!(cited["document"], id.as_str());
    let n = cited["page"].as_u64().expect("page");
    assert!(n >= 1 && n <= docs[0]["pages"].as_u64().expect("pages"));
    assert!(!cited["snippet"].as_str().expect("snippet").is_empty());
    let image_url = cited["image_url"].as_str().expect("image url");
    assert!(!cited["words"].as_array().expect("words").is_empty() && image_url.contains("words="), "the quoted words are highlighted: {cited}");
    assert!(is_png(&s.get(image_url, Some(READ)).expect(200, "cited image").bytes));
    let stages: Vec<&str> = r["trace"].as_array().expect("trace").iter().map(|t| t["stage"].as_str().expect("stage")).collect();
    assert_eq!(stages, ["retrieve", "verify", "memory"]);

    // The streaming variant reports each stage, then the answer.
    let streamed = s.ask(json!({ "question": "What share of seniors go online?", "stream": true })).expect(200, "stream");
    assert!(streamed.headers.get("content-type").expect("type").to_str().expect("ascii").starts_with("text/event-stream"));
    let evs = events(&streamed.text());
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.last(), Some(&"answer"), "{names:?}");
    let done: Vec<String> = evs
        .iter()
        .filter(|(n, _)| n == "stage")
        .map(|(_, d)| serde_json::from_str::<Value>(d).expect("stage JSON"))
        .filter(|v| v["status"] == "done")
        .map(|v| v["stage"].as_str().expect("stage").to_string())
        .collect();
    assert_eq!(done, ["retrieve", "verify", "memory"]);
    let last: Value = serde_json::from_str(&evs.last().expect("answer").1).expect("answer JSON");
    assert_eq!(last["answer"], "first,first,first");

    // Questions that cannot run say why.
    assert!(s.ask(json!({ "question": "  " })).expect(400, "empty").error().contains("empty"));
    assert!(
        s.ask(json!({ "question": "why ".repeat(1001) })).expect(400, "too long").error().contains("longer than 4000 characters (server.max_question_chars)")
    );
    assert!(s.ask(json!({ "question": "q", "profile": "nope" })).expect(404, "unknown profile").error().contains("no profile named nope"));
    assert!(s.ask(json!({ "question": "q", "documents": ["no-such-file.pdf"] })).expect(404, "unknown document").error().contains("no document"));
    s.call("POST", "/v1/query", Some(READ), Some(("application/json", b"{\"question\": ".to_vec()))).expect(400, "broken JSON");
    s.ask(json!({ "question": "q", "colour": "red" })).expect(422, "unknown field");
    let long = "word ".repeat(8000);
    assert!(s.ask(json!({ "question": long })).expect(413, "oversized body").error().contains("max_body_kib"));

    // Uploads need an admin token; a broken PDF and an oversized one store nothing.
    let small = std::fs::read(common::bench_pdf(SMALL)).expect("pdf");
    assert!(s.upload(READ, "x.pdf", &small).expect(403, "read token uploads").error().contains("admin"));
    let broken = s.upload(ADMIN, "broken.pdf", b"%PDF-1.7\nthis is not really a PDF\n%%EOF\n").expect(422, "broken PDF");
    assert!(broken.error().contains("broken.pdf"), "{}", broken.error());
    let big = vec![b'x'; 1_300_000];
    assert!(s.upload(ADMIN, "big.pdf", &big).expect(413, "oversized upload").error().contains("max_upload_mib"));
    assert_eq!(s.documents().len(), 1, "nothing was stored");
    assert!(!s.app.data.path().join("uploads").exists() || std::fs::read_dir(s.app.data.path().join("uploads")).expect("dir").count() == 0);

    // A real upload becomes a job, then a searchable document.
    let job = s.upload(ADMIN, "pepsico-8k.pdf", &small).expect(202, "upload").json()["job"].clone();
    let job_id = job["id"].as_str().expect("job id").to_string();
    let started = Instant::now();
    let job = loop {
        let j = s.get(&format!("/v1/jobs/{job_id}"), Some(READ)).expect(200, "job").json()["job"].clone();
        if j["state"] == "done" || j["state"] == "failed" {
            break j;
        }
        assert!(started.elapsed() < Duration::from_secs(300), "ingest finishes");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["pages_read"], job["pages"]);
    assert_eq!(job["pages_indexed"], job["pages"]);
    let new_id = job["document"].as_str().expect("document").to_string();
    let docs = s.documents();
    assert_eq!(docs.len(), 2);
    assert!(docs.iter().any(|d| d["id"] == new_id.as_str() && d["indexed"] == true && d["file_name"] == "pepsico-8k.pdf"));
    let r = s.ask(json!({ "question": "PepsiCo shareholder vote", "documents": [new_id] })).expect(200, "scoped query").json();
    assert_eq!(r["evidence"][0]["document"], new_id.as_str());
    assert_eq!(s.upload(ADMIN, "again.pdf", &small).expect(200, "same bytes").json()["already_present"], true);
    s.get("/v1/jobs/job-999", Some(READ)).expect(404, "unknown job");

    // Plugins: list, refuse junk, install a component, swap it in, and see it answer.
    let plugins = s.get("/v1/plugins", Some(READ)).expect(200, "plugins").json();
    assert!(plugins["plugins"].as_array().expect("list").iter().any(|p| p["name"] == "baseline-memory"));
    let install = |name: &str, bytes: Vec<u8>, token: &str| s.call("POST", &format!("/v1/plugins?name={name}"), Some(token), Some(("application/wasm", bytes)));
    assert!(install("junk", b"not wasm".to_vec(), ADMIN).expect(422, "junk plugin").error().contains("junk cannot be installed"));
    let labeler = std::fs::read(common::repo_root().join(".evident/test-plugins/test-labeler-verify.wasm")).expect("labeler built");
    install("labeler", labeler.clone(), READ).expect(403, "read token installs");
    assert_eq!(install("labeler", labeler, ADMIN).expect(201, "install").json()["plugin"]["kind"], "verify");
    let swap = |stage: &str, plugin: &str, token: &str| {
        s.call(
            "PUT",
            &format!("/v1/profiles/quick/stages/{stage}"),
            Some(token),
            Some(("application/json", json!({ "plugin": plugin }).to_string().into_bytes())),
        )
    };
    swap("verify", "labeler", READ).expect(403, "read token swaps");
    swap("judge", "labeler", ADMIN).expect(400, "unknown stage");
    swap("memory", "labeler", ADMIN).expect(400, "a verify plugin behind memory");
    swap("verify", "labeler", ADMIN).expect(200, "swap");
    let r = s.ask(json!({ "question": "What share of seniors go online?", "documents": [id] })).expect(200, "after swap").json();
    assert_eq!(r["answer"], "labeler,labeler,labeler");
    let profiles = s.get("/v1/profiles", Some(READ)).expect(200, "profiles").json();
    let quick = profiles["profiles"].as_array().expect("profiles").iter().find(|p| p["name"] == "quick").cloned().expect("quick");
    assert_eq!(quick["stages"]["verify"], "labeler");
    let models = s.get("/v1/models", Some(READ)).expect(200, "models").json();
    assert!(models["data"].as_array().expect("models").iter().any(|m| m["id"] == "answer"));

    // Delete: admin only; then the document is gone everywhere.
    s.call("DELETE", &format!("/v1/documents/{new_id}"), Some(READ), None).expect(403, "read token deletes");
    s.call("DELETE", &format!("/v1/documents/{new_id}"), Some(ADMIN), None).expect(200, "delete");
    s.get(&format!("/v1/documents/{new_id}"), Some(READ)).expect(404, "deleted");
    assert_eq!(s.documents().len(), 1);

    // Metrics count what happened.
    let metrics = s.get("/metrics", Some(READ)).expect(200, "metrics").text();
    assert!(metrics.contains("evident_http_requests_total{method=\"POST\",route=\"/v1/query\",status=\"200\"}"), "{metrics}");
    assert!(metrics.contains("evident_documents 1"), "{metrics}");
    assert!(metrics.contains("evident_ingest_jobs_total{outcome=\"done\"} 1"), "{metrics}");
}

/// Each kind of failure, provoked the way a client would, answers with its status, its `kind`
/// and a sentence; a failure inside the appliance is a 500 and never blames the client.
#[test]
fn every_kind_of_error_answers_with_its_own_status() {
    let s = Arc::new(Server::start(&[], "max_body_kib = 16\nmax_running = 1\nmax_queued = 0\nrequest_timeout_s = 6"));
    let check = |reply: Reply, status: u16, kind: &str, what: &str| {
        let body = reply.expect(status, what).json();
        assert_eq!(body["error"]["kind"], kind, "{what}: {body}");
        assert_eq!(body["error"]["code"], status, "{what}: {body}");
        let message = body["error"]["message"].as_str().expect("message");
        assert!(message.len() > 10 && !message.contains('\n'), "{what}: one plain sentence, not {message:?}");
        message.to_string()
    };
    let message = check(s.ask(json!({ "question": "q" })), 409, "conflict", "a question before any upload");
    assert!(message.contains("upload a PDF first"), "{message}");
    check(s.get("/v1/documents", None), 401, "unauthorized", "no token");
    check(s.upload(READ, "x.pdf", b"%PDF-1.7\n%%EOF\n"), 403, "forbidden", "a read token uploads");
    check(s.call("POST", "/v1/query", Some(READ), Some(("application/json", b"{\"question\": ".to_vec()))), 400, "bad_request", "broken JSON");
    check(s.ask(json!({ "question": "  " })), 400, "bad_request", "an empty question");
    check(s.ask(json!({ "question": "q", "colour": "red" })), 422, "invalid", "an unknown field");
    let junk = s.call("POST", "/v1/plugins?name=junk", Some(ADMIN), Some(("application/wasm", b"not wasm".to_vec())));
    check(junk, 422, "invalid", "a component that is not one");
    check(s.upload(ADMIN, "broken.pdf", b"%PDF-1.7\nthis is not really a PDF\n%%EOF\n"), 422, "invalid", "a broken PDF");
    check(s.ask(json!({ "question": "word ".repeat(8000) })), 413, "too_large", "an oversized body");
    check(s.get("/v1/documents/0123456789abcdef", Some(READ)), 404, "not_found", "an unknown document");
    check(s.get("/v1/jobs/job-999", Some(READ)), 404, "not_found", "an unknown job");
    let swap =
        s.call("PUT", "/v1/profiles/quick/stages/memory", Some(ADMIN), Some(("application/json", json!({ "plugin": "nobody" }).to_string().into_bytes())));
    check(swap, 404, "not_found", "a plugin that is not installed");
    let swap = s.call(
        "PUT",
        "/v1/profiles/quick/stages/decompose",
        Some(ADMIN),
        Some(("application/json", json!({ "plugin": "test-hostile-verify" }).to_string().into_bytes())),
    );
    check(swap, 400, "bad_request", "a stage the profile does not have");

    // With a document: a stage that misbehaves is the appliance's failure, not the asker's.
    let small = std::fs::read(common::bench_pdf(SMALL)).expect("pdf");
    let job = s.upload(ADMIN, "pepsico-8k.pdf", &small).expect(202, "upload").json()["job"]["id"].as_str().expect("job id").to_string();
    assert_eq!(s.finished_job(&job, Duration::from_secs(300))["state"], "done");
    check(s.ask(json!({ "question": "q", "profile": "nope" })), 404, "not_found", "an unknown profile");
    let message = check(s.ask(json!({ "question": "PepsiCo vote", "profile": "miscites" })), 500, "internal", "a stage that cites a missing page");
    assert!(message.contains("test-hostile-memory") && message.contains("cited a page that does not exist"), "{message}");

    // A question past the request timeout is 504; one more while it runs finds no room: 429.
    let stuck = {
        let s = s.clone();
        std::thread::spawn(move || s.ask(json!({ "question": "PepsiCo vote", "profile": "stuck" })))
    };
    let started = Instant::now();
    while !s.get("/metrics", Some(READ)).expect(200, "metrics").text().contains("evident_pipeline_running 1") {
        assert!(started.elapsed() < Duration::from_secs(5), "the stuck question starts");
        std::thread::sleep(Duration::from_millis(50));
    }
    let shed = s.ask(json!({ "question": "PepsiCo vote", "profile": "quick" }));
    assert!(shed.headers.get("retry-after").is_some(), "429 says when to come back");
    check(shed, 429, "overloaded", "a question while the only slot is taken");
    let message = check(stuck.join().expect("client"), 504, "timeout", "a question past request_timeout_s");
    assert!(message.contains("server.request_timeout_s"), "{message}");
}

#[test]
fn overload_is_shed_with_429_then_service_resumes_and_a_timeout_frees_its_slot() {
    let s = Arc::new(Server::start(&[SENIORS], "max_running = 1\nmax_queued = 1\nrequest_timeout_s = 20"));
    // Ten times what the gate holds (one running, one waiting).
    let burst = 10 * (1 + 1);
    let clients: Vec<_> = (0..burst)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || {
                let r = s.ask(json!({ "question": "What share of seniors go online?", "profile": "slow" }));
                (r.status, r.headers.get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok()), r.text())
            })
        })
        .collect();
    let results: Vec<_> = clients.into_iter().map(|c| c.join().expect("client")).collect();
    let ok = results.iter().filter(|r| r.0 == 200).count();
    let shed: Vec<_> = results.iter().filter(|r| r.0 == 429).collect();
    assert_eq!(ok + shed.len(), burst, "every request the gate accepted is answered; the rest get 429: {results:?}");
    assert!(ok >= 2 && shed.len() >= burst / 2, "one runs, one waits, the rest are shed: {results:?}");
    for r in &shed {
        assert!(r.1.is_some_and(|s| s >= 1), "429 carries Retry-After: {r:?}");
        assert!(r.2.contains("busy"), "{}", r.2);
    }
    let metrics = s.get("/metrics", Some(READ)).expect(200, "metrics").text();
    assert!(metrics.contains(&format!("evident_pipeline_rejected_total {}", shed.len())), "{metrics}");
    s.ask(json!({ "question": "What share of seniors go online?" })).expect(200, "normal service after the burst");

    // A question that would never end is stopped at the timeout, and its slot comes back.
    let started = Instant::now();
    let r = s.ask(json!({ "question": "What share of seniors go online?", "profile": "stuck" })).expect(504, "timeout");
    assert!(r.error().contains("request_timeout_s"), "{}", r.error());
    assert!(started.elapsed() < Duration::from_secs(60));
    let started = Instant::now();
    loop {
        let r = s.ask(json!({ "question": "What share of seniors go online?" }));
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 429, "{}", r.text());
        assert!(started.elapsed() < Duration::from_secs(60), "the stopped run gives its slot back");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn shutdown_lets_the_running_question_finish() {
    let mut s = Server::start(&[SENIORS], "max_running = 1\nmax_queued = 2\nrequest_timeout_s = 120");
    let url = s.url.clone();
    let asker = std::thread::spawn(move || {
        let agent = Server::agent();
        let mut r = agent
            .post(format!("{url}/v1/query"))
            .header("Authorization", format!("Bearer {READ}"))
            .header("Content-Type", "application/json")
            .send(json!({ "question": "What share of seniors go online?", "profile": "slow" }).to_string())
            .expect("the running request is answered");
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap_or_default())
    });
    // Wait until the question holds the pipeline slot, then ask the server to stop.
    let started = Instant::now();
    while !s.get("/metrics", Some(READ)).text().contains("evident_pipeline_running 1") {
        assert!(started.elapsed() < Duration::from_secs(60), "the question starts");
        std::thread::sleep(Duration::from_millis(20));
    }
    s.terminate();
    let (status, body) = asker.join().expect("asker");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("slow,slow,slow"), "{body}");
    let started = Instant::now();
    let code = loop {
        if let Some(code) = s.child.try_wait().expect("wait") {
            break code;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the server exits after the request");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(code.success(), "{code:?}");
    assert!(Server::agent().get(format!("{}/healthz", s.url)).call().is_err(), "nothing listens any more");
}

fn venv_python() -> PathBuf {
    let python = common::repo_root().join(".evident/venv/bin/python");
    assert!(python.exists(), "set-up makes .evident/venv (bash scripts/setup.sh)");
    python
}

#[test]
fn the_openai_python_client_talks_to_chat_completions() {
    let s = Server::start(&[SENIORS], "max_running = 1\nmax_queued = 4\nrequest_timeout_s = 600");
    let script = common::repo_root().join("tests/fixtures/openai_client_check.py");
    let out = Command::new(venv_python())
        .arg(&script)
        .args(["--base-url", &format!("{}/v1", s.url), "--token", READ, "--model", "answer"])
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "openai client check failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("non-streaming ok") && stdout.contains("streaming ok") && stdout.contains("models ok"), "{stdout}");
}

#[test]
fn the_web_page_signs_in_uploads_asks_opens_a_citation_and_compares_two_profiles_in_chromium() {
    let s = Server::start(&[], "max_running = 1\nmax_queued = 4\nrequest_timeout_s = 600");
    let artifacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("test-artifacts");
    std::fs::create_dir_all(&artifacts).expect("artifacts dir");
    let screenshot = artifacts.join("web-page.png");
    let _ = std::fs::remove_file(&screenshot);
    let script = common::repo_root().join("tests/browser/web_page_check.py");
    let out = Command::new(venv_python())
        .arg(&script)
        .args(["--url", &s.url, "--token", ADMIN, "--pdf"])
        .arg(common::bench_pdf(SENIORS).canonicalize().expect("the PDF exists"))
        .args(["--question", "What share of seniors go online?", "--profile", "answer", "--compare", "quick,slow", "--screenshot"])
        .arg(&screenshot)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "browser check failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("compared: quick:") && stdout.contains("| slow:"), "the comparison ran:\n{stdout}");
    let png = std::fs::read(&screenshot).expect("a screenshot is kept");
    assert!(is_png(&png) && png.len() > 10_000, "screenshot at {}", screenshot.display());
    eprintln!("screenshot: {}", screenshot.display());
    // The upload went through the page into the store.
    assert_eq!(s.documents().len(), 1);
}
