//! The graph's operations other than convolution, with ONNX's (opset 11) semantics: numpy
//! broadcasting, shapes as integer tensors, softmax over a flattened tail.

use super::graph::{BinaryOp, ConvTransposeStep, Pointwise, PoolShape};
use super::{OcrError, Tensor, Value};

fn bad(message: String) -> OcrError {
    OcrError::Compute(message)
}

/// `axis` (negative counts from the end) as an index into `rank` dimensions.
fn axis_index(axis: i64, rank: usize) -> Result<usize, OcrError> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    usize::try_from(a).ok().filter(|&a| a < rank).ok_or_else(|| bad(format!("axis {axis} of a rank-{rank} tensor")))
}

/// Applies `chain` to one channel's values.
pub(super) fn apply_chain_plane(plane: &mut [f32], c: usize, chain: &[Pointwise]) {
    evident_kernels::apply_pointwise(plane, c, chain);
}

/// Applies `chain` to a whole tensor, channel being dimension 1.
pub(super) fn apply_chain(t: &mut Tensor, chain: &[Pointwise]) {
    let channels = t.shape.get(1).copied().unwrap_or(1).max(1);
    let plane = if t.shape.len() >= 2 { t.shape[2..].iter().product::<usize>().max(1) } else { t.data.len().max(1) };
    for (i, p) in t.data.chunks_mut(plane).enumerate() {
        apply_chain_plane(p, i % channels, chain);
    }
}

fn broadcast_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, OcrError> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| if i + s.len() >= rank { s[i + s.len() - rank] } else { 1 };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Ok(x),
            (1, y) => Ok(y),
            (x, 1) => Ok(x),
            _ => Err(bad(format!("shapes {a:?} and {b:?} do not broadcast"))),
        })
        .collect()
}

/// Row-major strides of `shape` seen as `out`'s rank, 0 along broadcast dimensions.
fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let pad = out.len() - shape.len();
    let mut strides = vec![0usize; out.len()];
    let mut step = 1;
    for i in (0..shape.len()).rev() {
        strides[pad + i] = if shape[i] == 1 { 0 } else { step };
        step *= shape[i];
    }
    strides
}

/// An element-wise operation of two tensors with numpy broadcasting.
pub(super) fn binary(a: &Tensor, b: &Tensor, op: BinaryOp) -> Result<Tensor, OcrError> {
    match op {
        BinaryOp::Add => binary_with(a, b, |x, y| x + y),
        BinaryOp::Sub => binary_with(a, b, |x, y| x - y),
        BinaryOp::Mul => binary_with(a, b, |x, y| x * y),
        BinaryOp::Div => binary_with(a, b, |x, y| x / y),
        BinaryOp::Pow => binary_with(a, b, |x, e| if e == 2.0 { x * x } else { x.powf(e) }),
    }
}

fn binary_with(a: &Tensor, b: &Tensor, f: impl Fn(f32, f32) -> f32) -> Result<Tensor, OcrError> {
    if a.shape == b.shape {
        return Ok(Tensor { shape: a.shape.clone(), data: a.data.iter().zip(&b.data).map(|(&x, &y)| f(x, y)).collect() });
    }
    let shape = broadcast_shape(&a.shape, &b.shape)?;
    // b one value per column of a's last axis (a bias after a product), repeated on every row.
    let row = a.shape.last().copied().unwrap_or(0);
    if shape == a.shape && row > 0 && b.data.len() == row && b.shape.last() == Some(&row) {
        let mut data = Vec::with_capacity(a.data.len());
        for chunk in a.data.chunks(row) {
            data.extend(chunk.iter().zip(&b.data).map(|(&x, &y)| f(x, y)));
        }
        return Ok(Tensor { shape, data });
    }
    // b one value per leading index of a (a scalar, or a channel's scale over its plane).
    if shape == a.shape && !b.data.is_empty() && a.data.len().is_multiple_of(b.data.len()) {
        let padded: Vec<usize> = std::iter::repeat_n(1, a.shape.len() - b.shape.len()).chain(b.shape.iter().copied()).collect();
        let lead = padded.iter().rposition(|&d| d != 1).map_or(0, |i| i + 1);
        if padded[..lead] == a.shape[..lead] {
            let block = a.data.len() / b.data.len();
            let mut data = Vec::with_capacity(a.data.len());
            for (chunk, &y) in a.data.chunks(block).zip(&b.data) {
                data.extend(chunk.iter().map(|&x| f(x, y)));
            }
            return Ok(Tensor { shape, data });
        }
    }
    let (sa, sb) = (broadcast_strides(&a.shape, &shape), broadcast_strides(&b.shape, &shape));
    let total: usize = shape.iter().product();
    let rank = shape.len();
    let last = shape.last().copied().unwrap_or(1).max(1);
    let (la, lb) = (sa.last().copied().unwrap_or(0), sb.last().copied().unwrap_or(0));
    let mut data = Vec::with_capacity(total);
    for outer in 0..total / last {
        let (mut oa, mut ob, mut rest) = (0, 0, outer);
        for d in (0..rank.saturating_sub(1)).rev() {
            let i = rest % shape[d];
            rest /= shape[d];
            oa += i * sa[d];
            ob += i * sb[d];
        }
        data.extend((0..last).map(|j| f(a.data[oa + j * la], b.data[ob + j * lb])));
    }
    Ok(Tensor { shape, data })
}

/// numpy's `matmul` for the shapes the networks use: a shared 2-D right side, or equal batches.
pub(super) fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor, OcrError> {
    let (ra, rb) = (a.shape.len(), b.shape.len());
    if ra < 2 || rb < 2 || a.shape[ra - 1] != b.shape[rb - 2] {
        return Err(bad(format!("matmul of {:?} and {:?}", a.shape, b.shape)));
    }
    let (m, k, n) = (a.shape[ra - 2], a.shape[ra - 1], b.shape[rb - 1]);
    let batch: usize = a.shape[..ra - 2].iter().product();
    let b_stride = if rb == 2 {
        0
    } else if a.shape[..ra - 2] == b.shape[..rb - 2] {
        k * n
    } else {
        return Err(bad(format!("matmul batches {:?} and {:?} differ", a.shape, b.shape)));
    };
    let mut out = vec![0.0f32; batch * m * n];
    evident_kernels::batched_matmul(&a.data, m * k, &b.data, b_stride, batch, m, k, n, &mut out);
    let mut shape = a.shape[..ra - 2].to_vec();
    shape.extend([m, n]);
    Ok(Tensor { shape, data: out })
}

/// `a` (… × `k`) times a constant `k` × `n` matrix held as 8-bit integers.
pub(super) fn linear_int8(a: &Tensor, weight: &evident_kernels::Int8Weight, k: usize, n: usize, bias: &[f32]) -> Result<Tensor, OcrError> {
    if a.shape.last() != Some(&k) {
        return Err(bad(format!("a product of {:?} with a {k} x {n} matrix", a.shape)));
    }
    let rows = a.data.len() / k.max(1);
    let mut out = vec![0.0f32; rows * n];
    evident_kernels::linear_int8(&a.data, rows, weight, bias, &mut out, false);
    let mut shape = a.shape.clone();
    *shape.last_mut().unwrap_or(&mut 0) = n;
    Ok(Tensor { shape, data: out })
}

/// Softmax as opset 11 defines it: over everything from `axis` on, taken as one row.
pub(super) fn softmax(t: &mut Tensor, axis: i64) -> Result<(), OcrError> {
    let axis = axis_index(axis, t.shape.len())?;
    evident_kernels::softmax_rows(&mut t.data, t.shape[axis..].iter().product());
    Ok(())
}

/// The mean over `axes`, which must be the last dimensions.
pub(super) fn reduce_mean(t: &Tensor, axes: &[i64], keep_dims: bool) -> Result<Tensor, OcrError> {
    let rank = t.shape.len();
    let mut axes: Vec<usize> = axes.iter().map(|&a| axis_index(a, rank)).collect::<Result<_, _>>()?;
    axes.sort_unstable();
    axes.dedup();
    if axes.is_empty() || axes.iter().enumerate().any(|(i, &a)| a != rank - axes.len() + i) {
        return Err(bad(format!("a mean over axes {axes:?} of a rank-{rank} tensor (only trailing axes are supported)")));
    }
    let first = axes[0];
    let row = t.shape[first..].iter().product::<usize>().max(1);
    let data = t.data.chunks(row).map(|r| r.iter().sum::<f32>() / row as f32).collect();
    let mut shape = t.shape[..first].to_vec();
    if keep_dims {
        shape.extend(std::iter::repeat_n(1, rank - first));
    }
    Ok(Tensor { shape, data })
}

fn nchw(t: &Tensor, what: &str) -> Result<[usize; 4], OcrError> {
    t.shape[..].try_into().map_err(|_| bad(format!("{what} of a tensor of shape {:?}", t.shape)))
}

/// Each channel's mean, as N × C × 1 × 1.
pub(super) fn global_average_pool(t: &Tensor) -> Result<Tensor, OcrError> {
    let [n, c, h, w] = nchw(t, "a global average pool")?;
    let plane = (h * w).max(1);
    Ok(Tensor { shape: vec![n, c, 1, 1], data: t.data.chunks(plane).map(|p| p.iter().sum::<f32>() / plane as f32).collect() })
}

/// Windowed means (floor of the output size, as with `ceil_mode` 0).
pub(super) fn average_pool(t: &Tensor, p: &PoolShape) -> Result<Tensor, OcrError> {
    let [n, c, h, w] = nchw(t, "an average pool")?;
    let (ph, pw) = (h + p.pad_begin.0 + p.pad_end.0, w + p.pad_begin.1 + p.pad_end.1);
    if ph < p.kernel.0 || pw < p.kernel.1 || p.stride.0 == 0 || p.stride.1 == 0 {
        return Err(bad(format!("an average pool of {:?} over {h} x {w}", p.kernel)));
    }
    let (oh, ow) = ((ph - p.kernel.0) / p.stride.0 + 1, (pw - p.kernel.1) / p.stride.1 + 1);
    let mut data = Vec::with_capacity(n * c * oh * ow);
    for plane in t.data.chunks(h * w) {
        for oy in 0..oh {
            for ox in 0..ow {
                let (y0, x0) = ((oy * p.stride.0) as isize - p.pad_begin.0 as isize, (ox * p.stride.1) as isize - p.pad_begin.1 as isize);
                let (mut sum, mut count) = (0.0f32, 0usize);
                for y in y0..y0 + p.kernel.0 as isize {
                    for x in x0..x0 + p.kernel.1 as isize {
                        if y >= 0 && x >= 0 && (y as usize) < h && (x as usize) < w {
                            sum += plane[y as usize * w + x as usize];
                            count += 1;
                        }
                    }
                }
                let divisor = if p.count_include_pad { p.kernel.0 * p.kernel.1 } else { count.max(1) };
                data.push(sum / divisor as f32);
            }
        }
    }
    Ok(Tensor { shape: vec![n, c, oh, ow], data })
}

/// Nearest-neighbour resizing with asymmetric coordinates rounded down, by `scales` (N, C, H, W).
pub(super) fn resize_nearest(t: &Tensor, scales: &Tensor) -> Result<Tensor, OcrError> {
    let [n, c, h, w] = nchw(t, "a resize")?;
    let [sn, sc, sh, sw] = scales.data[..] else { return Err(bad(format!("resize scales {:?}", scales.data))) };
    if sn != 1.0 || sc != 1.0 || sh <= 0.0 || sw <= 0.0 {
        return Err(bad(format!("resize scales {:?} (only height and width may change)", scales.data)));
    }
    let (oh, ow) = ((h as f32 * sh).floor() as usize, (w as f32 * sw).floor() as usize);
    let cols: Vec<usize> = (0..ow).map(|x| ((x as f32 / sw).floor() as usize).min(w - 1)).collect();
    let mut data = Vec::with_capacity(n * c * oh * ow);
    for plane in t.data.chunks(h * w) {
        for y in 0..oh {
            let row = &plane[((y as f32 / sh).floor() as usize).min(h - 1) * w..][..w];
            data.extend(cols.iter().map(|&x| row[x]));
        }
    }
    Ok(Tensor { shape: vec![n, c, oh, ow], data })
}

/// ONNX `ConvTranspose` (one group, no dilation): a product into columns, then each column
/// added where its tap lands.
pub(super) fn conv_transpose(x: &Tensor, s: &ConvTransposeStep) -> Result<Tensor, OcrError> {
    let [n, c, h, w] = nchw(x, "a transposed convolution")?;
    if c != s.c_in {
        return Err(bad(format!("a transposed convolution for {} channels got {c}", s.c_in)));
    }
    let (kh, kw) = s.kernel;
    let full_h = (h.max(1) - 1) * s.stride.0 + kh;
    let full_w = (w.max(1) - 1) * s.stride.1 + kw;
    let (oh, ow) = (full_h.saturating_sub(s.pad_begin.0 + s.pad_end.0), full_w.saturating_sub(s.pad_begin.1 + s.pad_end.1));
    let rows = s.c_out * kh * kw;
    let mut out = vec![0.0f32; n * s.c_out * oh * ow];
    let mut columns = vec![0.0f32; rows * h * w];
    for image in 0..n {
        evident_kernels::batched_matmul(&s.weight_t, 0, &x.data[image * c * h * w..(image + 1) * c * h * w], 0, 1, rows, c, h * w, &mut columns);
        let dst = &mut out[image * s.c_out * oh * ow..(image + 1) * s.c_out * oh * ow];
        for co in 0..s.c_out {
            let plane = &mut dst[co * oh * ow..(co + 1) * oh * ow];
            plane.fill(s.bias.get(co).copied().unwrap_or(0.0));
            for ky in 0..kh {
                for kx in 0..kw {
                    let col = &columns[((co * kh + ky) * kw + kx) * h * w..][..h * w];
                    for y in 0..h {
                        let Some(oy) = (y * s.stride.0 + ky).checked_sub(s.pad_begin.0).filter(|&v| v < oh) else { continue };
                        for xx in 0..w {
                            if let Some(ox) = (xx * s.stride.1 + kx).checked_sub(s.pad_begin.1).filter(|&v| v < ow) {
                                plane[oy * ow + ox] += col[y * w + xx];
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(Tensor { shape: vec![n, s.c_out, oh, ow], data: out })
}

/// Source index of every output element of a slice or transpose: `out_shape`'s elements read
/// from `start[d] + i·step[d]` along each dimension of a tensor with `strides`.
fn gather_indices(out_shape: &[usize], start: &[usize], step: &[usize], strides: &[usize]) -> Vec<usize> {
    let total: usize = out_shape.iter().product();
    let mut indices = Vec::with_capacity(total);
    let mut idx = vec![0usize; out_shape.len()];
    for _ in 0..total {
        indices.push(idx.iter().enumerate().map(|(d, &i)| (start[d] + i * step[d]) * strides[d]).sum());
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    indices
}

fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

fn gather(value: &Value, shape: Vec<usize>, indices: &[usize]) -> Value {
    match value {
        Value::Float(t) => Value::Float(Tensor { shape, data: indices.iter().map(|&i| t.data[i]).collect() }),
        Value::Int { data, .. } => Value::Int { shape, data: indices.iter().map(|&i| data[i]).collect() },
    }
}

/// ONNX `Slice` (opset 10+) with positive steps.
pub(super) fn slice(value: &Value, starts: &[i64], ends: &[i64], axes: Option<&[i64]>, steps: Option<&[i64]>) -> Result<Value, OcrError> {
    let shape = value.shape().to_vec();
    let rank = shape.len();
    if starts.len() != ends.len() {
        return Err(bad("a slice's starts and ends differ in length".into()));
    }
    let (mut start, mut step, mut out) = (vec![0usize; rank], vec![1usize; rank], shape.clone());
    for (i, (&s, &e)) in starts.iter().zip(ends).enumerate() {
        let axis = axis_index(axes.map_or(i as i64, |a| a.get(i).copied().unwrap_or(i as i64)), rank)?;
        let st = steps.and_then(|v| v.get(i).copied()).unwrap_or(1);
        if st < 1 {
            return Err(bad(format!("a slice step of {st} (only positive steps are supported)")));
        }
        let dim = shape[axis] as i64;
        let clamp = |v: i64| (if v < 0 { v + dim } else { v }).clamp(0, dim);
        let (b, e) = (clamp(s), clamp(e));
        start[axis] = b as usize;
        step[axis] = st as usize;
        out[axis] = if e > b { ((e - b + st - 1) / st) as usize } else { 0 };
    }
    let indices = gather_indices(&out, &start, &step, &strides_of(&shape));
    Ok(gather(value, out, &indices))
}

fn float_data(v: &Value) -> Result<&[f32], OcrError> {
    v.float().map(|t| &t.data[..])
}

/// Tensors joined along `axis`; all floats or all integers.
pub(super) fn concat(parts: &[&Value], axis: i64) -> Result<Value, OcrError> {
    let first = parts.first().ok_or_else(|| bad("a concatenation of nothing".into()))?;
    let rank = first.shape().len();
    let axis = axis_index(axis, rank)?;
    let mut shape = first.shape().to_vec();
    shape[axis] = 0;
    for p in parts {
        let s = p.shape();
        if s.len() != rank || s.iter().enumerate().any(|(d, &v)| d != axis && v != first.shape()[d]) {
            return Err(bad(format!("concatenating shapes {:?} and {s:?} along axis {axis}", first.shape())));
        }
        shape[axis] += s[axis];
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    macro_rules! join {
        ($get:expr, $wrap:expr) => {{
            let mut data = Vec::with_capacity(outer * shape[axis] * inner);
            for o in 0..outer {
                for p in parts {
                    let chunk = p.shape()[axis] * inner;
                    data.extend_from_slice(&$get(p)?[o * chunk..(o + 1) * chunk]);
                }
            }
            $wrap(data)
        }};
    }
    Ok(match first {
        Value::Float(_) => join!(float_data, |data| Value::Float(Tensor { shape: shape.clone(), data })),
        Value::Int { .. } => join!(Value::ints, |data| Value::Int { shape: shape.clone(), data }),
    })
}

/// The shape a `Reshape` to `spec` gives (0 keeps a dimension, -1 takes what is left).
pub(super) fn reshape_target(from: &[usize], spec: &[i64]) -> Result<Vec<usize>, OcrError> {
    let total: usize = from.iter().product();
    let mut shape: Vec<usize> = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &s) in spec.iter().enumerate() {
        match s {
            0 => shape.push(*from.get(i).ok_or_else(|| bad(format!("reshape {spec:?} keeps a dimension {from:?} lacks")))?),
            -1 if infer.is_none() => {
                infer = Some(i);
                shape.push(1);
            }
            s if s > 0 => shape.push(s as usize),
            _ => return Err(bad(format!("reshape to {spec:?}"))),
        }
    }
    if let Some(i) = infer {
        let known: usize = shape.iter().product();
        if known == 0 || !total.is_multiple_of(known) {
            return Err(bad(format!("reshape of {from:?} to {spec:?}")));
        }
        shape[i] = total / known;
    }
    Ok(shape)
}

/// `value` seen with another shape of as many elements.
pub(super) fn with_shape(value: Value, shape: Vec<usize>) -> Result<Value, OcrError> {
    if shape.iter().product::<usize>() != value.shape().iter().product::<usize>() {
        return Err(bad(format!("reshaping {:?} to {shape:?}", value.shape())));
    }
    Ok(match value {
        Value::Float(t) => Value::Float(Tensor { shape, data: t.data }),
        Value::Int { data, .. } => Value::Int { shape, data },
    })
}

/// The shape without the size-1 dimensions `axes`.
pub(super) fn squeezed(shape: &[usize], axes: &[i64]) -> Result<Vec<usize>, OcrError> {
    let axes: Vec<usize> = axes.iter().map(|&a| axis_index(a, shape.len())).collect::<Result<_, _>>()?;
    if axes.iter().any(|&a| shape[a] != 1) {
        return Err(bad(format!("squeezing axes {axes:?} of {shape:?}")));
    }
    Ok(shape.iter().enumerate().filter(|(d, _)| !axes.contains(d)).map(|(_, &v)| v).collect())
}

/// The shape with size-1 dimensions inserted at `axes` (of the result).
pub(super) fn unsqueezed(shape: &[usize], axes: &[i64]) -> Result<Vec<usize>, OcrError> {
    let rank = shape.len() + axes.len();
    let mut axes: Vec<usize> = axes.iter().map(|&a| axis_index(a, rank)).collect::<Result<_, _>>()?;
    axes.sort_unstable();
    let mut rest = shape.iter();
    Ok((0..rank).map(|d| if axes.contains(&d) { 1 } else { rest.next().copied().unwrap_or(1) }).collect())
}

/// The tensor with its dimensions reordered by `perm`.
pub(super) fn transpose(t: &Tensor, perm: &[usize]) -> Result<Tensor, OcrError> {
    let rank = t.shape.len();
    let mut seen = vec![false; rank];
    if perm.len() != rank || perm.iter().any(|&p| p >= rank || std::mem::replace(&mut seen[p], true)) {
        return Err(bad(format!("a transpose by {perm:?} of {:?}", t.shape)));
    }
    let strides = strides_of(&t.shape);
    let shape: Vec<usize> = perm.iter().map(|&p| t.shape[p]).collect();
    let perm_strides: Vec<usize> = perm.iter().map(|&p| strides[p]).collect();
    let indices = gather_indices(&shape, &vec![0; rank], &vec![1; rank], &perm_strides);
    Ok(Tensor { shape, data: indices.iter().map(|&i| t.data[i]).collect() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], data: &[f32]) -> Tensor {
        Tensor { shape: shape.to_vec(), data: data.to_vec() }
    }

    #[test]
    fn broadcasting_follows_numpy() {
        let a = t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let b = t(&[3], &[10., 20., 30.]);
        assert_eq!(binary(&a, &b, BinaryOp::Add).unwrap().data, vec![11., 22., 33., 14., 25., 36.]);
        let col = t(&[2, 1], &[2., 3.]);
        assert_eq!(binary(&a, &col, BinaryOp::Mul).unwrap().data, vec![2., 4., 6., 12., 15., 18.]);
        assert_eq!(binary(&col, &a, BinaryOp::Sub).unwrap().data, vec![1., 0., -1., -1., -2., -3.]);
        assert!(binary(&a, &t(&[2], &[1., 2.]), BinaryOp::Add).is_err());
        // One value per leading index (a channel's scale over its plane), and a scalar.
        let x = t(&[2, 2, 1, 2], &[1., 2., 3., 4., 5., 6., 7., 8.]);
        assert_eq!(binary(&x, &t(&[2, 2, 1, 1], &[1., 10., 100., 1000.]), BinaryOp::Mul).unwrap().data, vec![1., 2., 30., 40., 500., 600., 7000., 8000.]);
        assert_eq!(binary(&x, &t(&[2, 1, 1], &[0., 1.]), BinaryOp::Add).unwrap().data, vec![1., 2., 4., 5., 5., 6., 8., 9.]);
        assert_eq!(binary(&x, &t(&[1], &[2.]), BinaryOp::Pow).unwrap().data, vec![1., 4., 9., 16., 25., 36., 49., 64.]);
    }

    #[test]
    fn shapes_slice_reshape_and_transpose() {
        let shape = Value::Int { shape: vec![4], data: vec![6, 120, 1, 40] };
        let Value::Int { data, .. } = slice(&shape, &[2], &[i64::MAX], Some(&[0]), None).unwrap() else { panic!("ints") };
        assert_eq!(data, vec![1, 40]);
        assert_eq!(reshape_target(&[6, 120, 1, 40], &[0, -1, 40]).unwrap(), vec![6, 120, 40]);
        assert!(reshape_target(&[6, 5], &[-1, 7]).is_err());
        let x = t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        assert_eq!(transpose(&x, &[1, 0]).unwrap().data, vec![1., 4., 2., 5., 3., 6.]);
        let Value::Float(s) = slice(&Value::Float(x), &[1, 0], &[3, 2], Some(&[1, 0]), Some(&[1, 1])).unwrap() else { panic!("floats") };
        assert_eq!((s.shape, s.data), (vec![2, 2], vec![2., 3., 5., 6.]));
        assert_eq!(unsqueezed(&[3, 4], &[0, 3]).unwrap(), vec![1, 3, 4, 1]);
        assert_eq!(squeezed(&[1, 3, 1, 4], &[2]).unwrap(), vec![1, 3, 4]);
    }

    #[test]
    fn softmax_and_means_over_the_tail() {
        let mut x = t(&[1, 2, 2], &[0., 0., 1., 3.]);
        softmax(&mut x, 2).unwrap();
        assert!((x.data[0] - 0.5).abs() < 1e-6 && (x.data[3] - 0.880_797).abs() < 1e-5);
        assert_eq!(reduce_mean(&t(&[2, 2], &[1., 3., 5., 9.]), &[-1], true).unwrap(), t(&[2, 1], &[2., 7.]));
        let p = PoolShape { kernel: (2, 2), stride: (2, 2), pad_begin: (0, 0), pad_end: (0, 0), count_include_pad: false };
        assert_eq!(average_pool(&t(&[1, 1, 2, 3], &[1., 2., 3., 4., 5., 6.]), &p).unwrap().data, vec![3.]);
        let up = resize_nearest(&t(&[1, 1, 1, 2], &[1., 2.]), &t(&[4], &[1., 1., 2., 2.])).unwrap();
        assert_eq!((up.shape, up.data), (vec![1, 1, 2, 4], vec![1., 1., 2., 2., 1., 1., 2., 2.]));
    }
}
