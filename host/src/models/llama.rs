//! A Llama-family decoder (Llama as SmolLM2 uses it, and Qwen2) in burn, with weights from a
//! GGUF file.

use burn::prelude::*;
use burn::tensor::activation;
use burn::tensor::module as ops;
use burn::tensor::ops::AttentionModuleOptions;
use evident_kernels::{QuantMatrix, RopeLayout};

use super::ModelError;
use super::gguf::{GgufError, GgufFile};

/// The hyper-parameters that shape the network (from the GGUF metadata).
#[derive(Debug, Clone)]
pub struct LlamaConfig {
    /// `general.architecture`: "llama" or "qwen2".
    pub architecture: String,
    /// Which values of a head rotate together (Llama: adjacent pairs; Qwen2: halves).
    pub rope_layout: RopeLayout,
    /// Whether the query, key and value projections have biases (Qwen2).
    pub qkv_bias: bool,
    pub layers: usize,
    pub dim: usize,
    pub ffn_dim: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub vocab: usize,
    pub context: usize,
    pub rope_base: f64,
    pub norm_eps: f64,
}

impl LlamaConfig {
    /// Reads the hyper-parameters from the GGUF metadata, refusing other architectures.
    pub fn from_gguf(file: &GgufFile) -> Result<LlamaConfig, GgufError> {
        let arch = file.string("general.architecture")?;
        let rope_layout = match arch {
            "llama" => RopeLayout::AdjacentPairs,
            "qwen2" => RopeLayout::Halves,
            other => return Err(GgufError::Format(format!("the model's architecture is {other}; Evident runs llama and qwen2 models"))),
        };
        let n = |key: &str| -> Result<usize, GgufError> { Ok(file.int(&format!("{arch}.{key}"))?.max(0) as usize) };
        let heads = n("attention.head_count")?;
        let config = LlamaConfig {
            architecture: arch.to_string(),
            rope_layout,
            qkv_bias: file.tensors.contains_key("blk.0.attn_q.bias"),
            layers: n("block_count")?,
            dim: n("embedding_length")?,
            ffn_dim: n("feed_forward_length")?,
            heads,
            kv_heads: n("attention.head_count_kv").unwrap_or(heads),
            vocab: file.tensor("token_embd.weight")?.dims.get(1).copied().unwrap_or(0),
            context: n("context_length")?,
            rope_base: file.float(&format!("{arch}.rope.freq_base")).unwrap_or(10_000.0),
            norm_eps: file.float(&format!("{arch}.attention.layer_norm_rms_epsilon"))?,
        };
        if config.heads == 0 || config.kv_heads == 0 || !config.dim.is_multiple_of(config.heads) || !config.heads.is_multiple_of(config.kv_heads) {
            return Err(GgufError::Format(format!("inconsistent attention shape: {config:?}")));
        }
        Ok(config)
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.dim / self.heads
    }

    /// Whether `tokens` can run after `cached` ones: at least one, each in the vocabulary, and
    /// all within the context.
    pub fn check_pass(&self, cached: usize, tokens: &[u32]) -> Result<(), ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::Compute("no tokens to run".into()));
        }
        if cached + tokens.len() > self.context {
            return Err(ModelError::Compute(format!("{} tokens exceed the model's context of {}", cached + tokens.len(), self.context)));
        }
        match tokens.iter().find(|&&t| t as usize >= self.vocab) {
            Some(token) => Err(ModelError::Compute(format!("token {token} is outside the vocabulary"))),
            None => Ok(()),
        }
    }
}

struct Layer {
    attn_norm: Tensor<1>,
    /// Linear weights as `[in, out]`.
    wq: Tensor<2>,
    wk: Tensor<2>,
    wv: Tensor<2>,
    /// Query, key and value biases (Qwen2).
    bq: Option<Tensor<1>>,
    bk: Option<Tensor<1>>,
    bv: Option<Tensor<1>>,
    wo: Tensor<2>,
    ffn_norm: Tensor<1>,
    gate: Tensor<2>,
    up: Tensor<2>,
    down: Tensor<2>,
}

/// Keys and values of the tokens seen so far, per layer: as device tensors
/// (`[1, kv_heads, len, head_dim]`) after a burn pass, or in host memory (`[len, kv_heads *
/// head_dim]`) after a native CPU step; each side converts the other's form when it needs to.
/// Cloning is cheap for device tensors, which lets continuations branch from one prompt.
#[derive(Clone, Default)]
pub struct KvCache {
    pub(super) state: KvState,
    pub(super) len: usize,
}

/// One layer's keys and values in host memory, `[len, kv_heads * head_dim]` each.
pub(super) type HostLayerKv = (Vec<f32>, Vec<f32>);

#[derive(Clone, Default)]
pub(super) enum KvState {
    #[default]
    Empty,
    Device(Vec<(Tensor<4>, Tensor<4>)>),
    Host(Vec<HostLayerKv>),
}

impl KvCache {
    /// Number of tokens cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A copy of the first `len` tokens' keys and values (device tensors are shared, not copied).
    pub fn prefix(&self, len: usize) -> KvCache {
        let len = len.min(self.len);
        let state = match &self.state {
            _ if len == 0 => KvState::Empty,
            KvState::Empty => KvState::Empty,
            KvState::Host(layers) => {
                let width = layers.first().map_or(0, |(k, _)| k.len() / self.len.max(1));
                KvState::Host(layers.iter().map(|(k, v)| (k[..len * width].to_vec(), v[..len * width].to_vec())).collect())
            }
            KvState::Device(layers) => KvState::Device(layers.iter().map(|(k, v)| (k.clone().narrow(2, 0, len), v.clone().narrow(2, 0, len))).collect()),
        };
        KvCache { state, len }
    }

    /// Bytes the cached keys and values take.
    pub fn bytes(&self) -> usize {
        match &self.state {
            KvState::Empty => 0,
            KvState::Host(layers) => layers.iter().map(|(k, v)| 4 * (k.len() + v.len())).sum(),
            KvState::Device(layers) => layers.iter().map(|(k, v)| 4 * (k.shape().num_elements() + v.shape().num_elements())).sum(),
        }
    }

    /// The cache as device tensors (converting host vectors), leaving it empty.
    fn take_device(&mut self, device: &Device, kv_heads: usize, head_dim: usize) -> Vec<(Tensor<4>, Tensor<4>)> {
        let len = self.len;
        match std::mem::take(&mut self.state) {
            KvState::Empty => Vec::new(),
            KvState::Device(layers) => layers,
            KvState::Host(layers) => {
                let to = |v: Vec<f32>| Tensor::<4>::from_data(TensorData::new(v, [1, len, kv_heads, head_dim]), device).swap_dims(1, 2);
                layers.into_iter().map(|(k, v)| (to(k), to(v))).collect()
            }
        }
    }

    /// The cache as host vectors (reading device tensors back), leaving it empty.
    pub(super) fn take_host(&mut self) -> Result<Vec<HostLayerKv>, ModelError> {
        match std::mem::take(&mut self.state) {
            KvState::Empty => Ok(Vec::new()),
            KvState::Host(layers) => Ok(layers),
            KvState::Device(layers) => {
                let back =
                    |t: Tensor<4>| t.swap_dims(1, 2).into_data().convert::<f32>().try_into_vec::<f32>().map_err(|e| ModelError::Compute(format!("{e:?}")));
                layers.into_iter().map(|(k, v)| Ok((back(k)?, back(v)?))).collect()
            }
        }
    }
}

/// Which positions' next-token logits a forward pass returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsFor {
    Last,
    All,
}

/// How attention is computed: burn's op, or the fused WGSL kernel on the wgpu device. It gets
/// queries `[1, heads, new, head_dim]` and keys and values `[1, kv_heads, all, head_dim]`.
pub type CausalAttentionFn = dyn Fn(Tensor<4>, Tensor<4>, Tensor<4>) -> Tensor<4> + Send + Sync;

/// Columns of the output projection per device tensor: a 151,936-token vocabulary in one
/// f32 tensor would pass the buffer size a wgpu device allows (128 MiB by default).
const HEAD_COLUMNS: usize = 16384;

/// The decoder on one burn device.
pub struct Llama {
    config: LlamaConfig,
    /// The token table stays in host memory in its stored encoding: a lookup reads a few rows,
    /// and the whole table as f32 would pass a device's buffer size.
    embedding: QuantMatrix,
    layers: Vec<Layer>,
    output_norm: Tensor<1>,
    /// `[dim, vocab]` in pieces of at most `HEAD_COLUMNS` columns.
    lm_head: Vec<Tensor<2>>,
    /// `[context, head_dim / 2]`
    rope_cos: Tensor<2>,
    rope_sin: Tensor<2>,
    device: Device,
}

struct Loader<'a> {
    file: &'a GgufFile,
    device: Device,
}

impl Loader<'_> {
    fn values(&self, name: &str, expected: &[usize]) -> Result<Vec<f32>, ModelError> {
        let info = self.file.tensor(name)?;
        if info.dims != expected {
            return Err(ModelError::Config(format!("tensor {name} has shape {:?}, expected {expected:?}", info.dims)));
        }
        Ok(self.file.dequantize(name)?)
    }

    fn vector(&self, name: &str, n: usize) -> Result<Tensor<1>, ModelError> {
        Ok(Tensor::from_data(TensorData::new(self.values(name, &[n])?, [n]), &self.device))
    }

    /// GGUF stores a linear map as `out` rows of `inp`; burn multiplies by `[in, out]`, laid
    /// out contiguously here so no matmul has to deal with a strided operand.
    fn linear(&self, name: &str, inp: usize, out: usize) -> Result<Tensor<2>, ModelError> {
        let rows = self.values(name, &[inp, out])?;
        Ok(Tensor::from_data(TensorData::new(transpose(&rows, out, inp), [inp, out]), &self.device))
    }
}

fn transpose(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = values[r * cols + c];
        }
    }
    out
}

impl Llama {
    /// Builds the network from a GGUF file onto `device`, dequantising every weight to f32.
    pub fn load(file: &GgufFile, device: &Device) -> Result<Llama, ModelError> {
        let config = LlamaConfig::from_gguf(file)?;
        let w = Loader { file, device: device.clone() };
        let (d, f, kv) = (config.dim, config.ffn_dim, config.kv_heads * config.head_dim());
        let mut layers = Vec::with_capacity(config.layers);
        for l in 0..config.layers {
            let p = |name: &str| format!("blk.{l}.{name}.weight");
            let bias = |name: &str, n| -> Result<Option<Tensor<1>>, ModelError> {
                if config.qkv_bias { Ok(Some(w.vector(&format!("blk.{l}.{name}.bias"), n)?)) } else { Ok(None) }
            };
            layers.push(Layer {
                attn_norm: w.vector(&p("attn_norm"), d)?,
                wq: w.linear(&p("attn_q"), d, d)?,
                wk: w.linear(&p("attn_k"), d, kv)?,
                wv: w.linear(&p("attn_v"), d, kv)?,
                bq: bias("attn_q", d)?,
                bk: bias("attn_k", kv)?,
                bv: bias("attn_v", kv)?,
                wo: w.linear(&p("attn_output"), d, d)?,
                ffn_norm: w.vector(&p("ffn_norm"), d)?,
                gate: w.linear(&p("ffn_gate"), d, f)?,
                up: w.linear(&p("ffn_up"), d, f)?,
                down: w.linear(&p("ffn_down"), f, d)?,
            });
        }
        // Tied embeddings (SmolLM2) reuse the token table as the output projection.
        let head = if file.tensors.contains_key("output.weight") { "output.weight" } else { "token_embd.weight" };
        let head_rows = w.values(head, &[d, config.vocab])?;
        let lm_head = head_rows
            .chunks(HEAD_COLUMNS * d)
            .map(|rows| {
                let n = rows.len() / d;
                Tensor::from_data(TensorData::new(transpose(rows, n, d), [d, n]), device)
            })
            .collect();
        drop(head_rows);
        let (cos, sin) = rope_tables(config.context, config.head_dim(), config.rope_base);
        let half = config.head_dim() / 2;
        Ok(Llama {
            embedding: file.matrix("token_embd.weight", config.vocab, d)?,
            layers,
            output_norm: w.vector("output_norm.weight", d)?,
            lm_head,
            rope_cos: Tensor::from_data(TensorData::new(cos, [config.context, half]), device),
            rope_sin: Tensor::from_data(TensorData::new(sin, [config.context, half]), device),
            device: device.clone(),
            config,
        })
    }

    /// The network's hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// Runs `tokens` after those in `cache` (which grows by them) and returns next-token logits
    /// `[positions, vocab]` for the last token or for every one of them.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache, which: LogitsFor, attention: &CausalAttentionFn) -> Result<Tensor<2>, ModelError> {
        let c = &self.config;
        let (s, start) = (tokens.len(), cache.len);
        c.check_pass(start, tokens)?;
        let dev = &self.device;
        let hd = c.head_dim();
        let rows: Vec<f32> = tokens.iter().flat_map(|&t| self.embedding.row(t as usize)).collect();
        let mut x = Tensor::<3>::from_data(TensorData::new(rows, [1, s, c.dim]), dev);
        let cos = self.rope_cos.clone().narrow(0, start, s).reshape([1, 1, s, hd / 2, 1]);
        let sin = self.rope_sin.clone().narrow(0, start, s).reshape([1, 1, s, hd / 2, 1]);
        // Adjacent pairs are (…, hd / 2, 2) and halves (…, 2, hd / 2): the same rotation
        // along a different axis.
        let (pair_shape, axis) = match c.rope_layout {
            RopeLayout::AdjacentPairs => ([s, hd / 2, 2], 4),
            RopeLayout::Halves => ([s, 2, hd / 2], 3),
        };
        let (cos, sin) = match c.rope_layout {
            RopeLayout::AdjacentPairs => (cos, sin),
            RopeLayout::Halves => (cos.reshape([1, 1, s, 1, hd / 2]), sin.reshape([1, 1, s, 1, hd / 2])),
        };
        let rope = |t: Tensor<4>| -> Tensor<4> {
            let [b, h, _, _] = t.dims();
            let pairs = t.reshape([b, h, pair_shape[0], pair_shape[1], pair_shape[2]]);
            let (first, second) = (pairs.clone().narrow(axis, 0, 1), pairs.narrow(axis, 1, 1));
            let re = first.clone() * cos.clone() - second.clone() * sin.clone();
            let im = first * sin.clone() + second * cos.clone();
            Tensor::cat(vec![re, im], axis).reshape([b, h, s, hd])
        };
        let project = |h: Tensor<3>, w: &Tensor<2>, b: &Option<Tensor<1>>| {
            let out = ops::linear(h, w.clone(), None);
            match b {
                Some(b) => out + b.clone().unsqueeze::<3>(),
                None => out,
            }
        };
        let heads = |t: Tensor<3>, n: usize| t.reshape([1, s, n, hd]).swap_dims(1, 2);
        let past = cache.take_device(dev, c.kv_heads, hd);
        let mut next = Vec::with_capacity(c.layers);
        for (l, layer) in self.layers.iter().enumerate() {
            let h = rms_norm(x.clone(), &layer.attn_norm, c.norm_eps);
            let q = rope(heads(project(h.clone(), &layer.wq, &layer.bq), c.heads));
            let k = rope(heads(project(h.clone(), &layer.wk, &layer.bk), c.kv_heads));
            let v = heads(project(h, &layer.wv, &layer.bv), c.kv_heads);
            let (k, v) = match past.get(l) {
                Some((pk, pv)) => (Tensor::cat(vec![pk.clone(), k], 2), Tensor::cat(vec![pv.clone(), v], 2)),
                None => (k, v),
            };
            next.push((k.clone(), v.clone()));
            let ctx = attention(q, k, v).swap_dims(1, 2).reshape([1, s, c.dim]);
            x = x + ops::linear(ctx, layer.wo.clone(), None);
            let h = rms_norm(x.clone(), &layer.ffn_norm, c.norm_eps);
            let gated = activation::silu(ops::linear(h.clone(), layer.gate.clone(), None)) * ops::linear(h, layer.up.clone(), None);
            x = x + ops::linear(gated, layer.down.clone(), None);
        }
        cache.state = KvState::Device(next);
        cache.len = start + s;
        let x = match which {
            LogitsFor::Last => x.narrow(1, s - 1, 1),
            LogitsFor::All => x,
        };
        let n = x.dims()[1];
        let x = rms_norm(x, &self.output_norm, c.norm_eps);
        let pieces = self.lm_head.iter().map(|w| ops::linear(x.clone(), w.clone(), None)).collect();
        Ok(Tensor::cat(pieces, 2).reshape([n, c.vocab]))
    }
}

fn rms_norm(x: Tensor<3>, weight: &Tensor<1>, eps: f64) -> Tensor<3> {
    let scale = (x.clone().square().mean_dim(2) + eps).sqrt().recip();
    x * scale * weight.clone().unsqueeze::<3>()
}

/// Rotation angles per position, `head_dim / 2` of them (either layout pairs values by them).
fn rope_tables(context: usize, head_dim: usize, base: f64) -> (Vec<f32>, Vec<f32>) {
    let half = head_dim / 2;
    let mut cos = Vec::with_capacity(context * half);
    let mut sin = Vec::with_capacity(context * half);
    for pos in 0..context {
        for i in 0..half {
            let angle = pos as f64 * base.powf(-2.0 * i as f64 / head_dim as f64);
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    (cos, sin)
}

/// Burn's attention with a causal mask aligned to the last query (queries are the newest
/// tokens), key and value heads repeated to the query heads' count.
pub fn burn_causal_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<4> {
    let [b, heads, _, hd] = q.dims();
    let [_, kv_heads, t, _] = k.dims();
    let rep = heads / kv_heads.max(1);
    let widen = |x: Tensor<4>| {
        if rep == 1 {
            return x;
        }
        x.reshape([b, kv_heads, 1, t, hd]).expand([b, kv_heads, rep, t, hd]).reshape([b, heads, t, hd])
    };
    ops::attention(q, widen(k), widen(v), None, None, AttentionModuleOptions { is_causal: true, ..Default::default() })
}

/// The fused WGSL kernel (grouped-query, causal; burn's wgpu device only, else burn's op).
pub fn wgsl_causal_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<4> {
    match evident_kernels::fused_causal_attention(q.clone(), k.clone(), v.clone()) {
        Ok(out) => out,
        Err(e) => {
            tracing::warn!("falling back to burn's attention: {e}");
            burn_causal_attention(q, k, v)
        }
    }
}
