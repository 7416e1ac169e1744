//! The WGSL attention kernel against burn's own attention, on burn's wgpu device (lavapipe
//! here), on odd shapes with random padding.

use burn::prelude::*;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use evident_kernels::testing::{Noise, assert_all_close};
use evident_kernels::{fused_attention_into, fused_causal_attention_into};

/// A tensor of `shape` filled with noise in [-2, 2), seeded so that a failure reproduces.
fn noise_tensor(rng: &mut Noise, shape: [usize; 4], dev: &Device) -> Tensor<4> {
    let values: Vec<f32> = rng.uniform(shape.iter().product()).iter().map(|v| 2.0 * v).collect();
    Tensor::<4>::from_data(TensorData::new(values, shape), dev)
}

fn check(batch: usize, heads: usize, seq: usize, head_dim: usize, seed: u64) {
    let dev = Device::wgpu(DeviceKind::DefaultDevice);
    let mut rng = Noise::new(seed);
    let mut rand = |shape: [usize; 4]| noise_tensor(&mut rng, shape, &dev);
    let (q, k, v) = (rand([batch, heads, seq, head_dim]), rand([batch, heads, seq, head_dim]), rand([batch, heads, seq, head_dim]));
    // Each sequence keeps a random number of real tokens (at least one), the rest is padding.
    let mut mask = vec![0.0f32; batch * seq];
    for b in 0..batch {
        let real = 1 + rng.below(seq);
        mask[b * seq..b * seq + real].iter_mut().for_each(|m| *m = 1.0);
    }
    let mask = Tensor::<2>::from_data(TensorData::new(mask, [batch, seq]), &dev);
    let noise = Tensor::<4>::full([batch, heads, seq, head_dim], f32::NAN, &dev);
    let got = fused_attention_into(q.clone(), k.clone(), v.clone(), mask.clone(), noise).expect("kernel runs");
    let pad = mask.equal_elem(0.0).reshape([batch, 1, 1, seq]).expand([batch, heads, seq, seq]);
    let want = attention(q, k, v, Some(pad), None, Default::default());
    let got: Vec<f32> = got.into_data().try_into_vec::<f32>().expect("read back");
    let want: Vec<f32> = want.into_data().try_into_vec::<f32>().expect("read back");
    assert_all_close(&format!("[{batch}, {heads}, {seq}, {head_dim}] against burn's attention"), &got, &want, 0.0, 1e-4);
}

#[test]
fn matches_burns_attention_on_odd_shapes() {
    check(1, 1, 1, 32, 1);
    check(3, 5, 37, 32, 2);
    check(2, 12, 129, 32, 3);
    check(4, 3, 17, 7, 4);
    check(1, 2, 256, 64, 5);
}

/// Causal grouped-query attention against burn's causal attention on key/value heads repeated
/// to the query heads' count.
fn check_causal(batch: usize, heads: usize, kv_heads: usize, q_len: usize, kv_len: usize, head_dim: usize) {
    let dev = Device::wgpu(DeviceKind::DefaultDevice);
    let mut rng = Noise::new((batch * 1000 + heads * 100 + q_len * 10 + kv_len) as u64);
    let mut rand = |shape: [usize; 4]| noise_tensor(&mut rng, shape, &dev);
    let q = rand([batch, heads, q_len, head_dim]);
    let (k, v) = (rand([batch, kv_heads, kv_len, head_dim]), rand([batch, kv_heads, kv_len, head_dim]));
    let noise = Tensor::<4>::full([batch, heads, q_len, head_dim], f32::NAN, &dev);
    let got = fused_causal_attention_into(q.clone(), k.clone(), v.clone(), noise).expect("kernel runs");
    let rep = heads / kv_heads;
    let widen = |t: Tensor<4>| {
        t.reshape([batch, kv_heads, 1, kv_len, head_dim]).expand([batch, kv_heads, rep, kv_len, head_dim]).reshape([batch, heads, kv_len, head_dim])
    };
    let options = AttentionModuleOptions { is_causal: true, ..Default::default() };
    let want = attention(q, widen(k), widen(v), None, None, options);
    let got: Vec<f32> = got.into_data().try_into_vec::<f32>().expect("read back");
    let want: Vec<f32> = want.into_data().try_into_vec::<f32>().expect("read back");
    assert_all_close(&format!("causal [{batch}, {heads}/{kv_heads}, {q_len}x{kv_len}, {head_dim}] against burn's attention"), &got, &want, 0.0, 1e-4);
}

#[test]
fn causal_grouped_query_attention_matches_burn() {
    check_causal(1, 9, 3, 1, 37, 64);
    check_causal(1, 9, 3, 23, 23, 64);
    check_causal(2, 4, 4, 13, 13, 7);
    check_causal(1, 6, 2, 5, 200, 32);
    check_causal(3, 2, 1, 1, 1, 16);
}

#[test]
fn mismatched_shapes_are_refused() {
    let dev = Device::wgpu(DeviceKind::DefaultDevice);
    let t = |shape: [usize; 4]| Tensor::<4>::zeros(shape, &dev);
    let out = t([1, 4, 5, 8]);
    assert!(fused_causal_attention_into(t([1, 4, 5, 8]), t([1, 3, 5, 8]), t([1, 3, 5, 8]), out.clone()).is_err(), "4 heads over 3 kv heads");
    assert!(fused_causal_attention_into(t([1, 4, 5, 8]), t([1, 2, 4, 8]), t([1, 2, 4, 8]), out).is_err(), "fewer keys than queries");
}
