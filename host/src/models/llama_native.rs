//! The Llama-family decoder (Llama, Qwen2) on the CPU, with the weights left in their GGUF
//! block encodings.
//!
//! A single new token reads each weight once, so a decoding step costs what the weights weigh
//! and runs as matrix-vector products straight from the blocks. A prompt multiplies every
//! weight by many rows, so it is bound by arithmetic: its products decode a few weight rows at
//! a time and run them as a matrix product (`QuantMatrix::matmul` picks the way by the number
//! of rows). Both compute the same network as burn's `Llama::forward`, which the tests check.

use evident_kernels::{GroupedShape, QuantMatrix, causal_attention, rms_norm, rotary_angles, rotate, silu_gate};

use super::ModelError;
use super::gguf::{GgufError, GgufFile};
use super::llama::{KvCache, KvState, LlamaConfig, LogitsFor};

struct Layer {
    attn_norm: Vec<f32>,
    /// Query, key and value rows stacked: one product instead of three.
    qkv: QuantMatrix,
    /// Their biases, stacked the same way (Qwen2 has them, Llama does not).
    qkv_bias: Option<Vec<f32>>,
    wo: QuantMatrix,
    ffn_norm: Vec<f32>,
    /// Gate and up rows stacked.
    gate_up: QuantMatrix,
    down: QuantMatrix,
}

/// The decoder's weights, in their stored encodings.
pub struct NativeDecoder {
    config: LlamaConfig,
    embedding: QuantMatrix,
    layers: Vec<Layer>,
    output_norm: Vec<f32>,
    lm_head: QuantMatrix,
}

/// The f32 vector `name` of `n` values.
fn vector(file: &GgufFile, name: &str, n: usize) -> Result<Vec<f32>, GgufError> {
    let values = file.dequantize(name)?;
    if values.len() != n {
        return Err(GgufError::Format(format!("tensor {name} has {} values, expected {n}", values.len())));
    }
    Ok(values)
}

impl NativeDecoder {
    /// Reads the weights of `config`'s network from `file`.
    pub fn load(file: &GgufFile, config: &LlamaConfig) -> Result<NativeDecoder, ModelError> {
        let c = config;
        let (d, f, kv) = (c.dim, c.ffn_dim, c.kv_heads * c.head_dim());
        let mut layers = Vec::with_capacity(c.layers);
        for l in 0..c.layers {
            let p = |name: &str| format!("blk.{l}.{name}.weight");
            let b = |name: &str| format!("blk.{l}.{name}.bias");
            let stack = |parts| QuantMatrix::stack(parts).map_err(|e| ModelError::Config(format!("layer {l}: {e}")));
            let qkv_bias = if c.qkv_bias {
                Some([vector(file, &b("attn_q"), d)?, vector(file, &b("attn_k"), kv)?, vector(file, &b("attn_v"), kv)?].concat())
            } else {
                None
            };
            layers.push(Layer {
                attn_norm: vector(file, &p("attn_norm"), d)?,
                qkv: stack(vec![file.matrix(&p("attn_q"), d, d)?, file.matrix(&p("attn_k"), kv, d)?, file.matrix(&p("attn_v"), kv, d)?])?,
                qkv_bias,
                wo: file.matrix(&p("attn_output"), d, d)?,
                ffn_norm: vector(file, &p("ffn_norm"), d)?,
                gate_up: stack(vec![file.matrix(&p("ffn_gate"), f, d)?, file.matrix(&p("ffn_up"), f, d)?])?,
                down: file.matrix(&p("ffn_down"), d, f)?,
            });
        }
        // Tied embeddings (SmolLM2) reuse the token table as the output projection.
        let head = if file.tensors.contains_key("output.weight") { "output.weight" } else { "token_embd.weight" };
        Ok(NativeDecoder {
            embedding: file.matrix("token_embd.weight", c.vocab, d)?,
            lm_head: file.matrix(head, c.vocab, d)?,
            layers,
            output_norm: vector(file, "output_norm.weight", d)?,
            config: config.clone(),
        })
    }

    /// Bytes the weights take in memory.
    pub fn weight_bytes(&self) -> usize {
        let layer = |l: &Layer| l.qkv.bytes() + l.wo.bytes() + l.gate_up.bytes() + l.down.bytes();
        self.embedding.bytes() + self.lm_head.bytes() + self.layers.iter().map(layer).sum::<usize>()
    }

    /// Runs `tokens` after those in `cache` (which grows by them) and returns next-token logits,
    /// `[positions × vocab]`, for the last token or for each.
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
        let mut x: Vec<f32> = tokens.iter().flat_map(|&t| self.embedding.row(t as usize)).collect();
        let mut h = vec![0.0; s * d];
        let mut qkv = vec![0.0; s * qkv_width];
        let mut ctx = vec![0.0; s * d];
        let mut gate_up = vec![0.0; s * 2 * f];
        let mut gated = vec![0.0; s * f];
        for (layer, (ck, cv)) in self.layers.iter().zip(kv.iter_mut()) {
            rms_norm(&x, &layer.attn_norm, c.norm_eps, &mut h);
            layer.qkv.matmul(&h, s, &mut qkv, false);
            if let Some(bias) = &layer.qkv_bias {
                qkv.chunks_exact_mut(qkv_width).for_each(|row| row.iter_mut().zip(bias).for_each(|(v, b)| *v += b));
            }
            // Queries and keys sit side by side at the start of each row: one rotation for both.
            rotate(&mut qkv, qkv_width, d + kv_dim, hd, c.rope_layout, &cos, &sin);
            for row in qkv.chunks_exact(qkv_width) {
                ck.extend_from_slice(&row[d..d + kv_dim]);
                cv.extend_from_slice(&row[d + kv_dim..]);
            }
            causal_attention(&qkv, qkv_width, ck, cv, shape, &mut ctx);
            // The residual connections are added by the products themselves (accumulate).
            layer.wo.matmul(&ctx, s, &mut x, true);
            rms_norm(&x, &layer.ffn_norm, c.norm_eps, &mut h);
            layer.gate_up.matmul(&h, s, &mut gate_up, false);
            silu_gate(&gate_up, f, &mut gated);
            layer.down.matmul(&gated, s, &mut x, true);
        }
        cache.state = KvState::Host(kv);
        cache.len = start + s;
        let rows = match which {
            LogitsFor::Last => s - 1..s,
            LogitsFor::All => 0..s,
        };
        let n = rows.len();
        let mut normed = vec![0.0; n * d];
        rms_norm(&x[rows.start * d..rows.end * d], &self.output_norm, c.norm_eps, &mut normed);
        let mut logits = vec![0.0; n * c.vocab];
        self.lm_head.matmul(&normed, n, &mut logits, false);
        Ok(logits)
    }
}
