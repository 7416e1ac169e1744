//! `evident bench generate`: prompt and decode speed of the embedded generator on each backend,
//! beside llama.cpp (llama-cpp-python) on the same GGUF and the same prompt tokens.

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use evident::generate::{CpuPromptPass, EmbeddedGenerator, Generator, PromptCache, embedded_model_path, sampling_argmax};
use evident::models::{ComputeDevice, KvCache, LogitsFor};
use evident_kernels::MatmulPath;

use super::Context;

/// Text the prompt is cut from: plain filing prose, as stages will send.
const PROSE: &str = "The Company's revenue increased in fiscal 2023 compared with the prior year, driven by higher \
volumes in the Americas and favourable pricing across most segments, partly offset by unfavourable foreign \
exchange. Operating margin declined by 40 basis points as input costs rose and the Company continued to invest \
in manufacturing capacity, digital capabilities and its distribution network. Net cash provided by operating \
activities was sufficient to fund capital expenditures, dividends and share repurchases. ";

struct Row {
    engine: String,
    prompt_tps: f64,
    decode_tps: f64,
    peak_mib: f64,
}

/// A second prompt that shares most of the first, run with and without the first's cache.
struct Reuse {
    engine: String,
    tokens: usize,
    computed: u64,
    reused: u64,
    cold_s: f64,
    warm_s: f64,
}

/// Measures each backend (and llama.cpp when `python` has llama_cpp) and prints a table.
pub fn run(ctx: &Context, backends: &[String], prompt_tokens: usize, decode_tokens: usize, python: Option<&Path>) -> Result<ExitCode> {
    let path = embedded_model_path(&ctx.config.models_dir, &ctx.config.generator.model)?;
    let mut rows = Vec::new();
    let mut reuse_rows = Vec::new();
    let mut prompt_ids = Vec::new();
    let mut title = String::new();
    for backend in backends {
        let cpu = ComputeDevice { device: burn::prelude::Device::flex(), wgpu: false };
        let (pinned, backend_name) = match backend.split_once('-').filter(|(cpu, _)| *cpu == "cpu") {
            Some((_, "f32")) => (Some(MatmulPath::F32Panels), "cpu"),
            Some((_, "int8")) => (Some(MatmulPath::Int8Rows), "cpu"),
            Some((_, "bf16")) => (Some(MatmulPath::Bf16), "cpu"),
            Some((_, "amx")) => (Some(MatmulPath::Amx), "cpu"),
            _ => (None, backend.as_str()),
        };
        if let Some(pinned) = pinned.filter(|p| !MatmulPath::available().contains(p)) {
            bail!("this CPU has no {pinned:?} path for prompt passes (it has {:?})", MatmulPath::available());
        }
        MatmulPath::prefer(pinned);
        let (compute, prompt_pass) = match backend_name {
            "cpu" => (cpu, CpuPromptPass::Native),
            "burn-cpu" => (cpu, CpuPromptPass::Burn),
            "wgpu" => (ComputeDevice { device: burn::prelude::Device::wgpu(burn::prelude::DeviceKind::DefaultDevice), wgpu: true }, CpuPromptPass::Native),
            _ => bail!("unknown backend {backend}; use cpu (or cpu-f32, cpu-int8, cpu-bf16, cpu-amx to pin the prompt pass's products), burn-cpu or wgpu"),
        };
        let generator = EmbeddedGenerator::load_with(&path, &compute, prompt_pass).with_context(|| format!("loading {}", path.display()))?;
        if prompt_ids.is_empty() {
            let text = PROSE.repeat(prompt_tokens / 60 + 2);
            prompt_ids = generator.tokenizer().encode(&text)?;
            prompt_ids.truncate(prompt_tokens);
            let weights = generator.weight_bytes().map(|b| format!(", weights {:.0} MiB in memory", b as f64 / (1 << 20) as f64)).unwrap_or_default();
            title = format!("{}{weights}", generator.describe());
        }
        // One warm-up pass compiles kernels and fills caches.
        measure(&generator, &prompt_ids[..prompt_ids.len().min(16)], 2)?;
        let (prompt_s, decode_s) = measure(&generator, &prompt_ids, decode_tokens)?;
        rows.push(Row {
            engine: format!("evident {backend}"),
            prompt_tps: prompt_ids.len() as f64 / prompt_s,
            decode_tps: decode_tokens as f64 / decode_s,
            peak_mib: peak_rss_mib(),
        });
        reuse_rows.push(measure_reuse(&generator, &prompt_ids, &format!("evident {backend}"))?);
    }
    if let Some(python) = python {
        let out = Command::new(python)
            .arg(super::reference_script("generate_llamacpp.py")?)
            .arg(&path)
            .arg(prompt_ids.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
            .arg(decode_tokens.to_string())
            .output()
            .context("running benches/generate_llamacpp.py")?;
        if !out.status.success() {
            bail!("the llama.cpp reference failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("the llama.cpp reference printed no JSON")?;
        rows.push(Row {
            engine: format!("llama.cpp {} (llama-cpp-python)", v["version"].as_str().unwrap_or("?")),
            prompt_tps: v["prompt_tps"].as_f64().unwrap_or(0.0),
            decode_tps: v["decode_tps"].as_f64().unwrap_or(0.0),
            peak_mib: v["peak_mib"].as_f64().unwrap_or(0.0),
        });
    }
    println!("{title}: prompt {} tokens, decode {decode_tokens} tokens (greedy), {} threads", prompt_ids.len(), rayon::current_num_threads());
    println!("{:<40} {:>12} {:>12} {:>14}", "engine", "prompt tok/s", "decode tok/s", "peak RSS MiB");
    for r in rows {
        println!("{:<40} {:>12.1} {:>12.1} {:>14.0}", r.engine, r.prompt_tps, r.decode_tps, r.peak_mib);
    }
    println!("(peak RSS is the process's high-water mark so far: later rows include earlier ones)");
    println!();
    println!("A second prompt sharing all but its last eighth with the first (a prompt cache per request):");
    println!("{:<40} {:>8} {:>10} {:>10} {:>10} {:>10}", "engine", "tokens", "computed", "read", "cold s", "reused s");
    for r in reuse_rows {
        println!("{:<40} {:>8} {:>10} {:>10} {:>10.2} {:>10.2}", r.engine, r.tokens, r.computed, r.reused, r.cold_s, r.warm_s);
    }
    Ok(ExitCode::SUCCESS)
}

/// Seconds for the prompt pass, and for `decode` single-token steps after it.
fn measure(generator: &EmbeddedGenerator, prompt: &[u32], decode: usize) -> Result<(f64, f64)> {
    let mut cache = KvCache::default();
    let started = Instant::now();
    let mut logits = generator.logits(prompt, &mut cache, LogitsFor::Last)?;
    let prompt_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    for _ in 0..decode {
        let next = sampling_argmax(&logits);
        logits = generator.logits(&[next], &mut cache, LogitsFor::Last)?;
    }
    Ok((prompt_s, started.elapsed().as_secs_f64()))
}

/// The prompt with its last eighth changed, run cold and then after the original prompt went
/// through a prompt cache.
fn measure_reuse(generator: &EmbeddedGenerator, prompt: &[u32], engine: &str) -> Result<Reuse> {
    let keep = prompt.len() - prompt.len() / 8;
    let mut second = prompt[..keep].to_vec();
    second.extend(prompt[keep..].iter().rev());
    let started = Instant::now();
    generator.logits(&second, &mut KvCache::default(), LogitsFor::Last)?;
    let cold_s = started.elapsed().as_secs_f64();
    let cache = PromptCache::new(4 << 30);
    let request = evident::generate::GenerateRequest { max_tokens: 1, ..evident::generate::GenerateRequest::user("", 1) };
    generator.generate_ids(prompt, &request, Some(&cache), &mut |_| {})?;
    let before = cache.reuse();
    let started = Instant::now();
    generator.generate_ids(&second, &request, Some(&cache), &mut |_| {})?;
    let warm_s = started.elapsed().as_secs_f64();
    let after = cache.reuse();
    Ok(Reuse {
        engine: engine.to_string(),
        tokens: second.len(),
        computed: after.computed - before.computed,
        reused: after.reused - before.reused,
        cold_s,
        warm_s,
    })
}

/// The process's peak resident memory (VmHWM), in MiB.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok()).map_or(0.0, |kib| kib / 1024.0)
}
