//! `evident bench`: speed measurements printed as tables.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand};
use evident::ingest::collect_pdfs;

use super::Context;

/// Benchmarks.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// PDF extraction throughput (text + boxes, then with page images), nothing stored.
    Ingest(BenchIngestArgs),
    /// MaxSim throughput: the native CPU path, the WGSL kernel and numpy, on the same inputs.
    Maxsim(BenchMaxsimArgs),
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
    /// Python with numpy for the reference (set-up makes .evident/venv).
    #[arg(long, default_value = ".evident/venv/bin/python")]
    python: PathBuf,
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
        BenchCommand::Maxsim(args) => super::bench_maxsim::run(args.pages, args.query_tokens, args.dim, &args.python, args.no_gpu),
    }
}

fn bench_ingest(ctx: &Context, args: BenchIngestArgs) -> Result<ExitCode> {
    let files = collect_pdfs(&args.paths)?;
    let reader = ctx.pdf_reader()?;
    let docs: Vec<(PathBuf, Vec<u8>)> = files
        .into_iter()
        .map(|p| std::fs::read(&p).map(|b| (p.clone(), b)).with_context(|| format!("cannot read {}", p.display())))
        .collect::<Result<_>>()?;
    let mut rows = Vec::new();
    for (label, image_px) in [("text + boxes", None), ("text + boxes + images", Some(ctx.config.ingest.page_image_max_px))] {
        let started = Instant::now();
        let mut pages = 0u64;
        for (path, bytes) in &docs {
            let pdf = reader.open(bytes, None).with_context(|| path.display().to_string())?;
            for n in 1..=pdf.page_count() {
                let (page, image) = pdf.read_page(n, image_px).with_context(|| path.display().to_string())?;
                std::hint::black_box((page, image));
                pages += 1;
            }
        }
        let secs = started.elapsed().as_secs_f64();
        rows.push((label, pages, secs));
    }
    if args.json {
        let out: Vec<_> = rows
            .iter()
            .map(|(l, p, s)| serde_json::json!({ "mode": l, "pages": p, "seconds": s, "pages_per_s": *p as f64 / s }))
            .collect();
        println!("{}", serde_json::to_string(&out)?);
    } else {
        println!("{:<24} {:>7} {:>9} {:>9}", "evident", "pages", "seconds", "pages/s");
        for (l, p, s) in rows {
            println!("{l:<24} {p:>7} {s:>9.2} {:>9.1}", p as f64 / s);
        }
    }
    Ok(ExitCode::SUCCESS)
}
