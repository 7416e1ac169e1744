//! The encoder against sentence-transformers' own output (a fixture made once by
//! tests/fixtures/make_encoder_reference.py): the native CPU network, and burn's on its CPU
//! backend and on wgpu (lavapipe here); the native one with 8-bit products against the f32 one.

mod common;

use std::path::PathBuf;

use burn::prelude::Device;
use evident::config::CpuPrecision;
use evident::models::{Bert, CpuBert, TextEncoder, burn_attention, wgsl_attention};

fn model_dir() -> PathBuf {
    common::repo_root().join(".evident/models/all-minilm-l6-v2")
}

fn reference() -> serde_json::Value {
    let text = std::fs::read_to_string(common::repo_root().join("tests/fixtures/encoder_reference.json")).expect("fixture");
    serde_json::from_str(&text).expect("fixture JSON")
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().expect("array").iter().map(|x| x.as_f64().expect("number") as f32).collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn check_sentences(encoder: &TextEncoder, backend: &str) {
    let fixture = reference();
    let sentences: Vec<&str> = fixture["sentences"].as_array().expect("sentences").iter().map(|s| s.as_str().expect("text")).collect();
    let got = encoder.embed(&sentences).expect("embeddings");
    for (i, want) in fixture["embeddings"].as_array().expect("embeddings").iter().enumerate() {
        let c = cosine(&got[i], &floats(want));
        assert!(c > 0.999, "{backend}: sentence {i} has cosine {c} to sentence-transformers");
        let norm: f32 = got[i].iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{backend}: sentence vectors are L2-normalised");
    }
}

/// Token ids and sentence-transformers' hidden states of the fixture's sequences.
fn reference_hidden_states() -> Vec<(Vec<u32>, Vec<f32>)> {
    let fixture = reference();
    let items = fixture["hidden_states"].as_array().expect("hidden states");
    items
        .iter()
        .map(|item| {
            let ids = item["ids"].as_array().expect("ids").iter().map(|x| x.as_u64().expect("id") as u32).collect();
            (ids, item["hidden"].as_array().expect("rows").iter().flat_map(floats).collect())
        })
        .collect()
}

fn assert_hidden_close(got: &[f32], want: &[f32], backend: &str) {
    assert_eq!(got.len(), want.len(), "{backend}: one hidden state per token");
    let worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(worst < 2e-3, "{backend}: hidden states differ by up to {worst}");
}

fn check_hidden_states(device: &Device, backend: &str, wgpu: bool) {
    let bert = Bert::load(&model_dir(), device).expect("model loads");
    for (ids, want) in reference_hidden_states() {
        let mask = vec![1u32; ids.len()];
        let attention = if wgpu { wgsl_attention } else { burn_attention };
        let got = bert.forward(&ids, &mask, 1, ids.len(), &attention).expect("forward");
        assert_hidden_close(&got, &want, backend);
    }
}

#[test]
fn native_cpu_encoder_matches_sentence_transformers() {
    let bert = CpuBert::load(&model_dir()).expect("model loads");
    let cases = reference_hidden_states();
    for (ids, want) in &cases {
        assert_hidden_close(&bert.forward(&[ids.as_slice()]).expect("forward"), want, "native cpu");
    }
    // All sequences packed into one pass give each its own states: attention stays inside a
    // sequence.
    let seqs: Vec<&[u32]> = cases.iter().map(|(ids, _)| ids.as_slice()).collect();
    let packed = bert.forward(&seqs).expect("packed forward");
    let want: Vec<f32> = cases.iter().flat_map(|(_, h)| h.iter().copied()).collect();
    assert_hidden_close(&packed, &want, "native cpu, packed");
    check_sentences(&TextEncoder::load(&model_dir(), &Device::flex()).expect("encoder loads"), "native cpu");
}

#[test]
fn burn_cpu_encoder_matches_sentence_transformers() {
    let device = Device::flex();
    check_hidden_states(&device, "burn cpu", false);
    let encoder = TextEncoder::load_with_attention(&model_dir(), &device, Box::new(burn_attention)).expect("encoder loads");
    check_sentences(&encoder, "burn cpu");
}

#[test]
fn native_and_burn_cpu_encoders_give_the_same_token_vectors_for_real_pages() {
    let pages = [
        "Revenue grew in every segment, led by health care. ".repeat(50),
        "Net sales by segment: Safety and Industrial $11.6 billion; Transportation and Electronics $8.9 billion.".to_string(),
        "x".to_string(),
    ];
    let texts: Vec<&str> = pages.iter().map(String::as_str).collect();
    let native = TextEncoder::load(&model_dir(), &Device::flex()).expect("native loads");
    let burn = TextEncoder::load_with_attention(&model_dir(), &Device::flex(), Box::new(burn_attention)).expect("burn loads");
    let a = native.token_vectors(&texts).expect("native vectors");
    let b = burn.token_vectors(&texts).expect("burn vectors");
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.tokens, y.tokens);
        for (u, v) in x.vectors.chunks(x.dim).zip(y.vectors.chunks(y.dim)) {
            let c = cosine(u, v);
            assert!(c > 0.9999, "token vectors differ: cosine {c}");
        }
    }
}

#[test]
fn int8_encoder_stays_near_the_f32_one() {
    let int8 = TextEncoder::load_native(&model_dir(), CpuPrecision::Int8).expect("int8 loads");
    if int8.precision() != CpuPrecision::Int8 {
        // The kernel's own tests check the product on every CPU; here the f32 network ran.
        eprintln!("no AVX-512 VNNI: the encoder fell back to f32, as it reports");
        return;
    }
    let fixture = reference();
    let sentences: Vec<&str> = fixture["sentences"].as_array().expect("sentences").iter().map(|s| s.as_str().expect("text")).collect();
    let got = int8.embed(&sentences).expect("embeddings");
    for (i, want) in fixture["embeddings"].as_array().expect("embeddings").iter().enumerate() {
        let c = cosine(&got[i], &floats(want));
        eprintln!("int8 sentence {i}: cosine {c:.5} to sentence-transformers");
        assert!(c > 0.99, "int8: sentence {i} has cosine {c} to sentence-transformers");
    }
    let page = "Net sales by segment: Safety and Industrial $11.6 billion; Transportation and Electronics $8.9 billion. ".repeat(20);
    let f32_net = TextEncoder::load(&model_dir(), &Device::flex()).expect("f32 loads");
    let (a, b) = (&int8.token_vectors(&[page.as_str()]).expect("int8 vectors")[0], &f32_net.token_vectors(&[page.as_str()]).expect("f32 vectors")[0]);
    assert_eq!(a.tokens, b.tokens);
    let cosines: Vec<f64> = a.vectors.chunks(a.dim).zip(b.vectors.chunks(b.dim)).map(|(u, v)| cosine(u, v)).collect();
    let (worst, mean) = (cosines.iter().copied().fold(1.0, f64::min), cosines.iter().sum::<f64>() / cosines.len() as f64);
    eprintln!("int8 token vectors of a page against f32: mean cosine {mean:.5}, worst {worst:.5}");
    assert!(mean > 0.99 && worst > 0.95, "int8 token vectors drift: mean cosine {mean}, worst {worst}");
}

#[test]
fn wgpu_encoder_with_the_wgsl_attention_matches_sentence_transformers() {
    let device = Device::wgpu(burn::prelude::DeviceKind::DefaultDevice);
    check_hidden_states(&device, "wgpu", true);
    let encoder = TextEncoder::load_with_attention(&model_dir(), &device, Box::new(wgsl_attention)).expect("encoder loads");
    check_sentences(&encoder, "wgpu");
}

#[test]
fn long_texts_get_one_unit_vector_per_word_piece() {
    let encoder = TextEncoder::load(&model_dir(), &Device::flex()).expect("encoder loads");
    let long = "Revenue grew in every segment, led by health care. ".repeat(60);
    let out = encoder.token_vectors(&[long.as_str(), "", "Short page."]).expect("token vectors");
    // 60 x 11 word pieces, of which the comma and full stop are left out: 9 each.
    assert_eq!(out[0].len(), 60 * 9, "{:?}", &out[0].tokens[..12]);
    assert!(out[1].is_empty());
    assert_eq!(out[2].tokens, ["short", "page"]);
    for tv in &out {
        for v in tv.vectors.chunks(tv.dim) {
            let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4);
        }
    }
    assert!(out[0].tokens.iter().all(|t| t.chars().any(char::is_alphanumeric)));
}

#[test]
fn one_pass_gives_the_sentence_and_token_vectors_of_the_two_passes() {
    let encoder = TextEncoder::load(&model_dir(), &Device::flex()).expect("encoder loads");
    // Texts of odd lengths: empty, punctuation only, one word, a table row, a unit's paragraph,
    // and one over a window (which takes the two passes).
    let texts = [
        String::new(),
        "--".to_string(),
        "Revenue".to_string(),
        "Net sales by segment: Safety and Industrial $11.6 billion; Transportation $8.9 billion.".to_string(),
        "Sales grew in every region we serve, led by health care and consumer goods. ".repeat(3),
        "Revenue grew in every segment, led by health care. ".repeat(40),
    ];
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (sentences, tokens) = encoder.embed_with_token_vectors(&texts).expect("one pass");
    let (want_sentences, want_tokens) = (encoder.embed(&texts).expect("embed"), encoder.token_vectors(&texts).expect("token vectors"));
    for (i, (got, want)) in sentences.iter().zip(&want_sentences).enumerate() {
        assert_eq!(got.len(), want.len());
        assert!(got.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-4), "text {i}: sentence vectors differ");
    }
    for (i, (got, want)) in tokens.iter().zip(&want_tokens).enumerate() {
        assert_eq!(got.tokens, want.tokens, "text {i}");
        assert!(got.vectors.iter().zip(&want.vectors).all(|(a, b)| (a - b).abs() < 1e-4), "text {i}: token vectors differ");
    }
}
