//! `evident bench`: speed measurements printed as tables.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use burn::prelude::Device;
use clap::{Args, Subcommand};
use evident::config::CpuPrecision;
use evident::ingest::collect_pdfs;
use evident::models::{TextEncoder, burn_attention, wgsl_attention};

use super::Context;

/// Benchmarks.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// PDF extraction throughput (text + boxes, then with page images), nothing stored.
    Ingest(BenchIngestArgs),
    /// MaxSim throughput: the native CPU path, the WGSL kernel (both forms) and numpy, on the same inputs.
    Maxsim(BenchMaxsimArgs),
    /// Encoder throughput (tokens/s) beside sentence-transformers on the same texts.
    Encoder(BenchEncoderArgs),
    /// Generator prompt and decode tokens/s on each backend, beside llama.cpp.
    Generate(BenchGenerateArgs),
    /// One question's MaxSim search over a store's pages, first and warm (as a server runs it).
    Search(super::bench_search::BenchSearchArgs),
    /// Stage-call overhead of the plugin sandbox, its share of a question, and swap latency.
    Stages(BenchStagesArgs),
    /// OCR's character and word error rates and pages/s on born-digital pages, beside Tesseract.
    Ocr(super::bench_ocr::BenchOcrArgs),
    /// Load on a running `evident serve`: queries/s, p50/p99 latency, 429s and memory at 1, 4, 32 clients.
    Http(super::bench_http::BenchHttpArgs),
}

/// Arguments of `evident bench stages`.
#[derive(Args)]
pub struct BenchStagesArgs {
    /// Stage calls to time.
    #[arg(long, default_value_t = 200)]
    calls: usize,
    /// Profile for the end-to-end question.
    #[arg(long, default_value = "baseline")]
    profile: String,
    /// The question.
    #[arg(long, default_value = "What share of seniors go online?")]
    question: String,
}

/// Arguments of `evident bench generate`.
#[derive(Args)]
pub struct BenchGenerateArgs {
    /// Backends to measure: cpu (native decoder, the prompt pass's products on the fastest path
    /// this CPU has), cpu-f32, cpu-int8 (AVX2 integer rows), cpu-bf16 (AVX-512 BF16), cpu-amx
    /// (AMX tiles) to pin that path (decoding steps keep the fastest), burn-cpu (burn's prompt
    /// pass), wgpu.
    #[arg(long, value_delimiter = ',', default_value = "cpu,burn-cpu,wgpu")]
    backends: Vec<String>,
    /// Prompt length in tokens.
    #[arg(long, default_value_t = 512)]
    prompt_tokens: usize,
    /// Tokens decoded after the prompt.
    #[arg(long, default_value_t = 64)]
    decode_tokens: usize,
    /// Python with llama-cpp-python for the reference (scripts/bench-generate.sh makes one).
    #[arg(long)]
    python: Option<PathBuf>,
}

/// Arguments of `evident bench encoder`.
#[derive(Args)]
pub struct BenchEncoderArgs {
    /// PDF whose page texts are encoded (the README's figures use the dev benchmark's
    /// financebench/3M_2022_10K.pdf).
    #[arg(long, value_name = "FILE")]
    pdf: PathBuf,
    /// Pages to encode (from the first).
    #[arg(long, default_value_t = 48)]
    pages: u32,
    /// Encoders to measure: cpu (the native CPU network), cpu-int8 (the same with 8-bit integer
    /// products; skipped on a CPU without AVX-512 VNNI), burn-cpu (burn's on its CPU backend),
    /// wgpu (burn's on wgpu with the WGSL attention).
    #[arg(long, value_delimiter = ',', default_value = "cpu,cpu-int8,burn-cpu,wgpu")]
    backends: Vec<String>,
    /// Python with sentence-transformers for the reference (scripts/bench-encoder.sh makes one);
    /// without it, only Evident is measured.
    #[arg(long)]
    python: Option<PathBuf>,
}

/// Arguments of `evident bench maxsim`.
#[derive(Args)]
pub struct BenchMaxsimArgs {
    /// Page counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    pages: Vec<usize>,
    /// Query tokens (one query).
    #[arg(long, default_value_t = 20)]
    query_tokens: usize,
    /// Vector dimension.
    #[arg(long, default_value_t = 384)]
    dim: usize,
    /// Python with numpy for the reference (default: the one set-up makes, .evident/venv in
    /// the appliance's home).
    #[arg(long)]
    python: Option<PathBuf>,
    /// Skip the WGSL kernel.
    #[arg(long)]
    no_gpu: bool,
}

/// Arguments of `evident bench ingest`.
#[derive(Args)]
pub struct BenchIngestArgs {
    /// PDF files or folders.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs a benchmark.
pub fn run(ctx: &Context, cmd: BenchCommand) -> Result<ExitCode> {
    match cmd {
        BenchCommand::Ingest(args) => bench_ingest(ctx, args),
        BenchCommand::Encoder(args) => bench_encoder(ctx, args),
        BenchCommand::Generate(args) => super::bench_generate::run(ctx, &args.backends, args.prompt_tokens, args.decode_tokens, args.python.as_deref()),
        BenchCommand::Stages(args) => super::bench_stages::run(ctx, args.calls, &args.profile, &args.question),
        BenchCommand::Http(args) => super::bench_http::run(ctx, args),
        BenchCommand::Ocr(args) => super::bench_ocr::run(ctx, args),
        BenchCommand::Search(args) => super::bench_search::run(ctx, args),
        BenchCommand::Maxsim(args) => super::bench_maxsim::run(
            args.pages,
            args.query_tokens,
            args.dim,
            &args.python.unwrap_or_else(|| evident::config::appliance_home().join(".evident/venv/bin/python")),
            args.no_gpu,
        ),
    }
}

fn bench_ingest(ctx: &Context, args: BenchIngestArgs) -> Result<ExitCode> {
    let files = collect_pdfs(&args.paths)?;
    let reader = ctx.pdf_reader()?;
    let docs: Vec<(PathBuf, Vec<u8>)> =
        files.into_iter().map(|p| std::fs::read(&p).map(|b| (p.clone(), b)).with_context(|| format!("cannot read {}", p.display()))).collect::<Result<_>>()?;
    let mut rows = Vec::new();
    for (label, image_px) in [("text + boxes", None), ("text + boxes + images", Some(ctx.config.ingest.page_image_max_px))] {
        let started = Instant::now();
        let mut pages = 0u64;
        for (path, bytes) in &docs {
            let pdf = reader.open(bytes, None).with_context(|| path.display().to_string())?;
            for n in 1..=pdf.page_count() {
                let read = pdf.read_page(n, image_px).with_context(|| path.display().to_string())?;
                std::hint::black_box(read);
                pages += 1;
            }
        }
        let secs = started.elapsed().as_secs_f64();
        rows.push((label, pages, secs));
    }
    if args.json {
        let out: Vec<_> = rows.iter().map(|(l, p, s)| serde_json::json!({ "mode": l, "pages": p, "seconds": s, "pages_per_s": *p as f64 / s })).collect();
        println!("{}", serde_json::to_string(&out)?);
    } else {
        println!("{:<24} {:>7} {:>9} {:>9}", "evident", "pages", "seconds", "pages/s");
        for (l, p, s) in rows {
            println!("{l:<24} {p:>7} {s:>9.2} {:>9.1}", p as f64 / s);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn bench_encoder(ctx: &Context, args: BenchEncoderArgs) -> Result<ExitCode> {
    let reader = ctx.pdf_reader()?;
    let bytes = std::fs::read(&args.pdf).with_context(|| format!("cannot read {}", args.pdf.display()))?;
    let pdf = reader.open(&bytes, None)?;
    let texts: Vec<String> = (1..=pdf.page_count().min(args.pages)).map(|n| pdf.read_page(n, None).map(|r| r.page.text())).collect::<Result<_, _>>()?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut rows = Vec::new();
    let dir = ctx.config.models_dir.join("all-minilm-l6-v2");
    for backend in &args.backends {
        let (label, encoder) = match backend.as_str() {
            "cpu" => ("evident, native CPU", TextEncoder::load(&dir, &Device::flex())?),
            "cpu-int8" => {
                let encoder = TextEncoder::load_native(&dir, CpuPrecision::Int8)?;
                if encoder.precision() != CpuPrecision::Int8 {
                    eprintln!("cpu-int8 skipped: this CPU has no AVX-512 VNNI");
                    continue;
                }
                ("evident, native CPU, int8 products", encoder)
            }
            "burn-cpu" => ("evident, burn flex CPU", TextEncoder::load_with_attention(&dir, &Device::flex(), Box::new(burn_attention))?),
            "wgpu" => {
                let device = Device::wgpu(burn::prelude::DeviceKind::DefaultDevice);
                ("evident, burn wgpu, WGSL attention", TextEncoder::load_with_attention(&dir, &device, Box::new(wgsl_attention))?)
            }
            other => bail!("unknown encoder {other}; use cpu, cpu-int8, burn-cpu or wgpu"),
        };
        encoder.embed(&refs[..refs.len().min(4)])?; // warm-up: shader compilation, autotune
        // Best of two, as the sentence-transformers reference is timed.
        let mut best = f64::INFINITY;
        for _ in 0..2 {
            let started = Instant::now();
            encoder.embed(&refs)?;
            best = best.min(started.elapsed().as_secs_f64());
        }
        rows.push((label.to_string(), encoder.count_tokens(&refs)?, best));
    }
    if let Some(python) = &args.python {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("texts.json");
        std::fs::write(&file, serde_json::to_string(&texts)?)?;
        let out = std::process::Command::new(python)
            .arg(super::reference_script("encoder_st.py")?)
            .arg(&file)
            .output()
            .with_context(|| format!("cannot run {}", python.display()))?;
        anyhow::ensure!(out.status.success(), "sentence-transformers failed: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let device = v["device"].as_str().unwrap_or("cpu");
        let on = if device.starts_with("cuda") { format!("torch {device}") } else { format!("torch CPU, {} threads", v["threads"]) };
        rows.push((format!("sentence-transformers ({on})"), v["tokens"].as_u64().unwrap_or(0) as usize, v["seconds"].as_f64().unwrap_or(f64::NAN)));
    }
    println!("{} pages of {} (texts truncated at 256 tokens, as sentence-transformers does)", texts.len(), args.pdf.display());
    println!("{:<48} {:>8} {:>9} {:>9}", "encoder", "tokens", "seconds", "tokens/s");
    for (name, tokens, secs) in rows {
        println!("{name:<48} {tokens:>8} {secs:>9.2} {:>9.0}", tokens as f64 / secs);
    }
    Ok(ExitCode::SUCCESS)
}
