//! The OpenAI-compatible generator client against a small server the test starts on loopback
//! (tests/fixtures/openai_test_server.py, real HTTP): streaming, image parts, auth, retries,
//! a 500, a timeout, an unreachable server, and choice scoring with and without logprobs.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use evident::generate::{GenerateError, GenerateRequest, Generator, ImagePart, Message, RemoteConfig, RemoteGenerator};

struct TestServer {
    child: Child,
    port: u16,
}

impl TestServer {
    fn start() -> TestServer {
        let root = common::repo_root();
        let mut child = Command::new(root.join(".evident/venv/bin/python"))
            .arg(root.join("tests/fixtures/openai_test_server.py"))
            .stdout(Stdio::piped())
            .spawn()
            .expect("the test server starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("port line");
        TestServer { port: line.trim().parse().expect("a port"), child }
    }

    fn client(&self, model: &str, timeout_s: u64, retries: u32) -> RemoteGenerator {
        RemoteGenerator::new(RemoteConfig {
            base_url: format!("http://127.0.0.1:{}/v1/", self.port),
            model: model.into(),
            api_key: "test-key".into(),
            images: true,
            timeout_s,
            retries,
        })
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn page_png() -> Vec<u8> {
    let mut png = Vec::new();
    let img = image::RgbImage::from_pixel(4, 3, image::Rgb([200, 10, 10]));
    img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).expect("encodes");
    png
}

#[test]
fn streams_text_and_sends_page_images_as_data_urls() {
    let server = TestServer::start();
    let client = server.client("echo", 10, 0);
    let mut request = GenerateRequest::user("What is on page 3?", 64);
    request.messages[0].images.push(ImagePart { png: page_png() });
    let mut pieces = Vec::new();
    let out = client.generate(&request, None, &mut |p| pieces.push(p.to_string())).expect("generates");
    assert_eq!(out.text, "You said: What is on page 3? | images: 1 png");
    assert!(pieces.len() > 3, "the answer arrived in pieces: {pieces:?}");
    assert_eq!(pieces.concat(), out.text);
    assert_eq!((out.prompt_tokens, out.completion_tokens), (7, pieces.len()), "usage from the final event");

    // A thinking model's reasoning, streamed before its answer, reaches neither the listener
    // nor the final text.
    let thinking = server.client("echo-thinking", 10, 0);
    let mut pieces = Vec::new();
    let out = thinking.generate(&GenerateRequest::user("Think it over", 64), None, &mut |p| pieces.push(p.to_string())).expect("generates");
    assert!(out.text.starts_with("[echo-thinking] You said: Think it over"), "{}", out.text);
    assert_eq!(pieces.concat(), out.text);

    // A model configured without images gets text only.
    let text_only = RemoteGenerator::new(RemoteConfig { images: false, ..config_of(&server, "echo") });
    let out = text_only.generate(&request, None, &mut |_| {}).expect("generates");
    assert!(out.text.ends_with("images: 0"), "{}", out.text);
}

fn config_of(server: &TestServer, model: &str) -> RemoteConfig {
    RemoteConfig {
        base_url: format!("http://127.0.0.1:{}/v1", server.port),
        model: model.into(),
        api_key: "test-key".into(),
        images: true,
        timeout_s: 10,
        retries: 0,
    }
}

#[test]
fn server_errors_timeouts_and_absence_become_clear_errors() {
    let server = TestServer::start();
    let request = GenerateRequest::user("hello", 8);

    let err = server.client("broken", 10, 1).generate(&request, None, &mut |_| {}).expect_err("a 500 fails");
    assert!(matches!(err, GenerateError::Server { status: 500, .. }), "{err}");
    assert!(err.to_string().contains("the model crashed"), "{err}");

    let mut flaky = request.clone();
    flaky.sampling.seed = 42;
    let out = server.client("flaky", 10, 2).generate(&flaky, None, &mut |_| {}).expect("a retry passes a single 500");
    assert!(out.text.starts_with("You said: hello"));

    let started = Instant::now();
    let err = server.client("slow", 1, 0).generate(&request, None, &mut |_| {}).expect_err("times out");
    assert!(matches!(err, GenerateError::Timeout { seconds: 1, .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(4), "the timeout fired before the server answered");

    let wrong_key = RemoteGenerator::new(RemoteConfig { api_key: "nope".into(), ..config_of(&server, "echo") });
    let err = wrong_key.generate(&request, None, &mut |_| {}).expect_err("401");
    assert!(matches!(err, GenerateError::Server { status: 401, .. }), "{err}");

    // Nothing listens on a port the server just gave up.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let absent = RemoteGenerator::new(RemoteConfig { base_url: format!("http://127.0.0.1:{port}/v1"), ..config_of(&server, "echo") });
    let err = absent.generate(&request, None, &mut |_| {}).expect_err("unreachable");
    assert!(matches!(err, GenerateError::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains("cannot be reached"), "{err}");
}

#[test]
fn choices_are_scored_from_the_servers_logprobs_or_refused_without_them() {
    let server = TestServer::start();
    let messages = vec![Message::text("user", "Is fire cold? Answer Yes or No.")];
    let choices = vec!["Yes".to_string(), "No".to_string(), "Perhaps".to_string()];
    let scores = server.client("logprobs", 10, 0).score_choices(&messages, &choices, None).expect("scores");
    assert_eq!(scores[0].logprob, -1.9);
    assert_eq!(scores[1].logprob, -0.2);
    assert!(scores[2].logprob < -4.0, "an unlisted choice ranks below every listed one");
    let err = server.client("nologprobs", 10, 0).score_choices(&messages, &choices, None).expect_err("no logprobs");
    assert!(matches!(err, GenerateError::NoLogprobs), "{err}");
}

#[test]
fn generate_command_uses_the_configured_server() {
    let server = TestServer::start();
    let app = common::Appliance::new();
    let config = app.data.path().join("remote.toml");
    std::fs::write(
        &config,
        format!(
            "[generator]\nbackend = \"openai\"\n[generator.openai]\nbase_url = \"http://127.0.0.1:{}/v1\"\nmodel = \"echo\"\napi_key = \"test-key\"\n",
            server.port
        ),
    )
    .expect("config");
    let out = app.ok(&["--config", config.to_str().expect("utf-8"), "generate", "Summarise the filing."]);
    assert!(out.contains("You said: Summarise the filing."), "{out}");
    std::fs::write(&config, "[generator]\nbackend = \"openai\"\n[generator.openai]\nbase_url = \"http://127.0.0.1:9/v1\"\nretries = 0\n").expect("config");
    let out = app.run(&["--config", config.to_str().expect("utf-8"), "generate", "Hello"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot be reached") && err.contains("base_url"), "{err}");
}
