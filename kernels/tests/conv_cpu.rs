//! The CPU convolutions (pointwise, depthwise, im2col) and the batched product against plain
//! f64 sums, on random inputs of odd sizes with strides, padding, dilation and groups, and the
//! epilogue seeing every plane once with its channel.

use evident_kernels::testing::{Noise, assert_all_close};
use evident_kernels::{ConvShape, Int8Weight, batched_matmul, conv2d, conv2d_reference, linear_int8, linear_int8_reference, pointwise_conv_int8};

fn shape(
    c_in: usize,
    c_out: usize,
    groups: usize,
    k: (usize, usize),
    stride: (usize, usize),
    pad: (usize, usize, usize, usize),
    dilation: (usize, usize),
) -> ConvShape {
    ConvShape { c_in, c_out, groups, kh: k.0, kw: k.1, stride, pad_begin: (pad.0, pad.1), pad_end: (pad.2, pad.3), dilation }
}

#[test]
fn convolutions_match_their_definition_on_odd_shapes() {
    let mut rng = Noise::new(41);
    let cases = [
        // pointwise, as the networks' 1x1 layers
        (shape(13, 7, 1, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)), 2, 5, 11),
        // depthwise 5x5 and 3x3, strides (2, 1), (1, 2), uneven padding
        (shape(9, 9, 9, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)), 2, 7, 13),
        (shape(6, 6, 6, (5, 5), (2, 1), (2, 2, 2, 2), (1, 1)), 1, 12, 9),
        (shape(5, 5, 5, (3, 3), (1, 2), (1, 1, 0, 1), (1, 1)), 3, 4, 17),
        (shape(4, 4, 4, (3, 3), (2, 2), (1, 1, 1, 1), (2, 2)), 1, 9, 10),
        // dense 3x3 stride 2, 1x3, and grouped
        (shape(3, 8, 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)), 2, 15, 21),
        (shape(7, 5, 1, (1, 3), (1, 1), (0, 1, 0, 1), (1, 1)), 1, 3, 19),
        (shape(6, 4, 2, (3, 2), (1, 1), (1, 0, 1, 1), (1, 2)), 2, 6, 7),
        // wide enough for whole blocks of sixteen columns and a remainder; strides and dilation
        (shape(7, 7, 7, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)), 2, 5, 45),
        (shape(3, 3, 3, (3, 3), (1, 2), (1, 1, 1, 0), (1, 2)), 1, 6, 70),
        (shape(4, 4, 4, (3, 5), (2, 3), (0, 2, 1, 1), (1, 1)), 1, 11, 101),
        // dense stride 1 with dilation, and large enough to split into several bands of rows
        (shape(5, 6, 1, (3, 3), (1, 1), (2, 1, 1, 2), (2, 1)), 2, 9, 11),
        (shape(40, 9, 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)), 1, 31, 300),
        // a kernel as wide as the padded input
        (shape(2, 3, 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)), 1, 1, 1),
        // no input channels: the bias alone
        (shape(0, 2, 1, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)), 1, 2, 3),
    ];
    for (s, n, h, w) in cases {
        let x = rng.uniform(n * s.c_in * h * w);
        let weight = rng.uniform(s.weight_len());
        let bias = rng.uniform(s.c_out);
        let (oh, ow) = s.out_size(h, w).expect("fits");
        let mut out = vec![f32::NAN; n * s.c_out * oh * ow];
        let seen = std::sync::Mutex::new(vec![0usize; s.c_out]);
        conv2d(&x, n, h, w, &weight, &bias, &s, &mut out, &|c, plane| {
            assert_eq!(plane.len(), oh * ow);
            seen.lock().expect("lock")[c] += 1;
        });
        assert_all_close(&format!("{s:?} on {n}x{h}x{w}"), &out, &conv2d_reference(&x, n, h, w, &weight, &bias, &s), 1e-5, 1e-5);
        assert!(seen.into_inner().expect("lock").iter().all(|&k| k == n), "{s:?}: each plane seen once");
    }
}

#[test]
fn the_epilogue_changes_the_output_and_no_bias_means_zero() {
    let s = shape(3, 3, 3, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1));
    let x = Noise::new(5).uniform(3 * 4 * 4);
    let weight = Noise::new(6).uniform(s.weight_len());
    let mut out = vec![0.0f32; 3 * 16];
    conv2d(&x, 1, 4, 4, &weight, &[], &s, &mut out, &|c, plane| plane.iter_mut().for_each(|v| *v = v.max(0.0) + c as f32));
    let want: Vec<f64> = conv2d_reference(&x, 1, 4, 4, &weight, &[], &s).iter().enumerate().map(|(i, v)| v.max(0.0) + (i / 16) as f64).collect();
    assert_all_close("relu plus channel", &out, &want, 1e-5, 1e-5);
}

#[test]
fn batched_products_match_plain_sums() {
    let mut rng = Noise::new(17);
    for (batch, m, k, n, shared) in
        [(3usize, 5usize, 7usize, 11usize, false), (4, 9, 13, 3, true), (1, 1, 1, 1, false), (6, 17, 8, 17, false), (2, 3, 0, 4, false)]
    {
        let a = rng.uniform(batch * m * k);
        let b = rng.uniform(if shared { k * n } else { batch * k * n });
        let mut out = vec![f32::NAN; batch * m * n];
        batched_matmul(&a, m * k, &b, if shared { 0 } else { k * n }, batch, m, k, n, &mut out);
        let mut want = vec![0.0f64; batch * m * n];
        for i in 0..batch {
            let bo = if shared { 0 } else { i * k * n };
            for r in 0..m {
                for c in 0..n {
                    want[(i * m + r) * n + c] = (0..k).map(|j| f64::from(a[(i * m + r) * k + j]) * f64::from(b[bo + j * n + c])).sum();
                }
            }
        }
        assert_all_close(&format!("{batch}x{m}x{k}x{n} shared {shared}"), &out, &want, 1e-5, 1e-5);
    }
}

#[test]
fn int8_pointwise_convolutions_equal_the_rounded_product_of_each_pixel() {
    let mut rng = Noise::new(43);
    for (n, c_in, c_out, plane) in [(2usize, 13usize, 7usize, 33usize), (1, 64, 70, 100), (3, 5, 1, 1), (1, 3, 65, 47), (1, 0, 3, 5)] {
        let x = rng.uniform(n * c_in * plane);
        let weight = rng.uniform(c_out * c_in);
        let bias = rng.uniform(c_out);
        let mut out = vec![f32::NAN; n * c_out * plane];
        pointwise_conv_int8(&x, n, c_in, plane, &weight, c_out, &bias, &mut out, &|c, p| p.iter_mut().for_each(|v| *v += c as f32));
        // The reference: each channel smoothed as the kernel does (divided by s = sqrt(its
        // largest value / its largest weight), its weights multiplied by s), then the filter's
        // rows times each pixel's channels (as weight rows), both rounded, through the plain
        // int8 product; and the packing from columns equal to packing the transposed pixels.
        let mut want = vec![0.0f64; out.len()];
        for image in 0..n {
            let img = &x[image * c_in * plane..(image + 1) * c_in * plane];
            let smooth: Vec<f32> = (0..c_in)
                .map(|c| {
                    let xm = img[c * plane..(c + 1) * plane].iter().fold(0.0f32, |m, v| m.max(v.abs()));
                    let wm = (0..c_out).fold(0.0f32, |m, o| m.max(weight[o * c_in + c].abs()));
                    if xm > 0.0 && wm > 0.0 { (xm / wm).sqrt() } else { 1.0 }
                })
                .collect();
            let smoothed_weight: Vec<f32> = weight.iter().enumerate().map(|(i, w)| w * smooth[i % c_in.max(1)]).collect();
            let pixel_rows: Vec<f32> = (0..plane).flat_map(|p| (0..c_in).map(move |c| (p, c))).map(|(p, c)| img[c * plane + p] * (1.0 / smooth[c])).collect();
            let mut sums = vec![0.0f32; c_out * plane];
            linear_int8_reference(&smoothed_weight, c_out, &pixel_rows, c_in, &vec![0.0; plane], &mut sums, false);
            let pixel_rows: Vec<f32> = (0..plane).flat_map(|p| (0..c_in).map(move |c| img[c * plane + p])).collect();
            let (mut a, mut b) = (vec![0.0f32; c_out * plane], vec![0.0f32; c_out * plane]);
            linear_int8(&weight, c_out, &Int8Weight::from_columns(img, c_in, plane), &vec![0.0; plane], &mut a, false);
            linear_int8(&weight, c_out, &Int8Weight::new(&pixel_rows, c_in, plane), &vec![0.0; plane], &mut b, false);
            assert_eq!(a, b, "packing from columns is packing the transpose");
            for c in 0..c_out {
                for p in 0..plane {
                    want[(image * c_out + c) * plane + p] = f64::from(sums[c * plane + p]) + f64::from(bias[c]) + c as f64;
                }
            }
        }
        assert_all_close(&format!("{n}x{c_in}->{c_out} over {plane}"), &out, &want, 1e-5, 1e-5);
        // And near the f32 convolution: rounding costs under 2 % of the sums' spread.
        let s = shape(c_in, c_out, 1, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1));
        let exact: Vec<f64> = conv2d_reference(&x, n, 1, plane, &weight, &bias, &s).iter().enumerate().map(|(i, v)| v + ((i / plane) % c_out) as f64).collect();
        let spread = exact.iter().map(|v| v.abs()).fold(0.0, f64::max);
        assert_all_close(&format!("{n}x{c_in}->{c_out} near f32"), &out, &exact, 0.0, 0.02 * spread + 1e-3);
    }
}
