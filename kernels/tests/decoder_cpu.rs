//! The CPU decoder's prompt-pass building blocks (RMS norm, rotary embedding, gated SiLU,
//! grouped-query causal attention over a cache) against plain f64 loops, on random inputs of odd
//! shapes; outputs start as noise so that a value the code forgets to write fails.

use evident_kernels::{GroupedShape, RopeLayout, causal_attention, causal_attention_reference, rms_norm, rotary_angles, rotate, silu_gate};

use evident_kernels::testing::{Noise, assert_all_close};

#[test]
fn rms_norm_matches_the_definition() {
    let mut rng = Noise::new(1);
    for (rows, width) in [(1, 1), (3, 7), (130, 576), (65, 33)] {
        let x: Vec<f32> = rng.uniform(rows * width).iter().map(|v| v * 5.0).collect();
        let weight = rng.uniform(width);
        let mut got = rng.uniform(rows * width);
        rms_norm(&x, &weight, 1e-5, &mut got);
        let mut want = vec![0.0f64; rows * width];
        for r in 0..rows {
            let row = &x[r * width..(r + 1) * width];
            let ms = row.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / width as f64;
            for i in 0..width {
                want[r * width + i] = f64::from(row[i]) / (ms + 1e-5).sqrt() * f64::from(weight[i]);
            }
        }
        assert_all_close(&format!("rms norm {rows}x{width}"), &got, &want, 1e-5, 1e-5);
    }
}

#[test]
fn rotary_embedding_rotates_the_first_heads_of_each_row_by_its_position() {
    let mut rng = Noise::new(2);
    let cases = [(1, 0, 2, 2, 2, 10_000.0), (5, 17, 30, 24, 8, 10_000.0), (70, 1000, 200, 192, 64, 10_000.0), (9, 3000, 272, 256, 128, 1e6)];
    for (rows, first, stride, width, d, base) in cases {
        for layout in [RopeLayout::AdjacentPairs, RopeLayout::Halves] {
            let before = rng.uniform(rows * stride);
            let mut got = before.clone();
            let (cos, sin) = rotary_angles(first..first + rows, d, base);
            rotate(&mut got, stride, width, d, layout, &cos, &sin);
            let mut want: Vec<f64> = before.iter().map(|v| f64::from(*v)).collect();
            for r in 0..rows {
                for head in 0..width / d {
                    for i in 0..d / 2 {
                        let angle = (first + r) as f64 / base.powf(2.0 * i as f64 / d as f64);
                        let at = r * stride + head * d;
                        let (ia, ib) = match layout {
                            RopeLayout::AdjacentPairs => (at + 2 * i, at + 2 * i + 1),
                            RopeLayout::Halves => (at + i, at + i + d / 2),
                        };
                        let (a, b) = (f64::from(before[ia]), f64::from(before[ib]));
                        want[ia] = a * angle.cos() - b * angle.sin();
                        want[ib] = a * angle.sin() + b * angle.cos();
                    }
                }
            }
            assert_all_close(&format!("rope {layout:?} {rows} rows from {first}, {width} of {stride}, heads of {d}"), &got, &want, 1e-5, 1e-5);
        }
    }
}

#[test]
fn gated_silu_matches_the_definition_far_into_both_tails() {
    let mut rng = Noise::new(3);
    for (rows, width) in [(1, 1), (3, 17), (131, 1536)] {
        let gate_up: Vec<f32> = rng.uniform(rows * 2 * width).iter().map(|v| v * 30.0).collect();
        let mut got = rng.uniform(rows * width);
        silu_gate(&gate_up, width, &mut got);
        let mut want = vec![0.0f64; rows * width];
        for r in 0..rows {
            for i in 0..width {
                let (g, u) = (f64::from(gate_up[r * 2 * width + i]), f64::from(gate_up[r * 2 * width + width + i]));
                want[r * width + i] = g / (1.0 + (-g).exp()) * u;
            }
        }
        assert_all_close(&format!("gated silu {rows}x{width}"), &got, &want, 1e-5, 1e-5);
    }
}

#[test]
fn causal_attention_over_a_cache_matches_the_masked_softmax() {
    let mut rng = Noise::new(4);
    // (new, past, heads, kv_heads, head_dim, extra columns in each query row); single new
    // tokens after short and long caches take the decoding step's serial and parallel loops,
    // and a cache longer than two spans merges partial softmaxes of a last, partial span.
    for (new, past, heads, kv_heads, d, extra) in [
        (1, 0, 1, 1, 1, 0),
        (1, 9, 3, 1, 5, 4),
        (1, 2047, 12, 2, 128, 512),
        (1, 1100, 14, 2, 19, 3),
        (7, 0, 4, 2, 3, 0),
        (130, 3, 9, 3, 64, 384),
        (65, 200, 6, 6, 16, 1),
        (129, 500, 12, 2, 128, 0),
    ] {
        let shape = GroupedShape { heads, kv_heads, head_dim: d };
        let q_stride = heads * d + extra;
        let total = new + past;
        // Larger values make the softmax peaked, as trained attention often is.
        let q: Vec<f32> = rng.uniform(new * q_stride).iter().map(|v| v * 3.0).collect();
        let keys: Vec<f32> = rng.uniform(total * kv_heads * d).iter().map(|v| v * 3.0).collect();
        let values = rng.uniform(total * kv_heads * d);
        let mut got = rng.uniform(new * heads * d);
        causal_attention(&q, q_stride, &keys, &values, shape, &mut got);
        let want = causal_attention_reference(&q, q_stride, &keys, &values, shape, new);
        assert_all_close(&format!("causal attention {new} new after {past}, {shape:?}"), &got, &want, 1e-4, 1e-4);
    }
}
