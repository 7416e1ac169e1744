//! The embedded SmolLM2 decoder against transformers running the same GGUF in exact f32 (a
//! fixture made once by tests/fixtures/make_generator_reference.py), on the CPU backend and on
//! wgpu (lavapipe here); generation's stop strings and limits; and `evident generate` driven as
//! an operator would, on the default model.
//!
//! Burn's network on wgpu computes in f32 and must agree with transformers to 1e-3. The native
//! CPU decoder rounds its inputs (bfloat16 in prompt passes, 8 bits per run of 32 in decoding
//! steps, as llama.cpp rounds to 8 bits): on SmolLM2, whose activations have large outliers,
//! that moves logits by up to 0.58 on these prompts (llama.cpp's own rounding moves them by up
//! to 0.86), so its logits are held to `ROUNDED_TOLERANCE`, and its greedy decoding is checked
//! against llama.cpp's in tests/decoder_llamacpp.rs.

mod common;

use common::{floats, ids};

use std::path::PathBuf;

use evident::generate::{EmbeddedGenerator, GenerateRequest, Generator, Message};
use evident::models::{ChatTurn, ComputeDevice, KvCache, LogitsFor};
use serde_json::Value;

/// How far the native decoder's logits may be from exact f32 ones (see the module's doc), on
/// the tokens that matter (the most likely ones and a fixed sample of the vocabulary).
const ROUNDED_TOLERANCE: f32 = 0.75;

/// Over a whole vocabulary's logits, the largest difference and the root mean square one a
/// rounded pass may show beside burn's f32 one (measured: up to 0.97 and 0.24 on SmolLM2).
const ROUNDED_WORST: f32 = 1.5;
const ROUNDED_RMS: f32 = 0.4;

/// The largest and the root mean square difference of two logit vectors.
fn differences(got: &[f32], want: &[f32]) -> (f32, f32) {
    let worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    let rms = (got.iter().zip(want).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>() / got.len().max(1) as f64).sqrt() as f32;
    (worst, rms)
}

fn model_path() -> PathBuf {
    common::repo_root().join(".evident/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf")
}

fn reference() -> Value {
    common::fixture("generator_reference.json")
}

fn cpu() -> ComputeDevice {
    ComputeDevice { device: burn::prelude::Device::flex(), wgpu: false }
}

fn wgpu() -> ComputeDevice {
    ComputeDevice { device: burn::prelude::Device::wgpu(burn::prelude::DeviceKind::DefaultDevice), wgpu: true }
}

/// The first step's logits within `tol`, and when `greedy`, the greedy continuations token for
/// token.
fn check_greedy(generator: &EmbeddedGenerator, backend: &str, cases: usize, tol: f32, greedy: bool) {
    let fixture = reference();
    for case in fixture["greedy"].as_array().expect("cases").iter().take(cases) {
        let prompt = ids(&case["prompt_ids"]);
        let mut cache = KvCache::default();
        let logits = generator.logits(&prompt, &mut cache, LogitsFor::Last).expect("logits");
        let first = &case["first_logits"];
        for (key_ids, key_values) in [("top_ids", "top_values"), ("probe_ids", "probe_values")] {
            for (id, want) in ids(&first[key_ids]).into_iter().zip(floats(&first[key_values])) {
                let got = logits[id as usize];
                assert!((got - want).abs() < tol, "{backend}: logit of token {id} is {got}, transformers has {want}");
            }
        }
        if !greedy {
            continue;
        }
        let want = ids(&case["continuation_ids"]);
        let request = GenerateRequest::user("", want.len());
        let (got, generation) = generator.generate_ids(&prompt, &request, None, &mut |_| {}).expect("generates");
        let want_tokens: Vec<u32> = want.iter().copied().filter(|&t| t != 2).collect();
        assert_eq!(got, want_tokens, "{backend}: greedy continuation of {:?}", case["prompt_text"]);
        assert_eq!(generation.text, case["continuation_text"].as_str().expect("text").trim_end_matches("<|im_end|>"));
    }
}

#[test]
fn tokenizer_and_chat_template_match_transformers() {
    let generator = EmbeddedGenerator::load(&model_path(), &cpu()).expect("model loads");
    let fixture = reference();
    for case in fixture["tokenizer"].as_array().expect("cases") {
        let text = case["text"].as_str().expect("text");
        assert_eq!(generator.tokenizer().encode(text).expect("encodes"), ids(&case["ids"]), "ids of {text:?}");
        assert_eq!(generator.tokenizer().decode(&ids(&case["ids"])).expect("decodes"), text, "decoding round-trips");
    }
    let chat = &fixture["chat"];
    let turns: Vec<ChatTurn> = serde_json::from_value(chat["messages"].clone()).expect("turns");
    let rendered = generator.tokenizer().render(&turns, true).expect("renders");
    assert_eq!(rendered, chat["text"].as_str().expect("text"));
    let messages: Vec<Message> = turns.into_iter().map(|t| Message::text(&t.role, t.content)).collect();
    assert_eq!(generator.prompt_ids(&messages).expect("ids"), ids(&chat["ids"]));
}

#[test]
fn cpu_decoder_reproduces_transformers() {
    let generator = EmbeddedGenerator::load(&model_path(), &cpu()).expect("model loads");
    check_greedy(&generator, "cpu", usize::MAX, ROUNDED_TOLERANCE, false);
}

#[test]
fn wgpu_decoder_reproduces_transformers() {
    let generator = EmbeddedGenerator::load(&model_path(), &wgpu()).expect("model loads on wgpu");
    // One case keeps the software adapter's time reasonable; the CPU test covers all three.
    check_greedy(&generator, "wgpu", 1, 1e-3, true);
}

#[test]
fn score_choices_ranks_the_obvious_reply_first_and_matches_transformers() {
    let generator = EmbeddedGenerator::load(&model_path(), &cpu()).expect("model loads");
    let fixture = reference();
    let mut checked = 0;
    for case in fixture["choices"].as_array().expect("cases") {
        let messages = vec![Message::text("user", case["prompt"].as_str().expect("prompt"))];
        let choices: Vec<String> = serde_json::from_value(case["choices"].clone()).expect("choices");
        assert_eq!(generator.prompt_ids(&messages).expect("ids"), ids(&case["prompt_ids"]));
        let scores = generator.score_choices(&messages, &choices, None).expect("scores");
        for (got, want) in scores.iter().zip(floats(&case["choice_logprobs"])) {
            // Log-probabilities move with the logits' rounding, less than the logits themselves.
            assert!((got.logprob - want).abs() < ROUNDED_TOLERANCE / 3.0, "{}: {} vs {want}", got.choice, got.logprob);
        }
        if case["expected_wins"].as_bool() == Some(true) {
            let best = scores.iter().max_by(|a, b| a.logprob.total_cmp(&b.logprob)).expect("a score");
            assert_eq!(best.choice, case["expected"].as_str().expect("expected"));
            checked += 1;
        }
    }
    assert!(checked >= 3, "at least three prompts with an obvious reply");
    // Multi-token choices are scored teacher-forced: the model's own greedy reply must beat a
    // scrambled one of the same words.
    let messages = vec![Message::text("user", "What is the capital of France?")];
    let scores =
        generator.score_choices(&messages, &["The capital of France is Paris.".into(), "Paris capital The is France of.".into()], None).expect("scores");
    assert!(scores[0].logprob > scores[1].logprob + 5.0, "{scores:?}");
}

#[test]
fn stop_strings_and_token_limits_end_generation() {
    // Qwen2.5-0.5B: SmolLM2 answers this question with a near tie between "The" and "L'".
    let qwen = evident::generate::embedded_model_path(&common::repo_root().join(".evident/models"), "qwen2.5-0.5b").expect("a model");
    let generator = EmbeddedGenerator::load(&qwen, &cpu()).expect("model loads");
    let mut request = GenerateRequest::user("What is the capital of France?", 32);
    request.stop = vec![" is".into()];
    let mut streamed = String::new();
    let out = generator.generate(&request, None, &mut |piece| streamed.push_str(piece)).expect("generates");
    assert_eq!(out.text, "The capital of France");
    assert_eq!(streamed, out.text, "what streams is what is returned");
    let request = GenerateRequest::user("Write a long story about a dragon.", 5);
    let out = generator.generate(&request, None, &mut |_| {}).expect("generates");
    assert_eq!(out.completion_tokens, 5);
    assert_eq!(out.finish, evident::generate::FinishReason::Length);
}

#[test]
fn generate_command_streams_an_answer_and_scores_choices() {
    let app = common::Appliance::new();
    let out = app.ok(&["generate", "What is the capital of France?", "--max-tokens", "24"]);
    assert!(out.contains("Paris"), "{out}");
    let out = app.ok(&["generate", "Reply with one word, A or B. Which is a fruit? A: apple B: hammer", "--choice", "A", "--choice", "B"]);
    let score = |name: &str| -> f32 {
        let line = out.lines().find(|l| l.split_whitespace().nth(1) == Some(name)).expect("a line per choice");
        line.split_whitespace().next().expect("score").parse().expect("number")
    };
    assert!(score("A") > score("B"), "{out}");
    let sampled = app.ok(&["generate", "Name a colour.", "--temperature", "0.9", "--seed", "11", "--max-tokens", "12"]);
    let again = app.ok(&["generate", "Name a colour.", "--temperature", "0.9", "--seed", "11", "--max-tokens", "12"]);
    assert_eq!(sampled, again, "a seed repeats a sampled run");
}

#[test]
fn native_cpu_prompt_pass_equals_burn_on_a_fresh_and_a_continued_cache() {
    use evident::models::gguf::GgufFile;
    use evident::models::{Llama, LlamaConfig, NativeDecoder, burn_causal_attention};
    let file = GgufFile::open(&model_path()).expect("reads");
    let burn_model = Llama::load(&file, &cpu().device).expect("loads");
    let native = NativeDecoder::load(&file, &LlamaConfig::from_gguf(&file).expect("config")).expect("loads");
    let rows = |t: burn::prelude::Tensor<2>| t.into_data().try_into_vec::<f32>().expect("read back");
    let fixture = reference();
    // A long prompt (attention blocks of many rows), then a short continuation with every
    // position's logits, as score_choices asks; the native cache then serves a burn pass.
    let prompt: Vec<u32> = (0..4).flat_map(|i| ids(&fixture["greedy"][i % 2]["prompt_ids"])).collect();
    assert!(prompt.len() > 70, "the prompt spans more than one attention block");
    let (mut burn_cache, mut native_cache) = (KvCache::default(), KvCache::default());
    let passes: [(&[u32], LogitsFor); 2] = [(&prompt, LogitsFor::Last), (&[504, 2365, 6354], LogitsFor::All)];
    for (pass, (tokens, which)) in passes.into_iter().enumerate() {
        let want = rows(burn_model.forward(tokens, &mut burn_cache, which, &burn_causal_attention).expect("burn"));
        let got = native.forward(tokens, &mut native_cache, which).expect("native");
        assert_eq!(got.len(), want.len(), "pass {pass}: logits for the same positions");
        let (worst, rms) = differences(&got, &want);
        println!("pass {pass}: largest difference {worst:.3}, rms {rms:.3}");
        assert!(worst < ROUNDED_WORST && rms < ROUNDED_RMS, "pass {pass}: logits differ by up to {worst} (rms {rms})");
        assert_eq!(native_cache.len(), burn_cache.len());
    }
    let want = rows(burn_model.forward(&[42], &mut burn_cache, LogitsFor::Last, &burn_causal_attention).expect("burn"));
    let got = rows(burn_model.forward(&[42], &mut native_cache, LogitsFor::Last, &burn_causal_attention).expect("burn on the native cache"));
    // The native cache holds keys and values of rounded passes: the same tolerance.
    let (worst, rms) = differences(&got, &want);
    println!("burn on the native cache: largest difference {worst:.3}, rms {rms:.3}");
    assert!(worst < ROUNDED_WORST && rms < ROUNDED_RMS, "burn on the native cache: logits differ by up to {worst} (rms {rms})");
    assert!(native.forward(&[], &mut native_cache, LogitsFor::Last).is_err(), "no tokens is an error");
    assert!(native.forward(&[u32::MAX], &mut native_cache, LogitsFor::Last).is_err(), "a token outside the vocabulary is an error");
}

#[test]
fn native_cpu_steps_equal_burn_steps_and_caches_convert_both_ways() {
    use evident::models::gguf::GgufFile;
    use evident::models::{Llama, NativeDecoder, burn_causal_attention};
    let file = GgufFile::open(&model_path()).expect("reads");
    let burn_model = Llama::load(&file, &cpu().device).expect("loads");
    let native = NativeDecoder::load(&file, burn_model.config()).expect("loads");
    let prompt = ids(&reference()["greedy"][1]["prompt_ids"]);
    let rows = |t: burn::prelude::Tensor<2>| t.into_data().try_into_vec::<f32>().expect("read back");
    let mut burn_cache = KvCache::default();
    burn_model.forward(&prompt, &mut burn_cache, LogitsFor::Last, &burn_causal_attention).expect("prompt");
    let mut native_cache = burn_cache.clone();
    // Three steps: the native cache starts as burn's tensors, then burn reads the native one back.
    for (step, token) in [504u32, 2365, 6354].into_iter().enumerate() {
        let want = rows(burn_model.forward(&[token], &mut burn_cache, LogitsFor::Last, &burn_causal_attention).expect("burn step"));
        let got = if step == 1 {
            rows(burn_model.forward(&[token], &mut native_cache, LogitsFor::Last, &burn_causal_attention).expect("burn on a host cache"))
        } else {
            native.forward(&[token], &mut native_cache, LogitsFor::Last).expect("native step")
        };
        let (worst, rms) = differences(&got, &want);
        println!("step {step}: largest difference {worst:.3}, rms {rms:.3}");
        assert!(worst < ROUNDED_WORST && rms < ROUNDED_RMS, "step {step}: logits differ by up to {worst} (rms {rms})");
        assert_eq!(native_cache.len(), burn_cache.len());
    }
}

#[test]
fn a_prompt_cache_computes_only_what_follows_the_shared_prefix_and_changes_no_answer() {
    use evident::generate::PromptCache;
    let qwen = evident::generate::embedded_model_path(&common::repo_root().join(".evident/models"), "qwen2.5-0.5b").expect("a model");
    let generator = EmbeddedGenerator::load(&qwen, &cpu()).expect("model loads");
    let context = "Page 12. Internet use among older adults. Fifty-nine percent of seniors report they go online, a \
        six-point increase in the course of a year, and 47% say they have a high-speed broadband connection at home. \
        Even so, older adults remain less likely than younger Americans to use the internet: 86% of all adults go online.";
    let ask = |question: &str| {
        let mut request = GenerateRequest::user(format!("{context}\n\nQuestion: {question} Answer briefly."), 16);
        request.messages.insert(0, Message::text("system", "You answer questions about documents using only the pages given."));
        request
    };
    let cache = PromptCache::new(64 << 20);
    let first = generator.generate(&ask("What share of seniors go online?"), Some(&cache), &mut |_| {}).expect("generates");
    assert_eq!(cache.reuse().reused, 0, "nothing to reuse yet");
    assert_eq!(cache.reuse().computed, first.prompt_tokens as u64);
    let second_request = ask("What share of seniors have broadband at home?");
    let second = generator.generate(&second_request, Some(&cache), &mut |_| {}).expect("generates");
    let reuse = cache.reuse();
    assert_eq!(reuse.computed + reuse.reused, (first.prompt_tokens + second.prompt_tokens) as u64, "every prompt token counted once");
    assert!(
        reuse.reused > 60 && reuse.computed - first.prompt_tokens as u64 > 8,
        "the shared system message and page were read, the new question computed: {reuse:?}"
    );
    let plain = generator.generate(&second_request, None, &mut |_| {}).expect("generates");
    assert_eq!(second.text, plain.text, "the cache changes what is computed, not the answer");
}
