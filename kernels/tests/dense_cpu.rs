//! The CPU encoder's building blocks (linear, layer norm, packed multi-head attention) against
//! plain f64 loops, on random inputs of odd shapes; outputs start as noise so that a value the
//! code forgets to write fails.

use evident_kernels::{AttentionShape, SequenceSpan, Weight, attention_cpu, layer_norm, linear, packed_attention_reference};

use evident_kernels::testing::{Noise, assert_all_close};

#[test]
fn linear_adds_bias_and_optionally_what_was_there() {
    let mut rng = Noise::new(3);
    for (rows, inp, out) in [(1, 1, 1), (5, 3, 7), (77, 384, 130), (130, 37, 1536), (0, 4, 4)] {
        let x = rng.uniform(rows * inp);
        let w = rng.uniform(out * inp);
        let bias = rng.uniform(out);
        let before = rng.uniform(rows * out);
        for accumulate in [false, true] {
            let mut got = before.clone();
            linear(&x, rows, Weight { values: &w, inp, out }, &bias, &mut got, accumulate);
            let mut want = vec![0.0f64; rows * out];
            for r in 0..rows {
                for o in 0..out {
                    let dot: f64 = (0..inp).map(|i| f64::from(x[r * inp + i]) * f64::from(w[o * inp + i])).sum();
                    let prior = if accumulate { f64::from(before[r * out + o]) } else { 0.0 };
                    want[r * out + o] = dot + f64::from(bias[o]) + prior;
                }
            }
            assert_all_close(&format!("linear {rows}x{inp}->{out} accumulate {accumulate}"), &got, &want, 1e-4, 1e-4);
        }
    }
}

#[test]
fn layer_norm_matches_the_definition() {
    let mut rng = Noise::new(5);
    for (rows, width) in [(1, 1), (3, 7), (129, 384)] {
        let x: Vec<f32> = rng.uniform(rows * width).iter().map(|v| v * 5.0 + 2.0).collect();
        let gamma = rng.uniform(width);
        let beta = rng.uniform(width);
        let mut got = x.clone();
        layer_norm(&mut got, width, &gamma, &beta, 1e-12);
        let mut want = Vec::new();
        for row in x.chunks(width) {
            let mean = row.iter().map(|v| f64::from(*v)).sum::<f64>() / width as f64;
            let var = row.iter().map(|v| (f64::from(*v) - mean).powi(2)).sum::<f64>() / width as f64;
            for (i, v) in row.iter().enumerate() {
                want.push((f64::from(*v) - mean) / (var + 1e-12).sqrt() * f64::from(gamma[i]) + f64::from(beta[i]));
            }
        }
        assert_all_close(&format!("layer norm {rows}x{width}"), &got, &want, 1e-4, 1e-4);
    }
}

#[test]
fn packed_attention_matches_per_sequence_softmax() {
    let mut rng = Noise::new(9);
    for (lens, heads, d) in [(vec![1], 1, 1), (vec![3, 1, 17], 3, 5), (vec![130, 256, 2], 12, 32)] {
        let mut spans = Vec::new();
        let mut start = 0;
        for len in lens {
            spans.push(SequenceSpan { start, len });
            start += len;
        }
        let width = heads * d;
        // Larger values make the softmax peaked, as trained attention often is.
        let qkv: Vec<f32> = rng.uniform(start * 3 * width).iter().map(|v| v * 3.0).collect();
        let mut got = rng.uniform(start * width);
        attention_cpu(&qkv, &spans, AttentionShape { heads, head_dim: d }, &mut got);
        let want = packed_attention_reference(&qkv, &spans, heads, d);
        assert_all_close(&format!("attention {spans:?} heads {heads} dim {d}"), &got, &want, 1e-4, 1e-4);
    }
}
