//! The burn encoder against sentence-transformers' own output (a fixture made once by
//! tests/fixtures/make_encoder_reference.py), on the CPU backend and on wgpu (lavapipe here).

mod common;

use std::path::PathBuf;

use burn::prelude::Device;
use evident::models::{Bert, TextEncoder, burn_attention, wgsl_attention};

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

fn check_hidden_states(device: &Device, backend: &str, wgpu: bool) {
    let bert = Bert::load(&model_dir(), device).expect("model loads");
    let fixture = reference();
    for item in fixture["hidden_states"].as_array().expect("hidden states") {
        let ids: Vec<u32> = item["ids"].as_array().expect("ids").iter().map(|x| x.as_u64().expect("id") as u32).collect();
        let mask = vec![1u32; ids.len()];
        let attention = if wgpu { wgsl_attention } else { burn_attention };
        let got = bert.forward(&ids, &mask, 1, ids.len(), &attention).expect("forward");
        let want: Vec<f32> = item["hidden"].as_array().expect("rows").iter().flat_map(floats).collect();
        let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(worst < 2e-3, "{backend}: hidden states differ by up to {worst}");
    }
}

#[test]
fn cpu_encoder_matches_sentence_transformers() {
    let device = Device::flex();
    check_hidden_states(&device, "cpu", false);
    check_sentences(&TextEncoder::load(&model_dir(), &device).expect("encoder loads"), "cpu");
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
