//! The embedded decoders (Qwen2.5-Coder 1.5B and 0.5B, Q4_K_M; SmolLM2-135M, Q4_1) against
//! llama.cpp running the same GGUF files (a fixture made once by
//! tests/fixtures/make_llamacpp_reference.py): the tokenizer and chat template, and greedy
//! continuations of 10 varied prompts with every step's top logits, on the native CPU decoder
//! and on burn's network on wgpu.
//!
//! llama.cpp rounds each activation vector to 8 bits per block (its Q8 blocks) and Evident rounds
//! prompt-pass inputs to bfloat16 and decoding steps' to 8 bits per run of 32, so the two compute
//! the same network with different rounding. The checks say how far apart that may leave them:
//! each step's logits within the model's tolerance of llama.cpp's (its 20 most likely tokens),
//! the median step's largest difference within a tighter bound (rounding scatters a few steps
//! far, a fault in the network moves them all), and the same greedy tokens wherever llama.cpp's
//! best token clearly leads its second (a closer race is decided by rounding, in either engine); for the Qwen2.5 models the
//! free-running continuations must be identical token for token on at least 9 of the 10 prompts.
//! SmolLM2's continuations pass through near ties (the best two tokens 0.012 apart) where
//! llama.cpp's own rounding, up to 0.86 from exact, decides; for it only the teacher-forced
//! checks hold.

mod common;

use common::{floats, ids};

use std::path::PathBuf;

use evident::generate::{EmbeddedGenerator, GenerateRequest, Message, embedded_model_path, sampling_argmax};
use evident::models::{ChatTurn, ComputeDevice, KvCache, LogitsFor};
use serde_json::Value;

/// Largest difference allowed between a logit and llama.cpp's, per model. Logits span about 40.
/// Measured on this fixture's prompts against an exact f32 pass over the same weights: Qwen2.5's
/// llama.cpp logits are up to 0.35 away and Evident's up to 0.2; SmolLM2's, whose activations
/// have larger outliers, up to 0.86 (llama.cpp, against transformers' f32 in
/// generator_reference.json) and 0.58 (Evident). Each decoding step reads keys and values that
/// both engines rounded differently at every earlier step, so the steps scatter further: on an
/// Intel Xeon with AVX-512 VNNI, SmolLM2's largest difference per step (its 216 steps, top 20
/// tokens each) had a median of 0.39, a 90th percentile of 0.70 and a maximum of 1.31, then
/// 1.56 once the decoding-step attention summed its spans of tokens apart (the same median and
/// percentile: another draw of the rounding); Qwen2.5's, medians 0.16 and 0.19, maxima 0.43
/// and 0.48.
fn logit_tolerance(model: &str) -> f32 {
    if model.starts_with("smollm2") { 2.0 } else { 0.75 }
}

/// How far llama.cpp's best token must lead its second for Evident's greedy choice to have to
/// agree: twice the logit bound each model had before SmolLM2's was widened for scattered
/// steps (see [`logit_tolerance`]), which left this check where it was.
fn clear_choice_margin(model: &str) -> f32 {
    if model.starts_with("smollm2") { 3.0 } else { 1.5 }
}

/// Bound on the median over all steps of a step's largest difference (see [`logit_tolerance`]).
fn median_step_tolerance(model: &str) -> f32 {
    if model.starts_with("smollm2") { 0.6 } else { 0.3 }
}

/// Whether a model's free-running continuations must equal llama.cpp's (see the module's doc).
fn free_running_must_match(model: &str) -> bool {
    !model.starts_with("smollm2")
}

fn reference() -> Value {
    common::fixture("llamacpp_reference.json")
}

fn model_path(name: &str) -> PathBuf {
    embedded_model_path(&common::repo_root().join(".evident/models"), name).expect("an embedded model")
}

fn cpu() -> ComputeDevice {
    ComputeDevice { device: burn::prelude::Device::flex(), wgpu: false }
}

fn wgpu() -> ComputeDevice {
    ComputeDevice { device: burn::prelude::Device::wgpu(burn::prelude::DeviceKind::DefaultDevice), wgpu: true }
}

fn check_tokenizer_and_template(name: &str) {
    let fixture = &reference()[name];
    let generator = EmbeddedGenerator::load(&model_path(name), &cpu()).expect("model loads");
    for case in fixture["tokenizer"].as_array().expect("cases") {
        let text = case["text"].as_str().expect("text");
        assert_eq!(generator.tokenizer().encode(text).expect("encodes"), ids(&case["ids"]), "{name}: ids of {text:?}");
        assert_eq!(generator.tokenizer().decode(&ids(&case["ids"])).expect("decodes"), text, "{name}: decoding round-trips");
    }
    for case in fixture["greedy"].as_array().expect("cases").iter().filter(|c| c["kind"] == "chat") {
        let prompt = case["prompt"].as_str().expect("prompt");
        let rendered = generator.tokenizer().render(&[ChatTurn::new("user", prompt)], true).expect("renders");
        assert_eq!(rendered, case["prompt_text"].as_str().expect("text"), "{name}: the chat template renders as llama-cpp-python's Jinja does");
        assert_eq!(generator.prompt_ids(&[Message::text("user", prompt)]).expect("ids"), ids(&case["prompt_ids"]), "{name}: prompt ids");
    }
}

/// Every fixture step's logits (teacher-forced on llama.cpp's own tokens), and the free-running
/// greedy continuations; `cases` limits the prompts (the software GPU adapter is slow).
///
/// Greedy decoding is the prompt pass and then one step per token on the same cache, exactly
/// what the teacher-forced pass runs; so the free-running continuation equals llama.cpp's if and
/// only if the greedy choice (the sampler's argmax) is llama.cpp's token at every teacher-forced
/// step. The test counts that, and runs `generate_ids` itself on the first prompt only, checking
/// that it agrees with the count: the decoding runs once instead of twice.
fn check_greedy(generator: &EmbeddedGenerator, name: &str, backend: &str, cases: usize) {
    let fixture = &reference()[name];
    let tolerance = logit_tolerance(name);
    let mut identical = 0;
    let mut step_worst = Vec::new();
    let all = fixture["greedy"].as_array().expect("cases");
    for (n, case) in all.iter().take(cases).enumerate() {
        let prompt = ids(&case["prompt_ids"]);
        let continuation = ids(&case["continuation_ids"]);
        let steps = case["steps"].as_array().expect("steps");
        assert_eq!(steps.len(), continuation.len(), "{name}: one fixture step per continuation token");
        let mut greedy_agrees = true;
        // Teacher-forced: the prompt, then llama.cpp's tokens one at a time, as a decode runs.
        let mut cache = KvCache::default();
        let mut logits = generator.logits(&prompt, &mut cache, LogitsFor::Last).expect("prompt pass");
        for (i, step) in steps.iter().enumerate() {
            let (top, values) = (ids(&step["top_ids"]), floats(&step["top_values"]));
            let mut this_step = 0.0f32;
            for (&id, &want) in top.iter().zip(&values) {
                let diff = (logits[id as usize] - want).abs();
                this_step = this_step.max(diff);
                assert!(
                    diff < tolerance,
                    "{name} {backend}: step {i} of {:?}: logit of token {id} is {}, llama.cpp has {want}",
                    case["prompt"],
                    logits[id as usize]
                );
            }
            step_worst.push(this_step);
            let best = sampling_argmax(&logits);
            greedy_agrees &= best == continuation[i];
            if values[0] - values[1] > clear_choice_margin(name) {
                assert_eq!(best, top[0], "{name} {backend}: step {i} of {:?}: a clear greedy choice differs", case["prompt"]);
            }
            if i + 1 < steps.len() {
                logits = generator.logits(&[continuation[i]], &mut cache, LogitsFor::Last).expect("step");
            }
        }
        if n == 0 {
            let request = GenerateRequest::user("", continuation.len());
            let (got, _) = generator.generate_ids(&prompt, &request, None, &mut |_| {}).expect("generates");
            let want: Vec<u32> = continuation.iter().copied().filter(|t| !generator.tokenizer().eos.contains(t)).collect();
            assert_eq!(
                got == want,
                greedy_agrees,
                "{name} {backend}: free-running {got:?} against llama.cpp's {want:?}, teacher-forced greedy agreement {greedy_agrees}"
            );
        }
        if greedy_agrees {
            identical += 1;
        } else {
            println!("{name} {backend}: {:?} continues differently after a near tie", case["prompt"]);
        }
    }
    let n = cases.min(all.len());
    step_worst.sort_by(f32::total_cmp);
    let (median, worst) = (step_worst[step_worst.len() / 2], step_worst[step_worst.len() - 1]);
    println!("{name} {backend}: {identical}/{n} greedy continuations identical to llama.cpp's; largest logit difference {worst:.3}, median step's {median:.3}");
    assert!(median < median_step_tolerance(name), "{name} {backend}: the median step's largest logit difference is {median}");
    if free_running_must_match(name) {
        assert!(identical + n / 10 >= n, "{name} {backend}: only {identical} of {n} greedy continuations equal llama.cpp's");
    }
}

#[test]
fn qwen_1_5b_tokenizer_and_chat_template_match_llama_cpp() {
    check_tokenizer_and_template("qwen2.5-1.5b");
}

#[test]
fn qwen_0_5b_tokenizer_and_chat_template_match_llama_cpp() {
    check_tokenizer_and_template("qwen2.5-0.5b");
}

#[test]
fn qwen_1_5b_on_the_cpu_decodes_as_llama_cpp_does() {
    let generator = EmbeddedGenerator::load(&model_path("qwen2.5-1.5b"), &cpu()).expect("model loads");
    check_greedy(&generator, "qwen2.5-1.5b", "cpu", usize::MAX);
}

#[test]
fn qwen_0_5b_on_the_cpu_decodes_as_llama_cpp_does() {
    let generator = EmbeddedGenerator::load(&model_path("qwen2.5-0.5b"), &cpu()).expect("model loads");
    check_greedy(&generator, "qwen2.5-0.5b", "cpu", usize::MAX);
}

#[test]
fn qwen_on_wgpu_decodes_as_llama_cpp_does() {
    // Burn's network on whatever wgpu adapter there is: lavapipe here, where the f32 network is
    // slow, so the first prompt of each model (the CPU tests take all ten).
    for name in ["qwen2.5-0.5b", "qwen2.5-1.5b"] {
        let generator = EmbeddedGenerator::load(&model_path(name), &wgpu()).expect("model loads on wgpu");
        check_greedy(&generator, name, "wgpu", 1);
    }
}

#[test]
fn smollm2_tokenizer_and_chat_template_match_llama_cpp() {
    check_tokenizer_and_template("smollm2-135m");
}

#[test]
fn smollm2_on_the_cpu_decodes_as_llama_cpp_does() {
    let generator = EmbeddedGenerator::load(&model_path("smollm2-135m"), &cpu()).expect("model loads");
    check_greedy(&generator, "smollm2-135m", "cpu", usize::MAX);
}
