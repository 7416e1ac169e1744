//! `evident bench maxsim`: page-token vectors scored per second by each MaxSim path.

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context as _, Result};
use evident_kernels::{AdapterChoice, GpuContext, MaxSimCpu, MaxSimKernel, PageVectors, QueryBatch, SegmentMaxForm, cpu_features};
use rand::{Rng, SeedableRng, rngs::StdRng};

/// Page lengths are drawn from this range (mean 128 tokens).
const PAGE_TOKENS: std::ops::Range<usize> = 64..193;

fn unit(rng: &mut StdRng, dim: usize) -> Vec<f32> {
    let v: Vec<f32> = (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / n).collect()
}

fn best_of(runs: usize, mut f: impl FnMut() -> Result<Vec<f32>>) -> Result<(f64, Vec<f32>)> {
    let mut best = f64::INFINITY;
    let mut out = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        out = f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok((best, out))
}

fn max_rel_diff(a: &[f32], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (f64::from(*x) - y).abs() / y.abs().max(1.0)).fold(0.0, f64::max)
}

/// Peak single-precision rate of this CPU, assuming two FMA units per core, at its highest
/// clock where the kernel says it (cpufreq), else at the clock /proc/cpuinfo reports (a boosting
/// CPU can then pass 100 %).
fn peak_gflops() -> (f64, String) {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
    let max_mhz = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .map(|khz| khz / 1000.0);
    let reported_mhz = || {
        std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| s.lines().find(|l| l.starts_with("cpu MHz")).and_then(|l| l.split(':').nth(1)).and_then(|v| v.trim().parse::<f64>().ok()))
    };
    let mhz = max_mhz.or_else(reported_mhz).unwrap_or(2000.0);
    let lanes = match cpu_features() {
        "avx512f" => 16.0,
        "avx2+fma" => 8.0,
        _ => 4.0,
    };
    let gf = cores * mhz / 1000.0 * 2.0 * lanes * 2.0;
    (gf, format!("{cores} cores x {mhz:.0} MHz x 2 FMA units x {lanes} f32 lanes (the path's vector width) x 2"))
}

/// Runs the benchmark and prints a table.
pub fn run(sizes: Vec<usize>, query_tokens: usize, dim: usize, python: &Path, no_gpu: bool) -> Result<ExitCode> {
    let gpu = if no_gpu { None } else { GpuContext::new(AdapterChoice::Any).ok() };
    // Each form of the kernel's first pass, side by side: the default and the candidate.
    let kernels = match &gpu {
        Some(ctx) => SegmentMaxForm::ALL.into_iter().map(|form| MaxSimKernel::with_form(ctx.clone(), ctx.shader_f16, form)).collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    let (peak, peak_how) = peak_gflops();
    println!("MaxSim, {dim} dims, {query_tokens} query tokens, pages of {}-{} tokens (f16 storage)", PAGE_TOKENS.start, PAGE_TOKENS.end - 1);
    println!(
        "CPU path: {} on {} threads; peak {peak:.0} GFLOP/s = {peak_how}",
        cpu_features(),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    if let Some(ctx) = &gpu {
        println!(
            "WGSL kernel on {} ({:?}, {:?}{}), in each form of its first pass (rows: a thread per token, the default; tiled: a tiled product); M vec/s per whole call (queries up, scores back), GPU GB/s of page vectors {}",
            ctx.info.name,
            ctx.info.backend,
            ctx.info.device_type,
            if ctx.is_software() { ", a software rasteriser: a correctness path, not a speed path" } else { "" },
            if ctx.timestamps { "over the passes' own GPU time (timestamps)" } else { "over the whole call (no GPU timestamps here)" }
        );
    }
    // A real GPU's streaming bound, measured now on the same device: copies of 1 GiB.
    let copy_gbs = match &gpu {
        Some(ctx) if !ctx.is_software() => {
            let bps = ctx.copy_bandwidth(1 << 30, 5)?;
            println!("Device-to-device copy on the same GPU: {:.0} GB/s (bytes read plus written), the bound for %copy", bps / 1e9);
            Some(bps / 1e9)
        }
        _ => None,
    };
    let mut header = format!("\n{:>7} {:>10}  {:>14} {:>7}", "pages", "vectors", "CPU M vec/s", "%peak");
    for k in &kernels {
        let name = k.form().name();
        header += &format!("  {:>14} {:>9} {:>6}", format!("{name} M vec/s"), "GPU GB/s", "%copy");
    }
    header += &format!("  {:>14} {:>14}  {:>9}", "np padded", "np flat", "CPU/flat");
    println!("{header}");
    let mut rng = StdRng::seed_from_u64(42);
    for &n in &sizes {
        let mut pages = PageVectors::new(dim);
        for _ in 0..n {
            let len = rng.random_range(PAGE_TOKENS);
            let v: Vec<f32> = (0..len).flat_map(|_| unit(&mut rng, dim)).collect();
            pages.push_page(&v);
        }
        let mut queries = QueryBatch::new(dim);
        let q: Vec<f32> = (0..query_tokens).flat_map(|_| unit(&mut rng, dim)).collect();
        queries.push_query(&q);
        let tokens = pages.token_count() as f64;
        let runs = if n >= 10_000 { 3 } else { 5 };

        let cpu = MaxSimCpu::default();
        let (cpu_s, cpu_scores) = best_of(runs, || Ok(cpu.score(&pages, &queries)))?;
        let gflops = tokens * query_tokens as f64 * dim as f64 * 2.0 / cpu_s / 1e9;

        let mut gpu_rates = Vec::new();
        for k in &kernels {
            let resident = k.upload(&pages)?;
            // A real GPU's call takes milliseconds: more runs cost nothing and steady the best.
            let r = if k.context().is_software() { 1 } else { 4 * runs };
            let (mut wall, mut kernel_s) = (f64::INFINITY, f64::INFINITY);
            for _ in 0..r {
                let started = Instant::now();
                let (scores, on_gpu) = k.score_timed(&resident, &queries)?;
                let elapsed = started.elapsed().as_secs_f64();
                let diff = scores.iter().zip(&cpu_scores).map(|(a, b)| (a - b).abs() / b.abs().max(1.0)).fold(0.0f32, f32::max);
                anyhow::ensure!(diff < 1e-3, "the WGSL kernel ({} form) and the CPU path disagree by {diff}", k.form().name());
                wall = wall.min(elapsed);
                // Without timestamps the call's own time stands for the kernels'.
                kernel_s = kernel_s.min(on_gpu.unwrap_or(elapsed));
            }
            gpu_rates.push((wall, resident.vector_bytes() as f64 / kernel_s / 1e9));
        }

        let numpy = numpy_reference(python, &pages, &queries)?;
        let flat_diff = max_rel_diff(&cpu_scores, &numpy.1);
        anyhow::ensure!(flat_diff < 1e-3, "numpy and the CPU path disagree by {flat_diff}");
        let rate = |s: f64| tokens / s / 1e6;
        let mut row = format!("{n:>7} {:>10}  {:>14.2} {:>6.1}%", tokens as u64, rate(cpu_s), gflops / peak * 100.0);
        for &(wall, gbs) in &gpu_rates {
            // The copy's traffic, reads and writes together, is what the memory sustains.
            let copy = copy_gbs.map(|c| format!("{:.1}%", gbs / c * 100.0)).unwrap_or_else(|| "-".into());
            row += &format!("  {:>14.2} {:>9.0} {:>6}", rate(wall), gbs, copy);
        }
        row += &format!("  {:>14.2} {:>14.2}  {:>8.2}x", rate(numpy.0.0), rate(numpy.0.1), numpy.0.1 / cpu_s);
        println!("{row}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs benches/maxsim_numpy.py on the same inputs: ((padded s, flat s), flat scores).
fn numpy_reference(python: &Path, pages: &PageVectors, queries: &QueryBatch) -> Result<((f64, f64), Vec<f64>)> {
    let dir = tempfile::tempdir()?;
    let flat: Vec<f32> = pages.data().iter().map(|v| v.to_f32()).collect();
    std::fs::write(dir.path().join("pages.f32"), bytemuck::cast_slice(&flat))?;
    std::fs::write(dir.path().join("offsets.u32"), bytemuck::cast_slice(pages.offsets()))?;
    std::fs::write(dir.path().join("queries.f32"), bytemuck::cast_slice(queries.data()))?;
    std::fs::write(dir.path().join("dim.txt"), pages.dim().to_string())?;
    let out = Command::new(python)
        .arg(super::reference_script("maxsim_numpy.py")?)
        .arg(dir.path())
        .output()
        .with_context(|| format!("cannot run {} (run the set-up to make it)", python.display()))?;
    anyhow::ensure!(out.status.success(), "the numpy reference failed: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let secs = |k: &str| v[k]["seconds"].as_f64().unwrap_or(f64::NAN);
    let scores = v["flat"]["scores"].as_array().map(|a| a.iter().filter_map(|x| x.as_f64()).collect()).unwrap_or_default();
    Ok(((secs("padded"), secs("flat")), scores))
}
