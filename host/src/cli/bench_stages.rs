//! `evident bench stages`: what the sandbox costs. Host overhead per stage call (a fresh
//! instance, the call, the copying of inputs and outputs) with a stage that does no work of its
//! own, that overhead as a share of answering a question, and how soon a swap reaches new
//! requests.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, bail};
use evident::pipeline::RequestHost;
use evident::plugins::types::{Candidate, PageRef, StageContext, Verdict};
use evident::plugins::{StageHost, StageKind};

use super::Context;

/// Measures and prints the table.
pub fn run(ctx: &Context, calls: usize, profile: &str, question: &str) -> Result<ExitCode> {
    let store = Arc::new(ctx.store()?);
    let docs = store.documents()?;
    if docs.is_empty() {
        bail!("the store holds no documents; ingest one first (evident ingest <PDF>)");
    }
    let registry = ctx.registry(store.clone())?;
    let runtime = registry.runtime();
    let services = ctx.services(store.clone())?;
    let host: Arc<dyn StageHost> = Arc::new(RequestHost::new(services.clone(), docs.clone(), 0));

    // hievi-rerank does no host calls and little work: its time is the host's overhead.
    let started = Instant::now();
    let resolved = registry.resolve("hievi")?;
    let compile_ms = started.elapsed().as_secs_f64() * 1000.0;
    let rerank = resolved.components.get(&StageKind::Rerank).map(|(_, c)| c.clone()).ok_or_else(|| anyhow::anyhow!("profile hievi has no rerank stage"))?;
    let candidates: Vec<Candidate> =
        (1..=20).map(|p| Candidate { page: PageRef { document: docs[0].id.clone(), page: p }, score: 1.0 / p as f32, rank: p }).collect();
    let verdicts: Vec<Verdict> =
        candidates.iter().map(|c| Verdict { page: c.page.clone(), relevant: c.rank % 3 == 0, label: "T".into(), score: None, notes: String::new() }).collect();
    let ctx_ = StageContext { question: question.into(), documents: vec![docs[0].id.clone()], params: vec![] };
    runtime.rerank(&rerank, host.clone(), &ctx_, question, true, &candidates, &verdicts)?;
    let mut times: Vec<f64> = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        runtime.rerank(&rerank, host.clone(), &ctx_, question, true, &candidates, &verdicts)?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let median = super::percentile(&times, 0.5);
    let p99 = super::percentile(&times, 0.99);

    // One question end to end with the profile.
    let resolved = registry.resolve(profile)?;
    let host = Arc::new(RequestHost::new(services, vec![docs[0].clone()], 0));
    let outcome = evident::pipeline::run(runtime, &resolved, host, question)?;
    let stage_calls = outcome.trace.iter().filter(|s| s.plugin != "host").count();

    // A swap of hievi's verify stage to another plugin (the same component installed under a
    // second name, compiled already), timed until a new request's resolve sees it. It runs on a
    // scratch store, so the bench leaves no binding behind in the operator's.
    let scratch_dir = tempfile::tempdir()?;
    let scratch = ctx.registry(Arc::new(evident::store::Store::open(scratch_dir.path())?))?;
    let before = scratch.resolve("hievi")?;
    let (bound, _) = before.components.get(&StageKind::Verify).ok_or_else(|| anyhow::anyhow!("profile hievi has no verify stage"))?;
    let wasm = std::fs::read(ctx.config.plugins.dir.join(format!("{bound}.wasm")))?;
    let other = format!("{bound}-copy");
    scratch.install(&wasm, &other, "bench", Some(StageKind::Verify))?;
    let t = Instant::now();
    scratch.swap("hievi", StageKind::Verify, &other)?;
    let seen = scratch.resolve("hievi")?.components[&StageKind::Verify].0 == other;
    let swap_ms = t.elapsed().as_secs_f64() * 1000.0;

    println!("stage call overhead (hievi-rerank on 20 candidates, fresh sandbox each call, {calls} calls)");
    println!("  median {:.3} ms, p99 {:.3} ms (target: under 1 ms)", median, p99);
    println!("  first compile of the hievi profile's 4 components: {compile_ms:.0} ms (once per process)");
    println!(
        "one question with profile {profile}: {:.2} s, {} stage calls, {} model calls, {} tokens; host overhead {:.3} % of it (target: under 1 %)",
        outcome.ms / 1000.0,
        stage_calls,
        outcome.llm_calls,
        outcome.tokens,
        100.0 * stage_calls as f64 * median / outcome.ms
    );
    println!("swap of hievi's verify stage ({bound} to {other}), visible to the next request: {swap_ms:.3} ms, seen: {seen} (target: within 50 ms)");
    Ok(ExitCode::SUCCESS)
}
