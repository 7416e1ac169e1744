//! `evident bench search --synthetic-pages N`: MaxSim search over a corpus larger than any
//! store at hand. Pages are random unit vectors whose token counts are drawn from the store's
//! own pages (what indexing would keep of each), so the figures carry the benchmark's mix of
//! slides, papers and filings; the questions are real ones, encoded by the embedded encoder.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Result, bail};
use evident_kernels::{Codebook, MaxSimCpu, PageCodes, PageVectors, QueryBatch, cpu_features, top_k, two_stage_top_k};
use half::f16;
use rayon::prelude::*;

use super::Context;
use super::percentile;

/// Pages generated per task, each task with its own seeded source.
const CHUNK: usize = 1024;

/// What the synthetic benchmark is asked.
pub struct ScaleArgs {
    /// The largest corpus; it is also measured at every power of ten from 1,000 below it.
    pub pages: usize,
    /// Token vectors of a page pooled into one per this many.
    pub pool_factor: u32,
    pub runs: usize,
    pub k: usize,
    /// Pages a question scores exactly after the centroid candidate stage (0: no such stage).
    pub candidates: usize,
    /// Centroids of the candidate stage's codebook.
    pub centroids: usize,
    pub questions: &'static [&'static str],
}

/// Runs the benchmark and prints a table.
pub fn run(ctx: &Context, args: ScaleArgs) -> Result<ExitCode> {
    let store = ctx.store()?;
    let encoder = ctx.encoder()?;
    let dim = encoder.dim();
    let started = Instant::now();
    let mut counts = Vec::new();
    for doc in store.documents()? {
        for n in 1..=doc.page_count {
            counts.push(encoder.vector_count(&store.page(&doc, n)?.text())?);
        }
    }
    if counts.is_empty() {
        bail!("the store has no pages to take token counts from; ingest the benchmark's PDFs first (`evident ingest --no-index ../shared/bench/docs`)");
    }
    let factor = args.pool_factor.max(1) as usize;
    let lengths: Vec<usize> = {
        let mut state = 0x5eed_u64;
        (0..args.pages).map(|_| counts[(splitmix(&mut state) % counts.len() as u64) as usize].div_ceil(factor)).collect()
    };
    let mean = counts.iter().sum::<usize>() as f64 / counts.len() as f64;
    println!(
        "token counts from the store's {} pages ({:.1} s): mean {mean:.0}, p50 {}, p90 {}, max {}; pooled by {factor}: mean {:.0} vectors a page",
        counts.len(),
        started.elapsed().as_secs_f64(),
        nearest_rank(&counts, 0.5),
        nearest_rank(&counts, 0.9),
        counts.iter().max().unwrap_or(&0),
        lengths.iter().sum::<usize>() as f64 / lengths.len().max(1) as f64,
    );
    let mut sizes: Vec<usize> = std::iter::successors(Some(1000usize), |s| s.checked_mul(10)).take_while(|&s| s < args.pages).collect();
    sizes.push(args.pages);
    let tokens_for = |pages: usize| lengths[..pages].iter().sum::<usize>();
    let available = available_bytes();
    let fits = |pages: usize| (tokens_for(pages) * dim * 2) as f64 <= available as f64 * 0.8;
    let largest = sizes.iter().copied().filter(|&s| fits(s)).max();

    let mut batches = Vec::new();
    for question in args.questions {
        let mut batch = QueryBatch::new(dim);
        for tv in encoder.token_vectors(&[*question])? {
            batch.push_query(&tv.vectors);
        }
        batches.push(batch);
    }
    let cpu = MaxSimCpu::default();
    println!(
        "MaxSim on the CPU ({}, {} threads), {dim} dims, f16; {} questions of {}-{} tokens; top {} of every page; {} warm searches a size\n",
        cpu_features(),
        rayon::current_num_threads(),
        batches.len(),
        batches.iter().map(QueryBatch::token_count).min().unwrap_or(0),
        batches.iter().map(QueryBatch::token_count).max().unwrap_or(0),
        args.k,
        args.runs
    );
    if args.candidates > 0 {
        println!(
            "candidate stage: {} centroids (spherical k-means, 4 rounds, over up to {} tokens spread over the corpus), then exact MaxSim on the {} best pages a question",
            args.centroids,
            SAMPLE_PER_CENTROID * args.centroids,
            args.candidates
        );
    }
    println!(
        "{:>8} {:>12} {:>11} {:>9} {:>9} {:>9} {:>10} {:>10} {:>12} {:>10} {:>10}",
        "pages", "vectors", "index MiB", "RSS MiB", "p50 ms", "p99 ms", "M vec/s", "codes MiB", "assign s/1k", "2-st p50", "2-st p99"
    );
    let Some(largest) = largest else {
        bail!("not even 1,000 pages of vectors fit in the memory available; use --pool-factor");
    };
    let mut pages = PageVectors::with_capacity(dim, largest, tokens_for(largest));
    for &size in &sizes {
        if size > largest {
            println!(
                "{size:>8} {:>12}  needs {:.1} GiB of vectors, more than 80 % of the {:.1} GiB this box has available; try --pool-factor",
                tokens_for(size),
                (tokens_for(size) * dim * 2) as f64 / f64::from(1 << 30),
                available as f64 / f64::from(1 << 30)
            );
            continue;
        }
        let from = pages.page_count();
        fill(&mut pages, &lengths[from..size], dim);
        let mut times = Vec::with_capacity(args.runs);
        for r in 0..=args.runs {
            let batch = &batches[r % batches.len()];
            let started = Instant::now();
            let scores = cpu.score(&pages, batch);
            let hits = top_k(&scores, args.k);
            // The first search warms the caches and is not counted.
            if r > 0 {
                times.push(started.elapsed().as_secs_f64() * 1e3);
            }
            if hits.len() != args.k.min(size) {
                bail!("a search returned {} hits instead of {}", hits.len(), args.k.min(size));
            }
        }
        let p50 = percentile(&times, 0.5);
        let staged = if args.candidates > 0 { Some(two_stage(&cpu, &pages, &batches, &args)?) } else { None };
        let mib = |bytes: usize| bytes as f64 / f64::from(1 << 20);
        println!(
            "{size:>8} {:>12} {:>11.0} {:>9.0} {p50:>9.1} {:>9.1} {:>10.2} {}",
            pages.token_count(),
            mib(pages.data().len() * 2 + pages.offsets().len() * 4),
            resident_mib(),
            percentile(&times, 0.99),
            pages.token_count() as f64 / p50 / 1e3,
            match staged {
                Some(s) => format!("{:>10.1} {:>12.2} {:>10.1} {:>10.1}", mib(s.code_bytes), s.assign_s * 1000.0 / size as f64, s.p50, s.p99),
                None => format!("{:>10} {:>12} {:>10} {:>10}", "-", "-", "-", "-"),
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Tokens of the k-means sample per centroid.
const SAMPLE_PER_CENTROID: usize = 64;

/// What the candidate stage cost and how fast it searched.
struct TwoStage {
    code_bytes: usize,
    assign_s: f64,
    p50: f64,
    p99: f64,
}

/// Trains a codebook on a sample of `pages`, codes every token, and times searches through the
/// candidate stage.
fn two_stage(cpu: &MaxSimCpu, pages: &PageVectors, batches: &[QueryBatch], args: &ScaleArgs) -> Result<TwoStage> {
    let dim = pages.dim();
    let tokens = pages.token_count();
    let want = (SAMPLE_PER_CENTROID * args.centroids).min(tokens);
    let sample: Vec<f32> = (0..want).flat_map(|i| pages.data()[i * tokens / want * dim..(i * tokens / want + 1) * dim].iter().map(|v| v.to_f32())).collect();
    let book = Codebook::train(&sample, dim, args.centroids, 4);
    let started = Instant::now();
    let codes = PageCodes::new(&book, pages);
    let assign_s = started.elapsed().as_secs_f64();
    let mut times = Vec::with_capacity(args.runs);
    for r in 0..=args.runs {
        let started = Instant::now();
        let hits = two_stage_top_k(cpu, &book, &codes, pages, &batches[r % batches.len()], args.candidates, args.k);
        if r > 0 {
            times.push(started.elapsed().as_secs_f64() * 1e3);
        }
        if hits[0].len() != args.k.min(pages.page_count()) {
            bail!("a two-stage search returned {} hits instead of {}", hits[0].len(), args.k);
        }
    }
    Ok(TwoStage { code_bytes: codes.bytes(), assign_s, p50: percentile(&times, 0.5), p99: percentile(&times, 0.99) })
}

/// Appends pages of random unit vectors with these token counts, generated in parallel a few
/// chunks at a time (so that at most those are held twice).
fn fill(pages: &mut PageVectors, lengths: &[usize], dim: usize) {
    let threads = rayon::current_num_threads().max(1);
    for group in lengths.chunks(CHUNK * threads * 2) {
        let first = pages.page_count();
        let chunks = random_pages(group, first, dim);
        for page in chunks.iter().flatten() {
            pages.push_page_f16(page);
        }
    }
}

/// Pages of random unit vectors, one seeded source per chunk of [`CHUNK`] pages (seeded by the
/// number of the corpus's page it starts at).
fn random_pages(lengths: &[usize], first: usize, dim: usize) -> Vec<Vec<Vec<f16>>> {
    lengths
        .par_chunks(CHUNK)
        .enumerate()
        .map(|(c, chunk)| {
            let mut state = 0x9e37_79b9_u64 ^ ((first + c * CHUNK) as u64).wrapping_mul(0x2545_f491_4f6c_dd1d);
            chunk
                .iter()
                .map(|&n| {
                    let mut page = Vec::with_capacity(n * dim);
                    let mut token = vec![0.0f32; dim];
                    for _ in 0..n {
                        token.iter_mut().for_each(|v| *v = (splitmix(&mut state) >> 40) as f32 / (1u64 << 23) as f32 - 1.0);
                        let norm = token.iter().map(|v| v * v).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
                        page.extend(token.iter().map(|v| f16::from_f32(v / norm)));
                    }
                    page
                })
                .collect()
        })
        .collect()
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn nearest_rank(values: &[usize], p: f64) -> usize {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// A field of /proc in kB, as bytes.
fn proc_kb(file: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
}

fn available_bytes() -> u64 {
    proc_kb("/proc/meminfo", "MemAvailable:").unwrap_or(8 << 30)
}

fn resident_mib() -> f64 {
    proc_kb("/proc/self/status", "VmRSS:").unwrap_or(0) as f64 / f64::from(1 << 20)
}
