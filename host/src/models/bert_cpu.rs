//! The same BERT network as `Bert`, laid out for the CPU's matrix kernels instead of burn's
//! tensor ops: sequences packed back to back with no padding, the query, key and value
//! projections fused into one product, and each bias and residual folded into its product.
//! Burn's CPU backend reaches about 60 % of this speed on the same weights.

use std::path::Path;

use evident_kernels::{AttentionShape, Int8Weight, SequenceSpan, Weight, attention_cpu, gelu_in_place, int8_linear_available, layer_norm, linear, linear_int8};
use safetensors::SafeTensors;

use super::bert::{BertConfig, ModelError, parse_safetensors, read_model_files, tensor_f32};
use crate::config::CpuPrecision;

struct Dense {
    weight: DenseWeight,
    bias: Vec<f32>,
    inp: usize,
    out: usize,
}

/// A dense layer's weight in the arithmetic its product runs in.
enum DenseWeight {
    /// `out` rows of `inp` values, as PyTorch stores it.
    F32(Vec<f32>),
    /// The same rounded to 8-bit integers (the f32 values are not kept).
    Int8(Int8Weight),
}

impl Dense {
    fn load(st: &SafeTensors<'_>, prefixes: &[String], inp: usize, out: usize) -> Result<Dense, ModelError> {
        let mut weight = Vec::with_capacity(prefixes.len() * inp * out);
        let mut bias = Vec::with_capacity(prefixes.len() * out);
        for p in prefixes {
            weight.extend(tensor_f32(st, &format!("{p}.weight"), &[out, inp])?);
            bias.extend(tensor_f32(st, &format!("{p}.bias"), &[out])?);
        }
        Ok(Dense { weight: DenseWeight::F32(weight), bias, inp, out: prefixes.len() * out })
    }

    fn apply(&self, x: &[f32], rows: usize, out: &mut [f32], accumulate: bool) {
        match &self.weight {
            DenseWeight::F32(values) => linear(x, rows, Weight { values, inp: self.inp, out: self.out }, &self.bias, out, accumulate),
            DenseWeight::Int8(w) => linear_int8(x, rows, w, &self.bias, out, accumulate),
        }
    }
}

struct Norm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

impl Norm {
    fn load(st: &SafeTensors<'_>, prefix: &str, width: usize) -> Result<Norm, ModelError> {
        Ok(Norm { gamma: tensor_f32(st, &format!("{prefix}.weight"), &[width])?, beta: tensor_f32(st, &format!("{prefix}.bias"), &[width])? })
    }
}

struct Layer {
    /// Queries, keys and values in one product: `3 × hidden` outputs.
    qkv: Dense,
    attn_out: Dense,
    attn_norm: Norm,
    intermediate: Dense,
    output: Dense,
    out_norm: Norm,
}

/// The BERT network on the CPU.
pub struct CpuBert {
    config: BertConfig,
    word: Vec<f32>,
    position: Vec<f32>,
    token_type: Vec<f32>,
    embed_norm: Norm,
    layers: Vec<Layer>,
}

impl CpuBert {
    /// Loads `model.safetensors` and `config.json` from `dir`.
    pub fn load(dir: &Path) -> Result<CpuBert, ModelError> {
        let (config, bytes) = read_model_files(dir)?;
        let st = parse_safetensors(dir, &bytes)?;
        let (h, i) = (config.hidden_size, config.intermediate_size);
        if config.num_attention_heads == 0 || h % config.num_attention_heads != 0 {
            return Err(ModelError::Config(format!("{h} hidden values do not split into {} heads", config.num_attention_heads)));
        }
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = format!("encoder.layer.{l}");
            let qkv: Vec<String> = ["query", "key", "value"].iter().map(|n| format!("{p}.attention.self.{n}")).collect();
            layers.push(Layer {
                qkv: Dense::load(&st, &qkv, h, h)?,
                attn_out: Dense::load(&st, &[format!("{p}.attention.output.dense")], h, h)?,
                attn_norm: Norm::load(&st, &format!("{p}.attention.output.LayerNorm"), h)?,
                intermediate: Dense::load(&st, &[format!("{p}.intermediate.dense")], h, i)?,
                output: Dense::load(&st, &[format!("{p}.output.dense")], i, h)?,
                out_norm: Norm::load(&st, &format!("{p}.output.LayerNorm"), h)?,
            });
        }
        Ok(CpuBert {
            word: tensor_f32(&st, "embeddings.word_embeddings.weight", &[config.vocab_size, h])?,
            position: tensor_f32(&st, "embeddings.position_embeddings.weight", &[config.max_position_embeddings, h])?,
            token_type: tensor_f32(&st, "embeddings.token_type_embeddings.weight", &[config.type_vocab_size, h])?,
            embed_norm: Norm::load(&st, "embeddings.LayerNorm", h)?,
            layers,
            config,
        })
    }

    /// The same network with its dense layers' products in `precision`; int8 only where the
    /// CPU has AVX-512 VNNI (elsewhere they stay f32, which [`CpuBert::precision`] then
    /// reports). Attention's products stay f32.
    pub fn with_precision(mut self, precision: CpuPrecision) -> CpuBert {
        if precision == CpuPrecision::Int8 && int8_linear_available() {
            for layer in &mut self.layers {
                for dense in [&mut layer.qkv, &mut layer.attn_out, &mut layer.intermediate, &mut layer.output] {
                    if let DenseWeight::F32(values) = &dense.weight {
                        dense.weight = DenseWeight::Int8(Int8Weight::new(values, dense.inp, dense.out));
                    }
                }
            }
        }
        self
    }

    /// The arithmetic the matrix products run in.
    pub fn precision(&self) -> CpuPrecision {
        match self.layers.first().map(|l| &l.qkv.weight) {
            Some(DenseWeight::Int8(_)) => CpuPrecision::Int8,
            _ => CpuPrecision::F32,
        }
    }

    /// The network's hyper-parameters.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// Hidden states of every token of every sequence, packed in order: the rows of sequence
    /// `s` follow those of sequences before it, `hidden` values each.
    pub fn forward(&self, sequences: &[&[u32]]) -> Result<Vec<f32>, ModelError> {
        let h = self.config.hidden_size;
        let eps = self.config.layer_norm_eps as f32;
        let mut spans = Vec::with_capacity(sequences.len());
        let mut rows = 0;
        for seq in sequences {
            if seq.len() > self.config.max_position_embeddings {
                return Err(ModelError::Compute(format!(
                    "a sequence of {} tokens is longer than the model's {} positions",
                    seq.len(),
                    self.config.max_position_embeddings
                )));
            }
            spans.push(SequenceSpan { start: rows, len: seq.len() });
            rows += seq.len();
        }
        let mut x = vec![0.0f32; rows * h];
        let mut row = 0;
        for seq in sequences {
            for (pos, &id) in seq.iter().enumerate() {
                let id = id as usize;
                if id >= self.config.vocab_size {
                    return Err(ModelError::Compute(format!("token id {id} is outside the vocabulary")));
                }
                let dst = &mut x[row * h..(row + 1) * h];
                let word = &self.word[id * h..(id + 1) * h];
                let position = &self.position[pos * h..(pos + 1) * h];
                for (((d, w), p), t) in dst.iter_mut().zip(word).zip(position).zip(&self.token_type[..h]) {
                    *d = w + p + t;
                }
                row += 1;
            }
        }
        layer_norm(&mut x, h, &self.embed_norm.gamma, &self.embed_norm.beta, eps);
        let shape = AttentionShape { heads: self.config.num_attention_heads, head_dim: h / self.config.num_attention_heads };
        let mut qkv = vec![0.0f32; rows * 3 * h];
        let mut context = vec![0.0f32; rows * h];
        let mut inner = vec![0.0f32; rows * self.config.intermediate_size];
        for layer in &self.layers {
            layer.qkv.apply(&x, rows, &mut qkv, false);
            attention_cpu(&qkv, &spans, shape, &mut context);
            layer.attn_out.apply(&context, rows, &mut x, true);
            layer_norm(&mut x, h, &layer.attn_norm.gamma, &layer.attn_norm.beta, eps);
            layer.intermediate.apply(&x, rows, &mut inner, false);
            gelu_in_place(&mut inner);
            layer.output.apply(&inner, rows, &mut x, true);
            layer_norm(&mut x, h, &layer.out_norm.gamma, &layer.out_norm.beta, eps);
        }
        Ok(x)
    }
}
