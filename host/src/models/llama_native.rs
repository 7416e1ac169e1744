//! The Llama decoder on the CPU: the prompt pass as f32 matrix products, and one-token decoding
//! steps with the weights left quantised.
//!
//! A prompt multiplies every weight by many rows at once, so it is bound by arithmetic and runs
//! as gemm on f32 copies of the weights. A single new token is different: each weight is read
//! once, so the step costs what the weights weigh, and f32 weights are six times Q4_1's; steps
//! read the GGUF blocks directly. Both compute the same network as burn's `Llama::forward`,
//! which the tests check.

use evident_kernels::{
    BlockEncoding, GroupedShape, QuantMatrix, Weight, causal_attention, linear, rms_norm, rotary_angles, rotate_pairs, silu_gate,
};

use super::ModelError;
use super::gguf::{GgufError, GgufFile, TensorEncoding};
use super::llama::{KvCache, KvState, LlamaConfig, LogitsFor};

/// A layer's matrices as f32, `out` rows of `inp` (GGUF's order), for the prompt pass.
struct DenseLayer {
    qkv: Vec<f32>,
    wo: Vec<f32>,
    gate_up: Vec<f32>,
    down: Vec<f32>,
}

struct Layer {
    attn_norm: Vec<f32>,
    /// Query, key and value rows stacked: one product per step instead of three.
    qkv: QuantMatrix,
    wo: QuantMatrix,
    ffn_norm: Vec<f32>,
    /// Gate and up rows stacked.
    gate_up: QuantMatrix,
    down: QuantMatrix,
    dense: DenseLayer,
}

/// The decoder's weights: in their stored encoding for single-token steps, and as f32 for the
/// prompt pass.
pub struct NativeDecoder {
    config: LlamaConfig,
    embedding: QuantMatrix,
    layers: Vec<Layer>,
    output_norm: Vec<f32>,
    lm_head: QuantMatrix,
}

/// The `[rows, cols]` matrix `name`, in its stored encoding where the kernels have a fast path.
fn matrix(file: &GgufFile, name: &str, rows: usize, cols: usize) -> Result<QuantMatrix, GgufError> {
    let info = file.tensor(name)?;
    if info.dims != [cols, rows] {
        return Err(GgufError::Format(format!("tensor {name} has shape {:?}, expected [{cols}, {rows}]", info.dims)));
    }
    let encoding = match info.encoding {
        TensorEncoding::Q4_0 => Some(BlockEncoding::Q4_0),
        TensorEncoding::Q4_1 => Some(BlockEncoding::Q4_1),
        TensorEncoding::Q8_0 => Some(BlockEncoding::Q8_0),
        _ => None,
    };
    let built = match encoding {
        Some(e) => QuantMatrix::from_gguf_blocks(e, rows, cols, file.raw_bytes(name)?),
        None => QuantMatrix::from_f32(rows, cols, file.dequantize(name)?),
    };
    built.map_err(|e| GgufError::Format(format!("tensor {name}: {e}")))
}

impl NativeDecoder {
    /// Reads the weights of `config`'s network from `file`: as stored, and as f32.
    pub fn load(file: &GgufFile, config: &LlamaConfig) -> Result<NativeDecoder, ModelError> {
        let c = config;
        let (d, f, kv) = (c.dim, c.ffn_dim, c.kv_heads * c.head_dim());
        let matrix = |name: &str, rows, cols| matrix(file, name, rows, cols);
        let mut layers = Vec::with_capacity(c.layers);
        for l in 0..c.layers {
            let p = |name: &str| format!("blk.{l}.{name}.weight");
            let stack = |parts: &[QuantMatrix]| QuantMatrix::stack(parts).map_err(|e| ModelError::Config(format!("layer {l}: {e}")));
            layers.push(Layer {
                attn_norm: file.dequantize(&p("attn_norm"))?,
                qkv: stack(&[matrix(&p("attn_q"), d, d)?, matrix(&p("attn_k"), kv, d)?, matrix(&p("attn_v"), kv, d)?])?,
                wo: matrix(&p("attn_output"), d, d)?,
                ffn_norm: file.dequantize(&p("ffn_norm"))?,
                gate_up: stack(&[matrix(&p("ffn_gate"), f, d)?, matrix(&p("ffn_up"), f, d)?])?,
                down: matrix(&p("ffn_down"), d, f)?,
                dense: DenseLayer {
                    qkv: [file.dequantize(&p("attn_q"))?, file.dequantize(&p("attn_k"))?, file.dequantize(&p("attn_v"))?].concat(),
                    wo: file.dequantize(&p("attn_output"))?,
                    gate_up: [file.dequantize(&p("ffn_gate"))?, file.dequantize(&p("ffn_up"))?].concat(),
                    down: file.dequantize(&p("ffn_down"))?,
                },
            });
        }
        let head = if file.tensors.contains_key("output.weight") { "output.weight" } else { "token_embd.weight" };
        Ok(NativeDecoder {
            embedding: matrix("token_embd.weight", c.vocab, d)?,
            lm_head: matrix(head, c.vocab, d)?,
            layers,
            output_norm: file.dequantize("output_norm.weight")?,
            config: config.clone(),
        })
    }

    /// Runs `tokens` after those in `cache` (which grows by them) as one batch of matrix products
    /// and returns next-token logits, `[positions × vocab]`, for the last token or for each.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache, which: LogitsFor) -> Result<Vec<f32>, ModelError> {
        let c = &self.config;
        let (s, start) = (tokens.len(), cache.len);
        c.check_pass(start, tokens)?;
        let mut kv = cache.take_host()?;
        if kv.is_empty() {
            kv = (0..c.layers).map(|_| (Vec::new(), Vec::new())).collect();
        }
        let (d, f, hd) = (c.dim, c.ffn_dim, c.head_dim());
        let kv_dim = c.kv_heads * hd;
        let qkv_width = d + 2 * kv_dim;
        let shape = GroupedShape { heads: c.heads, kv_heads: c.kv_heads, head_dim: hd };
        let (cos, sin) = rotary_angles(start..start + s, hd, c.rope_base);
        let no_bias = vec![0.0; qkv_width.max(2 * f)];
        let mut x: Vec<f32> = tokens.iter().flat_map(|&t| self.embedding.row(t as usize)).collect();
        let mut h = vec![0.0; s * d];
        let mut qkv = vec![0.0; s * qkv_width];
        let mut ctx = vec![0.0; s * d];
        let mut gate_up = vec![0.0; s * 2 * f];
        let mut gated = vec![0.0; s * f];
        for (layer, (ck, cv)) in self.layers.iter().zip(kv.iter_mut()) {
            let w = &layer.dense;
            rms_norm(&x, &layer.attn_norm, c.norm_eps, &mut h);
            linear(&h, s, Weight { values: &w.qkv, inp: d, out: qkv_width }, &no_bias[..qkv_width], &mut qkv, false);
            // Queries and keys sit side by side at the start of each row: one rotation for both.
            rotate_pairs(&mut qkv, qkv_width, d + kv_dim, hd, &cos, &sin);
            for row in qkv.chunks_exact(qkv_width) {
                ck.extend_from_slice(&row[d..d + kv_dim]);
                cv.extend_from_slice(&row[d + kv_dim..]);
            }
            causal_attention(&qkv, qkv_width, ck, cv, shape, &mut ctx);
            // The residual connections are added by the products themselves (accumulate).
            linear(&ctx, s, Weight { values: &w.wo, inp: d, out: d }, &no_bias[..d], &mut x, true);
            rms_norm(&x, &layer.ffn_norm, c.norm_eps, &mut h);
            linear(&h, s, Weight { values: &w.gate_up, inp: d, out: 2 * f }, &no_bias[..2 * f], &mut gate_up, false);
            silu_gate(&gate_up, f, &mut gated);
            linear(&gated, s, Weight { values: &w.down, inp: f, out: d }, &no_bias[..d], &mut x, true);
        }
        cache.state = KvState::Host(kv);
        cache.len = start + s;
        let rows = match which {
            LogitsFor::Last => s - 1..s,
            LogitsFor::All => 0..s,
        };
        let mut logits = vec![0.0; rows.len() * c.vocab];
        let mut normed = vec![0.0; d];
        for (row, out) in rows.zip(logits.chunks_exact_mut(c.vocab)) {
            rms_norm(&x[row * d..(row + 1) * d], &self.output_norm, c.norm_eps, &mut normed);
            self.lm_head.matvec(&normed, out);
        }
        Ok(logits)
    }

    /// Runs one token after those in `cache` (which grows by it) and returns its next-token logits.
    pub fn step(&self, token: u32, cache: &mut KvCache) -> Result<Vec<f32>, ModelError> {
        let c = &self.config;
        let pos = cache.len;
        c.check_pass(pos, &[token])?;
        let mut kv = cache.take_host()?;
        if kv.is_empty() {
            kv = (0..c.layers).map(|_| (Vec::new(), Vec::new())).collect();
        }
        let hd = c.head_dim();
        let kv_dim = c.kv_heads * hd;
        let shape = GroupedShape { heads: c.heads, kv_heads: c.kv_heads, head_dim: hd };
        let (cos, sin) = rotary_angles(pos..pos + 1, hd, c.rope_base);
        let mut x = self.embedding.row(token as usize);
        let mut h = vec![0.0; c.dim];
        let mut qkv = vec![0.0; c.dim + 2 * kv_dim];
        let mut ctx = vec![0.0; c.dim];
        let mut proj = vec![0.0; c.dim];
        let mut gate_up = vec![0.0; 2 * c.ffn_dim];
        let mut gated = vec![0.0; c.ffn_dim];
        let t = pos + 1;
        for (layer, (ck, cv)) in self.layers.iter().zip(kv.iter_mut()) {
            rms_norm(&x, &layer.attn_norm, c.norm_eps, &mut h);
            layer.qkv.matvec(&h, &mut qkv);
            let width = qkv.len();
            rotate_pairs(&mut qkv, width, c.dim + kv_dim, hd, &cos, &sin);
            ck.extend_from_slice(&qkv[c.dim..c.dim + kv_dim]);
            cv.extend_from_slice(&qkv[c.dim + kv_dim..]);
            causal_attention(&qkv, width, ck, cv, shape, &mut ctx);
            layer.wo.matvec(&ctx, &mut proj);
            x.iter_mut().zip(&proj).for_each(|(a, b)| *a += b);
            rms_norm(&x, &layer.ffn_norm, c.norm_eps, &mut h);
            layer.gate_up.matvec(&h, &mut gate_up);
            silu_gate(&gate_up, c.ffn_dim, &mut gated);
            layer.down.matvec(&gated, &mut proj);
            x.iter_mut().zip(&proj).for_each(|(a, b)| *a += b);
        }
        cache.state = KvState::Host(kv);
        cache.len = t;
        rms_norm(&x, &self.output_norm, c.norm_eps, &mut h);
        let mut logits = vec![0.0; c.vocab];
        self.lm_head.matvec(&h, &mut logits);
        Ok(logits)
    }
}
