//! Image convolutions and batched matrix products on the CPU, for the OCR networks' native path.
//!
//! Tensors are NCHW, row-major. A 1x1 convolution is one matrix product per image; a depthwise
//! one (a filter per channel) is summed directly (`depthwise_cpu`); another of stride 1 and one
//! group is a product per filter tap with the shifted input; any other runs as im2col then a
//! matrix product. Each output channel's plane is
//! handed to an epilogue as soon as it is done, so the activations that follow a convolution
//! cost no extra pass over memory.

use gemm::{Parallelism, gemm};
use rayon::prelude::*;

use crate::dense_int8::{Int8Weight, linear_int8};
use crate::depthwise_cpu::depthwise;

/// A 2-D convolution's geometry (ONNX `Conv` attributes, with the input's channels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvShape {
    pub c_in: usize,
    pub c_out: usize,
    pub groups: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: (usize, usize),
    /// Padding before the first row and column.
    pub pad_begin: (usize, usize),
    /// Padding after the last row and column.
    pub pad_end: (usize, usize),
    pub dilation: (usize, usize),
}

impl ConvShape {
    /// The output's height and width for an input of `h` × `w` (None when the kernel does not fit).
    pub fn out_size(&self, h: usize, w: usize) -> Option<(usize, usize)> {
        let span_h = self.dilation.0 * (self.kh.max(1) - 1) + 1;
        let span_w = self.dilation.1 * (self.kw.max(1) - 1) + 1;
        let ph = h + self.pad_begin.0 + self.pad_end.0;
        let pw = w + self.pad_begin.1 + self.pad_end.1;
        if ph < span_h || pw < span_w || self.stride.0 == 0 || self.stride.1 == 0 {
            return None;
        }
        Some(((ph - span_h) / self.stride.0 + 1, (pw - span_w) / self.stride.1 + 1))
    }

    /// Input channels each filter reads.
    pub fn c_in_per_group(&self) -> usize {
        self.c_in / self.groups.max(1)
    }

    /// Values in the weight tensor (`c_out` × `c_in / groups` × `kh` × `kw`).
    pub fn weight_len(&self) -> usize {
        self.c_out * self.c_in_per_group() * self.kh * self.kw
    }

    fn is_valid(&self) -> bool {
        self.groups > 0
            && self.c_in.is_multiple_of(self.groups)
            && self.c_out.is_multiple_of(self.groups)
            && self.kh > 0
            && self.kw > 0
            && self.dilation.0 > 0
            && self.dilation.1 > 0
    }
}

/// What runs on each output plane once it is computed: the plane's channel, then its values.
pub type PlaneEpilogue<'a> = &'a (dyn Fn(usize, &mut [f32]) + Sync);

/// `out` (`n` × `c_out` × oh × ow) = the convolution of `x` (`n` × `c_in` × `h` × `w`) with
/// `weight` plus `bias` (one per output channel, or empty), then `epilogue` on each plane.
#[allow(clippy::too_many_arguments)]
pub fn conv2d(x: &[f32], n: usize, h: usize, w: usize, weight: &[f32], bias: &[f32], s: &ConvShape, out: &mut [f32], epilogue: PlaneEpilogue<'_>) {
    assert!(s.is_valid(), "a convolution's groups divide its channels: {s:?}");
    let (oh, ow) = s.out_size(h, w).expect("the kernel fits the padded input");
    assert_eq!(x.len(), n * s.c_in * h * w, "input is n × c_in × h × w");
    assert_eq!(weight.len(), s.weight_len(), "weight is c_out × c_in/groups × kh × kw");
    assert!(bias.is_empty() || bias.len() == s.c_out, "one bias per output channel");
    assert_eq!(out.len(), n * s.c_out * oh * ow, "output is n × c_out × oh × ow");
    let plane = oh * ow;
    if plane == 0 || n == 0 || s.c_out == 0 {
        return;
    }
    let bias_of = |c: usize| bias.get(c).copied().unwrap_or(0.0);
    if s.groups == s.c_in && s.groups == s.c_out {
        depthwise(x, h, w, weight, s, (oh, ow), out, &|c, p| {
            let b = bias_of(c);
            p.iter_mut().for_each(|v| *v += b);
            epilogue(c, p)
        });
        return;
    }
    let pointwise = s.kh == 1 && s.kw == 1 && s.stride == (1, 1) && s.pad_begin == (0, 0) && s.pad_end == (0, 0);
    if !pointwise && s.groups == 1 && s.stride == (1, 1) && s.c_in > 0 {
        for (image, dst) in out.chunks_mut(s.c_out * plane).enumerate() {
            shifted_taps(&x[image * s.c_in * h * w..(image + 1) * s.c_in * h * w], h, w, weight, s, (oh, ow), dst);
            finish_planes(dst, plane, bias, epilogue);
        }
        return;
    }
    let cg = s.c_in_per_group();
    let og = s.c_out / s.groups;
    let k = cg * s.kh * s.kw;
    let mut columns = if pointwise { Vec::new() } else { vec![0.0f32; k * plane] };
    // Images one after the other, each product split across the cores (splitting the batch
    // instead measured no faster); bias and epilogue run on an image's planes while they are warm.
    for (image, dst) in out.chunks_mut(s.c_out * plane).enumerate() {
        for g in 0..s.groups {
            let input = &x[(image * s.c_in + g * cg) * h * w..(image * s.c_in + (g + 1) * cg) * h * w];
            let rhs: &[f32] = if pointwise {
                input
            } else {
                im2col(input, cg, h, w, s, (oh, ow), &mut columns);
                &columns
            };
            let lhs = &weight[g * og * k..(g + 1) * og * k];
            // SAFETY: lhs is og × k, rhs is k × plane and the destination og × plane, all
            // row-major and of exactly those lengths (checked above or built so).
            unsafe { product(og, plane, k, &mut dst[g * og * plane..(g + 1) * og * plane], lhs, rhs, false, true) };
        }
        finish_planes(dst, plane, bias, epilogue);
    }
}

/// A 1x1 convolution (one group, stride 1, no padding) in 8-bit integers, straight in NCHW:
/// each image's pixels (`c_in` × `plane` of `x`), smoothed per channel, are rounded per pixel
/// and packed as the [`linear_int8`] weight (one output per pixel), and the filter (`c_out` ×
/// `c_in`, `weight`, the smoothing folded in) is its input, rounded per output channel; so
/// `out` (`n` × `c_out` × `plane`) comes out in place, then `bias` and `epilogue` run on each
/// plane.
#[allow(clippy::too_many_arguments)]
pub fn pointwise_conv_int8(
    x: &[f32],
    n: usize,
    c_in: usize,
    plane: usize,
    weight: &[f32],
    c_out: usize,
    bias: &[f32],
    out: &mut [f32],
    epilogue: PlaneEpilogue<'_>,
) {
    assert_eq!(x.len(), n * c_in * plane, "input is n × c_in × plane");
    assert_eq!(weight.len(), c_out * c_in, "the filter is c_out × c_in");
    assert!(bias.is_empty() || bias.len() == c_out, "one bias per output channel");
    assert_eq!(out.len(), n * c_out * plane, "output is n × c_out × plane");
    if plane == 0 || c_out == 0 {
        return;
    }
    let zeros = vec![0.0f32; plane];
    // Each input channel's largest filter weight, for the smoothing below.
    let mut w_max = vec![0.0f32; c_in];
    for row in weight.chunks(c_in.max(1)) {
        w_max.iter_mut().zip(row).for_each(|(m, v)| *m = m.max(v.abs()));
    }
    let mut smoothed_weight = vec![0.0f32; weight.len()];
    for (image, dst) in out.chunks_mut(c_out * plane).enumerate() {
        // A pixel's channels share one scale when rounded, so one loud channel would flatten
        // the rest: each channel is divided by s = sqrt(its largest value / its largest
        // weight) and its weights multiplied by s (SmoothQuant's migration, alpha 0.5, taken
        // from this image), which leaves the exact product unchanged.
        let img = &x[image * c_in * plane..(image + 1) * c_in * plane];
        let s: Vec<f32> = img
            .par_chunks(plane)
            .zip(&w_max)
            .map(|(channel, &wm)| {
                let xm = largest_magnitude(channel);
                if xm > 0.0 && wm > 0.0 { (xm / wm).sqrt() } else { 1.0 }
            })
            .collect();
        for (d, w) in smoothed_weight.chunks_mut(c_in.max(1)).zip(weight.chunks(c_in.max(1))) {
            d.iter_mut().zip(w).zip(&s).for_each(|((d, w), s)| *d = w * s);
        }
        let inv: Vec<f32> = s.iter().map(|s| 1.0 / s).collect();
        let pixels = Int8Weight::from_scaled_columns(img, c_in, plane, &inv);
        linear_int8(&smoothed_weight, c_out, &pixels, &zeros, dst, false);
        finish_planes(dst, plane, bias, epilogue);
    }
}

/// Adds each output plane's bias (none when `bias` is empty), then runs the epilogue on it,
/// the planes in parallel while they are warm.
fn finish_planes(dst: &mut [f32], plane: usize, bias: &[f32], epilogue: PlaneEpilogue<'_>) {
    dst.par_chunks_mut(plane).enumerate().for_each(|(c, p)| {
        if let Some(&b) = bias.get(c) {
            p.iter_mut().for_each(|v| *v += b);
        }
        epilogue(c, p)
    });
}

/// The largest |v| of `values`, in sixteen running maxima the compiler can keep in one vector
/// (a single running maximum would be one comparison after another).
fn largest_magnitude(values: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    let mut chunks = values.chunks_exact(16);
    for chunk in &mut chunks {
        for (m, v) in lanes.iter_mut().zip(chunk) {
            let a = v.abs();
            *m = if a > *m { a } else { *m };
        }
    }
    chunks.remainder().iter().map(|v| v.abs()).chain(lanes).fold(0.0f32, |m, a| if a > m { a } else { m })
}

/// `dst (m × n) = lhs (m × k) · rhs (k × n)`, all row-major, plus `dst`'s values when
/// `accumulate`; split across threads when `parallel` and the product is large enough.
#[allow(clippy::too_many_arguments)]
unsafe fn product(m: usize, n: usize, k: usize, dst: &mut [f32], lhs: &[f32], rhs: &[f32], accumulate: bool, parallel: bool) {
    debug_assert!(dst.len() == m * n && lhs.len() == m * k && rhs.len() == k * n);
    if k == 0 {
        if !accumulate {
            dst.fill(0.0);
        }
        return;
    }
    let parallelism = if parallel && m * n * k >= 1 << 16 { Parallelism::Rayon(0) } else { Parallelism::None };
    // SAFETY: see the caller; strides are (column, row) pairs of row-major matrices.
    unsafe {
        gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            lhs.as_ptr(),
            1,
            k as isize,
            rhs.as_ptr(),
            1,
            n as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// Padded input a band of output rows reads, in floats: sized so that a band's input rows,
/// for every channel, stay in a core's L2 cache while each filter tap reads them again.
const BAND_FLOATS: usize = 96 * 1024;

/// A stride-1 convolution of one image (`c_in` × `h` × `w`, one group) as a sum over filter
/// taps of products with the padded input shifted by the tap: output pixel (y, x), counted in
/// rows of the padded width, reads padded pixel (y + ky, x + kx), so each tap's product reads
/// the padded input in place (no im2col copy, which for the detector's 3x3 layers was nine
/// times its input). Output rows go in bands, one per task, each band's columns past `ow`
/// computed and dropped.
fn shifted_taps(input: &[f32], h: usize, w: usize, weight: &[f32], s: &ConvShape, (oh, ow): (usize, usize), dst: &mut [f32]) {
    let (hp, wp) = (h + s.pad_begin.0 + s.pad_end.0, w + s.pad_begin.1 + s.pad_end.1);
    let padded_input;
    let padded: &[f32] = if (hp, wp) == (h, w) {
        input
    } else {
        let mut p = vec![0.0f32; s.c_in * hp * wp];
        for (c, channel) in input.chunks_exact(h * w).enumerate() {
            for (iy, row) in channel.chunks_exact(w).enumerate() {
                let at = (c * hp + iy + s.pad_begin.0) * wp + s.pad_begin.1;
                p[at..at + w].copy_from_slice(row);
            }
        }
        padded_input = p;
        &padded_input
    };
    let span = s.dilation.0 * (s.kh - 1) + 1;
    let fitting = (BAND_FLOATS / (s.c_in * wp).max(1)).saturating_sub(span - 1).max(1);
    let rows_per_band = fitting.min(oh.div_ceil(2 * rayon::current_num_threads())).max(1);
    let band_len = s.c_out * rows_per_band * wp;
    let mut wide = vec![0.0f32; oh.div_ceil(rows_per_band) * band_len];
    let taps = s.kh * s.kw;
    wide.par_chunks_mut(band_len).enumerate().for_each(|(band, buffer)| {
        let y0 = band * rows_per_band;
        let rows = rows_per_band.min(oh - y0);
        let n = (rows - 1) * wp + ow;
        for tap in 0..taps {
            let (ky, kx) = (tap / s.kw, tap % s.kw);
            let offset = (y0 + ky * s.dilation.0) * wp + kx * s.dilation.1;
            // SAFETY: the destination is c_out rows of n values `rows_per_band · wp` apart in
            // `buffer`; the filter's tap is c_out × c_in, `c_in·taps` and `taps` apart in
            // `weight`; the input is c_in rows of n values `hp·wp` apart from `offset`, whose
            // last value, (y0 + rows - 1 + (kh - 1)·dilation) · wp + (kw - 1)·dilation + ow - 1,
            // is at most hp·wp - 1 since the output's size is the padded size less the span.
            unsafe {
                gemm(
                    s.c_out,
                    n,
                    s.c_in,
                    buffer.as_mut_ptr(),
                    1,
                    (rows_per_band * wp) as isize,
                    tap > 0,
                    weight.as_ptr().add(tap),
                    taps as isize,
                    (s.c_in * taps) as isize,
                    padded.as_ptr().add(offset),
                    1,
                    (hp * wp) as isize,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    Parallelism::None,
                );
            }
        }
    });
    dst.par_chunks_mut(oh * ow).enumerate().for_each(|(c, plane)| {
        for (oy, line) in plane.chunks_exact_mut(ow).enumerate() {
            let at = (oy / rows_per_band) * band_len + (c * rows_per_band + oy % rows_per_band) * wp;
            line.copy_from_slice(&wide[at..at + ow]);
        }
    });
}

/// The columns of one group's input: row `(c, ky, kx)` holds, for each output pixel, the input
/// value its filter tap reads (zero in the padding).
fn im2col(input: &[f32], channels: usize, h: usize, w: usize, s: &ConvShape, (oh, ow): (usize, usize), columns: &mut [f32]) {
    columns.par_chunks_mut(oh * ow).enumerate().for_each(|(row, dst)| {
        let c = row / (s.kh * s.kw);
        let (ky, kx) = ((row / s.kw) % s.kh, row % s.kw);
        debug_assert!(c < channels);
        let src = &input[c * h * w..(c + 1) * h * w];
        for oy in 0..oh {
            let line = &mut dst[oy * ow..(oy + 1) * ow];
            let iy = (oy * s.stride.0 + ky * s.dilation.0) as isize - s.pad_begin.0 as isize;
            if iy < 0 || iy >= h as isize {
                line.fill(0.0);
                continue;
            }
            let src_row = &src[iy as usize * w..(iy as usize + 1) * w];
            for (ox, v) in line.iter_mut().enumerate() {
                let ix = (ox * s.stride.1 + kx * s.dilation.1) as isize - s.pad_begin.1 as isize;
                *v = if ix >= 0 && (ix as usize) < w { src_row[ix as usize] } else { 0.0 };
            }
        }
    });
}

/// The convolution summed in f64 straight from its definition, for tests.
pub fn conv2d_reference(x: &[f32], n: usize, h: usize, w: usize, weight: &[f32], bias: &[f32], s: &ConvShape) -> Vec<f64> {
    let (oh, ow) = s.out_size(h, w).expect("the kernel fits the padded input");
    let (cg, og) = (s.c_in_per_group(), s.c_out / s.groups);
    let mut out = vec![0.0f64; n * s.c_out * oh * ow];
    for image in 0..n {
        for co in 0..s.c_out {
            let g = co / og;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut sum = bias.get(co).map_or(0.0, |&b| f64::from(b));
                    for ci in 0..cg {
                        for ky in 0..s.kh {
                            for kx in 0..s.kw {
                                let iy = (oy * s.stride.0 + ky * s.dilation.0) as isize - s.pad_begin.0 as isize;
                                let ix = (ox * s.stride.1 + kx * s.dilation.1) as isize - s.pad_begin.1 as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                    continue;
                                }
                                let v = x[((image * s.c_in + g * cg + ci) * h + iy as usize) * w + ix as usize];
                                let k = weight[((co * cg + ci) * s.kh + ky) * s.kw + kx];
                                sum += f64::from(v) * f64::from(k);
                            }
                        }
                    }
                    out[((image * s.c_out + co) * oh + oy) * ow + ox] = sum;
                }
            }
        }
    }
    out
}

/// `out[b] = a[b] (m × k) · b[b] (k × n)` for `batch` pairs, row-major; a side whose batch
/// stride is 0 is the same matrix for every pair (a weight shared by a batch).
#[allow(clippy::too_many_arguments)]
pub fn batched_matmul(a: &[f32], a_stride: usize, b: &[f32], b_stride: usize, batch: usize, m: usize, k: usize, n: usize, out: &mut [f32]) {
    assert_eq!(out.len(), batch * m * n, "output is batch × m × n");
    assert!(batch == 0 || a.len() >= (batch - 1) * a_stride + m * k, "a holds batch × m × k");
    assert!(batch == 0 || b.len() >= (batch - 1) * b_stride + k * n, "b holds batch × k × n");
    if m * n == 0 {
        return;
    }

    if a_stride == m * k && b_stride == 0 {
        // One weight for every pair: a single product over all the rows at once.
        // SAFETY: a is (batch·m) × k, b is k × n and out (batch·m) × n, row-major.
        unsafe { product(batch * m, n, k, out, &a[..batch * m * k], &b[..k * n], false, true) };
        return;
    }
    out.par_chunks_mut(m * n).enumerate().for_each(|(i, dst)| {
        let lhs = &a[i * a_stride..i * a_stride + m * k];
        let rhs = &b[i * b_stride..i * b_stride + k * n];
        // SAFETY: lhs m × k, rhs k × n, dst m × n, row-major slices of those lengths.
        unsafe { product(m, n, k, dst, lhs, rhs, false, batch == 1) };
    });
}
