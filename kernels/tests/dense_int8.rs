//! The encoder's 8-bit linear layer against its plain reference on random inputs of odd shapes
//! (the integer sums are exact, so they must agree to the last rounding of the scaling), and
//! against the f32 product within what rounding both operands to 8 bits can move it.

use evident_kernels::testing::{Noise, assert_all_close};
use evident_kernels::{Int8Weight, Weight, int8_linear_available, linear, linear_int8, linear_int8_reference};

const SHAPES: [(usize, usize, usize); 8] = [(1, 1, 1), (5, 3, 7), (7, 17, 65), (13, 64, 64), (50, 385, 130), (77, 384, 1152), (0, 4, 4), (3, 0, 5)];

#[test]
fn int8_linear_equals_its_reference() {
    eprintln!("VNNI kernel: {}", int8_linear_available());
    let mut rng = Noise::new(11);
    for (rows, inp, out) in SHAPES {
        let x: Vec<f32> = rng.uniform(rows * inp).iter().map(|v| v * 3.0).collect();
        let w = rng.uniform(out * inp);
        let bias = rng.uniform(out);
        let before = rng.uniform(rows * out);
        let packed = Int8Weight::new(&w, inp, out);
        for accumulate in [false, true] {
            let mut got = before.clone();
            linear_int8(&x, rows, &packed, &bias, &mut got, accumulate);
            let mut want = before.clone();
            linear_int8_reference(&x, rows, &w, inp, &bias, &mut want, accumulate);
            assert_all_close(&format!("int8 {rows}x{inp}->{out} accumulate {accumulate}"), &got, &want, 1e-6, 1e-6);
        }
    }
}

#[test]
fn int8_linear_stays_near_the_f32_product() {
    let mut rng = Noise::new(12);
    for (rows, inp, out) in [(9, 384, 1152), (31, 1536, 384), (4, 33, 70)] {
        // An outlier per row, as the encoder's activations have, widens each row's scale.
        let mut x = rng.uniform(rows * inp);
        for r in 0..rows {
            x[r * inp + rng.below(inp)] = 8.0;
        }
        let w: Vec<f32> = rng.uniform(out * inp).iter().map(|v| v * 0.1).collect();
        let bias = rng.uniform(out);
        let mut exact = vec![0.0f32; rows * out];
        linear(&x, rows, Weight { values: &w, inp, out }, &bias, &mut exact, false);
        let mut got = vec![f32::NAN; rows * out];
        linear_int8(&x, rows, &Int8Weight::new(&w, inp, out), &bias, &mut got, false);
        // Rounding moves each product by up to half an input step times its weight (the input's
        // step, 8/127 with the outlier, dominates); as independent errors over the row that is
        // about √inp such terms. 1.5 steps · √inp is several standard deviations, yet far
        // below the outputs' own spread (about 0.03 · √inp), which a wrong layout would hit.
        let step = 8.0 / 127.0 * 0.1;
        let tolerance = step * (inp as f64).sqrt() as f32 * 1.5;
        assert_all_close(&format!("int8 against f32, {rows}x{inp}->{out}"), &got, &exact, 0.0, f64::from(tolerance));
        let off: f32 = got.iter().zip(&exact).map(|(g, e)| (g - e).abs()).sum::<f32>() / got.len() as f32;
        assert!(off > 0.0, "rounding changed nothing: the f32 path ran instead");
    }
}
