//! `evident bench http`: a load generator for a running `evident serve`. Clients post the
//! benchmark's questions to /v1/query (each asking its own document) for a while at each
//! concurrency level; the table gives answered queries/s, p50/p99 latency, how many were shed
//! with 429, and the server's resident memory (from /metrics) before and at its peak.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Args;
use serde_json::{Value, json};

use super::{Context, percentile};

/// Arguments of `evident bench http`.
#[derive(Args)]
pub struct BenchHttpArgs {
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// A read token.
    #[arg(long, env = "EVIDENT_TOKEN")]
    token: String,
    /// Concurrent clients, one level after another.
    #[arg(long, value_delimiter = ',', default_value = "1,4,32")]
    clients: Vec<usize>,
    /// Seconds of load at each level (requests still running then are waited for and counted).
    #[arg(long, default_value_t = 120)]
    seconds: u64,
    /// Questions to ask, cycled (the benchmark's JSON lines).
    #[arg(long, value_name = "FILE")]
    questions: PathBuf,
    /// Profile to run (default: the server's).
    #[arg(long)]
    profile: Option<String>,
}

struct Sample {
    status: u16,
    seconds: f64,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(Duration::from_secs(3600))).build().into()
}

fn resident_mib(url: &str, token: &str) -> Option<f64> {
    let mut r = agent().get(format!("{url}/metrics")).header("Authorization", &format!("Bearer {token}")).call().ok()?;
    let text = r.body_mut().read_to_string().ok()?;
    let line = text.lines().find(|l| l.starts_with("evident_process_resident_memory_bytes "))?;
    Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? / (1024.0 * 1024.0))
}

/// Runs the load levels and prints the table.
pub fn run(_ctx: &Context, args: BenchHttpArgs) -> Result<ExitCode> {
    let url = args.url.trim_end_matches('/').to_string();
    let text = std::fs::read_to_string(&args.questions).with_context(|| format!("reading {}", args.questions.display()))?;
    let questions: Vec<(String, String)> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|q| {
            let doc = q["doc"].as_str()?.rsplit('/').next()?.to_string();
            Some((q["question"].as_str()?.to_string(), doc))
        })
        .collect();
    if questions.is_empty() {
        bail!("no questions in {}", args.questions.display());
    }
    let Some(before) = resident_mib(&url, &args.token) else {
        bail!("no server answers at {url}/metrics with that token; start one with `evident serve` and pass --token");
    };
    // Only questions whose document the server holds, fully indexed.
    let mut r = agent().get(format!("{url}/v1/documents")).header("Authorization", &format!("Bearer {}", args.token)).call()?;
    let docs: Value = serde_json::from_str(&r.body_mut().read_to_string()?)?;
    let ready: Vec<(String, u64)> = docs["documents"]
        .as_array()
        .map(|a| a.iter().filter(|d| d["indexed"] == true).filter_map(|d| Some((d["file_name"].as_str()?.to_string(), d["pages"].as_u64()?))).collect())
        .unwrap_or_default();
    let all = questions.len();
    let questions: Vec<(String, String)> = questions.into_iter().filter(|(_, doc)| ready.iter().any(|(f, _)| f == doc)).collect();
    if questions.is_empty() {
        bail!("the server holds none of the questions' documents indexed; ingest them (`evident ingest <the benchmark's docs folder>`) first");
    }
    let pages: u64 = ready.iter().map(|(_, p)| p).sum();
    println!(
        "{} of {all} questions (their documents are indexed on the server: {} documents, {pages} pages), {} s a level, against {url}",
        questions.len(),
        ready.len(),
        args.seconds
    );
    println!(
        "{:>7} {:>8} {:>6} {:>6} {:>6} {:>9} {:>9} {:>9} {:>10} {:>10}",
        "clients", "requests", "ok", "429", "other", "ok q/s", "p50 s", "p99 s", "RSS0 MiB", "peak MiB"
    );
    let questions = Arc::new(questions);
    let next = Arc::new(AtomicUsize::new(0));
    let mut rss_start = before;
    for &clients in &args.clients {
        let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let deadline = Instant::now() + Duration::from_secs(args.seconds);
        let started = Instant::now();
        let workers: Vec<_> = (0..clients)
            .map(|_| {
                let (samples, stop, questions, next, url, token, profile) =
                    (samples.clone(), stop.clone(), questions.clone(), next.clone(), url.clone(), args.token.clone(), args.profile.clone());
                std::thread::spawn(move || {
                    let agent = agent();
                    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                        let (q, doc) = &questions[next.fetch_add(1, Ordering::Relaxed) % questions.len()];
                        let mut body = json!({ "question": q, "documents": [doc] });
                        if let Some(p) = &profile {
                            body["profile"] = json!(p);
                        }
                        let t = Instant::now();
                        let status = match agent
                            .post(format!("{url}/v1/query"))
                            .header("Authorization", &format!("Bearer {token}"))
                            .header("Content-Type", "application/json")
                            .send(body.to_string())
                        {
                            Ok(mut r) => {
                                let _ = r.body_mut().read_to_vec();
                                r.status().as_u16()
                            }
                            Err(_) => 0,
                        };
                        evident::error::lock(&samples).push(Sample { status, seconds: t.elapsed().as_secs_f64() });
                        if status == 429 {
                            // A polite client backs off a little instead of hammering a busy server.
                            std::thread::sleep(Duration::from_millis(500));
                        }
                    }
                })
            })
            .collect();
        let mut peak = rss_start;
        while workers.iter().any(|w| !w.is_finished()) {
            std::thread::sleep(Duration::from_millis(500));
            if let Some(m) = resident_mib(&url, &args.token) {
                peak = peak.max(m);
            }
        }
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            let _ = w.join();
        }
        let elapsed = started.elapsed().as_secs_f64();
        let samples = evident::error::lock(&samples);
        let ok: Vec<f64> = samples.iter().filter(|s| s.status == 200).map(|s| s.seconds).collect();
        let shed = samples.iter().filter(|s| s.status == 429).count();
        let other = samples.len() - ok.len() - shed;
        println!(
            "{clients:>7} {:>8} {:>6} {shed:>6} {other:>6} {:>9.3} {:>9.1} {:>9.1} {rss_start:>10.0} {peak:>10.0}",
            samples.len(),
            ok.len(),
            ok.len() as f64 / elapsed,
            percentile(&ok, 0.5),
            percentile(&ok, 0.99),
        );
        rss_start = resident_mib(&url, &args.token).unwrap_or(rss_start);
    }
    Ok(ExitCode::SUCCESS)
}
