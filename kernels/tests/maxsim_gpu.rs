//! The WGSL MaxSim kernel against the plain reference, on a real wgpu device (Mesa's lavapipe
//! where the machine has no GPU), on random inputs of odd sizes, in each form of its first pass.

use std::sync::{Arc, OnceLock};

use evident_kernels::testing::{Noise, assert_all_close};
use evident_kernels::{AdapterChoice, GpuContext, MaxSimCpu, MaxSimKernel, PageVectors, QueryBatch, SegmentMaxForm, maxsim_reference};

fn gpu() -> Arc<GpuContext> {
    static GPU: OnceLock<Arc<GpuContext>> = OnceLock::new();
    GPU.get_or_init(|| GpuContext::new(AdapterChoice::Any).expect("a wgpu adapter (set-up installs Mesa's lavapipe)")).clone()
}

/// The kernel in each form, with the device's default page storage.
fn each_form() -> impl Iterator<Item = MaxSimKernel> {
    SegmentMaxForm::ALL.into_iter().map(|form| MaxSimKernel::with_form(gpu(), gpu().shader_f16, form).expect("kernel compiles"))
}

fn build(rng: &mut Noise, dim: usize, page_tokens: &[usize], query_tokens: &[usize]) -> (PageVectors, QueryBatch) {
    let mut pages = PageVectors::new(dim);
    for &n in page_tokens {
        pages.push_page(&rng.uniform(n * dim));
    }
    let mut queries = QueryBatch::new(dim);
    for &n in query_tokens {
        queries.push_query(&rng.uniform(n * dim));
    }
    (pages, queries)
}

fn check(what: &str, kernel: &MaxSimKernel, pages: &PageVectors, queries: &QueryBatch) {
    let what = format!("{what}, {} form", kernel.form().name());
    let want = maxsim_reference(pages, queries);
    let resident = kernel.upload(pages).expect("upload");
    // Twice on the same resident pages: the second call must not depend on the first.
    for round in 0..2 {
        let got = kernel.score(&resident, queries).expect("scores");
        assert_all_close(&format!("{what} (GPU, call {round})"), &got, &want, 1e-3, 1e-3);
    }
    assert_all_close(&format!("{what} (CPU)"), &MaxSimCpu::new(2).score(pages, queries), &want, 1e-3, 1e-3);
}

#[test]
fn one_query_token_and_one_token_pages() {
    let mut rng = Noise::new(1);
    let (pages, queries) = build(&mut rng, 384, &[1, 1, 1, 2, 1, 3], &[1]);
    for kernel in each_form() {
        check("1 query token, 1-token pages", &kernel, &pages, &queries);
    }
}

#[test]
fn long_pages_odd_dimensions_and_empty_pages() {
    let mut rng = Noise::new(2);
    let (pages, queries) = build(&mut rng, 37, &[1013, 0, 1, 2049, 7], &[5, 1, 19]);
    let (pages2, queries2) = build(&mut rng, 384, &[1200, 31, 0, 999], &[20, 9, 13, 7, 3]);
    for kernel in each_form() {
        check("dim 37, 1,000+-token pages, an empty page", &kernel, &pages, &queries);
        check("dim 384, a question and four sub-questions", &kernel, &pages2, &queries2);
    }
}

#[test]
fn ten_thousand_pages_in_several_device_buffers() {
    let mut rng = Noise::new(3);
    let sizes: Vec<usize> = (0..10_000).map(|_| 1 + rng.below(8)).collect();
    let (pages, queries) = build(&mut rng, 64, &sizes, &[11, 3]);
    for kernel in each_form() {
        check("10,000 pages, one buffer", &kernel, &pages, &queries);
    }
    for small in each_form().map(|k| k.with_max_chunk_bytes(1 << 20)) {
        assert!(small.upload(&pages).expect("upload").chunk_count() > 2);
        check("10,000 pages, 1 MiB buffers", &small, &pages, &queries);
    }
}

#[test]
fn more_query_tokens_than_one_dispatch_takes() {
    let mut rng = Noise::new(4);
    // 9 queries, 333 tokens in all: the batch is split across dispatches.
    let (pages, queries) = build(&mut rng, 48, &[3, 17, 250, 1], &[40, 40, 40, 40, 40, 40, 40, 40, 13]);
    let (_, too_long) = build(&mut rng, 48, &[], &[257]);
    for kernel in each_form() {
        check("333 query tokens", &kernel, &pages, &queries);
        let resident = kernel.upload(&pages).expect("upload");
        let err = kernel.score(&resident, &too_long).expect_err("a 257-token query is refused").to_string();
        assert!(err.contains("at most 256"), "{err}");
    }
}

/// One page of 30,000 tokens per probe, all zero but one token that matches the query: the
/// kernel must find it wherever it sits (no invocation may stop early on a long page).
#[test]
fn the_best_token_is_found_anywhere_in_a_very_long_page() {
    let dim = 8;
    let n = 30_000;
    let probes: Vec<usize> = (0..n).step_by(1499).chain([n - 1]).collect();
    let mut pages = PageVectors::new(dim);
    for &p in &probes {
        let mut v = vec![0.0f32; n * dim];
        v[p * dim + 3] = 1.0;
        pages.push_page(&v);
    }
    let mut queries = QueryBatch::new(dim);
    let mut q = vec![0.0f32; dim];
    q[3] = 1.0;
    queries.push_query(&q);
    for f16 in [false, true].into_iter().filter(|&f| !f || gpu().shader_f16) {
        for form in SegmentMaxForm::ALL {
            let kernel = MaxSimKernel::with_form(gpu(), f16, form).expect("kernel compiles");
            let scores = kernel.score(&kernel.upload(&pages).expect("upload"), &queries).expect("scores");
            let missed: Vec<usize> = probes.iter().zip(&scores).filter(|(_, s)| **s != 1.0).map(|(p, _)| *p).collect();
            assert!(missed.is_empty(), "f16={f16}, {form:?}: the matching token was missed at positions {missed:?}");
        }
    }
}

#[test]
fn f32_storage_matches_too() {
    let mut rng = Noise::new(5);
    let (pages, queries) = build(&mut rng, 384, &[700, 1, 0, 33], &[20, 4]);
    for form in SegmentMaxForm::ALL {
        let kernel = MaxSimKernel::with_form(gpu(), false, form).expect("kernel compiles");
        check("f32 storage", &kernel, &pages, &queries);
    }
}

#[test]
fn timed_scores_equal_the_untimed_ones_over_several_buffers_and_query_groups() {
    let mut rng = Noise::new(4);
    let sizes: Vec<usize> = (0..300).map(|_| rng.below(40)).collect();
    // 13 queries of 23 tokens: two query groups of at most 256 tokens, over several buffers,
    // so the timestamps span passes that begin and end in different places.
    let (pages, queries) = build(&mut rng, 45, &sizes, &[23; 13]);
    let kernel = MaxSimKernel::new(gpu()).expect("kernel compiles").with_max_chunk_bytes(64 * 1024);
    let resident = kernel.upload(&pages).expect("upload");
    assert!(resident.chunk_count() > 1, "the pages span several device buffers");
    let untimed = kernel.score(&resident, &queries).expect("untimed scores");
    assert_all_close("untimed scores", &untimed, &maxsim_reference(&pages, &queries), 1e-3, 1e-3);
    let (timed, seconds) = kernel.score_timed(&resident, &queries).expect("timed scores");
    assert_all_close("timed scores", &timed, &maxsim_reference(&pages, &queries), 1e-3, 1e-3);
    match seconds {
        Some(s) => assert!(s > 0.0 && s < 60.0, "the passes' GPU time, {s} s, is a real duration"),
        None => assert!(!gpu().timestamps, "a device with timestamps reports a time"),
    }
    let (_, none) = kernel.score_timed(&resident, &QueryBatch::new(45)).expect("no queries");
    assert_eq!(none, None, "no queries, no passes, no time");
}
