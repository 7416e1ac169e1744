//! A BERT encoder (all-MiniLM-L6-v2's shape) in burn, with weights from a safetensors file.

use std::path::Path;

use burn::prelude::*;
use burn::tensor::activation;
use burn::tensor::module as ops;
use safetensors::{Dtype, SafeTensors};
use thiserror::Error;

/// Why the model could not be loaded.
#[derive(Debug, Error)]
pub enum ModelError {
    #[error("cannot read the model file {path}: {source}; run the set-up (scripts/setup.sh)")]
    Read { path: String, source: std::io::Error },
    #[error("the model file {path} is not valid safetensors: {message}")]
    Format { path: String, message: String },
    #[error("the model file lacks tensor {0}")]
    Missing(String),
    #[error("tensor {name} is {found:?} of shape {shape:?}, expected f32 of shape {expected:?}")]
    Shape { name: String, found: Dtype, shape: Vec<usize>, expected: Vec<usize> },
    #[error("the model's config.json is not valid: {0}")]
    Config(String),
    #[error("the tokenizer failed: {0}")]
    Tokenizer(String),
    #[error("the model could not run: {0}")]
    Compute(String),
    #[error(transparent)]
    Gguf(#[from] super::gguf::GgufError),
}

/// The hyper-parameters that shape the network (from config.json).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
}

/// How attention is computed: burn's own op, or a fused kernel supplied by the caller.
pub type AttentionFn = dyn Fn(Tensor<4>, Tensor<4>, Tensor<4>, Tensor<2>) -> Tensor<4> + Send + Sync;

struct Linear {
    /// [in, out]
    weight: Tensor<2>,
    bias: Tensor<1>,
}

impl Linear {
    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        ops::linear(x, self.weight.clone(), Some(self.bias.clone()))
    }
}

struct LayerNorm {
    gamma: Tensor<1>,
    beta: Tensor<1>,
    eps: f64,
}

impl LayerNorm {
    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        ops::layer_norm(x, self.gamma.clone(), Some(self.beta.clone()), self.eps)
    }
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    out_norm: LayerNorm,
}

/// The BERT network on one burn device.
pub struct Bert {
    config: BertConfig,
    word: Tensor<2>,
    position: Tensor<2>,
    token_type: Tensor<2>,
    embed_norm: LayerNorm,
    layers: Vec<Layer>,
    device: Device,
    /// Burn's CPU backend, where the activation runs as Evident's vectorised CPU code.
    on_cpu: bool,
}

/// Reads `config.json` and the bytes of `model.safetensors` from `dir`.
pub(crate) fn read_model_files(dir: &Path) -> Result<(BertConfig, Vec<u8>), ModelError> {
    let config_path = dir.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|source| ModelError::Read { path: config_path.display().to_string(), source })?;
    let config: BertConfig = serde_json::from_str(&text).map_err(|e| ModelError::Config(e.to_string()))?;
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).map_err(|source| ModelError::Read { path: path.display().to_string(), source })?;
    Ok((config, bytes))
}

/// The tensors in the bytes of `dir`'s model.safetensors.
pub(crate) fn parse_safetensors<'a>(dir: &Path, bytes: &'a [u8]) -> Result<SafeTensors<'a>, ModelError> {
    SafeTensors::deserialize(bytes).map_err(|e| ModelError::Format { path: dir.join("model.safetensors").display().to_string(), message: e.to_string() })
}

/// The values of an f32 tensor of the expected shape.
pub(crate) fn tensor_f32(st: &SafeTensors<'_>, name: &str, expected: &[usize]) -> Result<Vec<f32>, ModelError> {
    let view = st.tensor(name).map_err(|_| ModelError::Missing(name.to_string()))?;
    if view.dtype() != Dtype::F32 || view.shape() != expected {
        return Err(ModelError::Shape { name: name.to_string(), found: view.dtype(), shape: view.shape().to_vec(), expected: expected.to_vec() });
    }
    Ok(view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

struct Weights<'a> {
    st: SafeTensors<'a>,
    device: Device,
}

impl Weights<'_> {
    fn data(&self, name: &str, expected: &[usize]) -> Result<TensorData, ModelError> {
        Ok(TensorData::new(tensor_f32(&self.st, name, expected)?, expected.to_vec()))
    }

    fn t1(&self, name: &str, n: usize) -> Result<Tensor<1>, ModelError> {
        Ok(Tensor::from_data(self.data(name, &[n])?, &self.device))
    }

    fn t2(&self, name: &str, rows: usize, cols: usize) -> Result<Tensor<2>, ModelError> {
        Ok(Tensor::from_data(self.data(name, &[rows, cols])?, &self.device))
    }

    /// PyTorch stores [out, in]; burn multiplies by [in, out].
    fn linear(&self, prefix: &str, inp: usize, out: usize) -> Result<Linear, ModelError> {
        Ok(Linear { weight: self.t2(&format!("{prefix}.weight"), out, inp)?.transpose(), bias: self.t1(&format!("{prefix}.bias"), out)? })
    }

    fn norm(&self, prefix: &str, n: usize, eps: f64) -> Result<LayerNorm, ModelError> {
        Ok(LayerNorm { gamma: self.t1(&format!("{prefix}.weight"), n)?, beta: self.t1(&format!("{prefix}.bias"), n)?, eps })
    }
}

impl Bert {
    /// Loads `model.safetensors` and `config.json` from `dir` onto `device`.
    pub fn load(dir: &Path, device: &Device) -> Result<Bert, ModelError> {
        let (config, bytes) = read_model_files(dir)?;
        let st = parse_safetensors(dir, &bytes)?;
        let w = Weights { st, device: device.clone() };
        let (h, i, eps) = (config.hidden_size, config.intermediate_size, config.layer_norm_eps);
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = format!("encoder.layer.{l}");
            layers.push(Layer {
                query: w.linear(&format!("{p}.attention.self.query"), h, h)?,
                key: w.linear(&format!("{p}.attention.self.key"), h, h)?,
                value: w.linear(&format!("{p}.attention.self.value"), h, h)?,
                attn_out: w.linear(&format!("{p}.attention.output.dense"), h, h)?,
                attn_norm: w.norm(&format!("{p}.attention.output.LayerNorm"), h, eps)?,
                intermediate: w.linear(&format!("{p}.intermediate.dense"), h, i)?,
                output: w.linear(&format!("{p}.output.dense"), i, h)?,
                out_norm: w.norm(&format!("{p}.output.LayerNorm"), h, eps)?,
            });
        }
        Ok(Bert {
            word: w.t2("embeddings.word_embeddings.weight", config.vocab_size, h)?,
            position: w.t2("embeddings.position_embeddings.weight", config.max_position_embeddings, h)?,
            token_type: w.t2("embeddings.token_type_embeddings.weight", config.type_vocab_size, h)?,
            embed_norm: w.norm("embeddings.LayerNorm", h, eps)?,
            layers,
            on_cpu: *device == Device::flex(),
            device: device.clone(),
            config,
        })
    }

    /// The network's hyper-parameters.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// The device it runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Hidden states `[batch, seq, hidden]` for token ids `[batch, seq]` (row-major) and a mask
    /// of real tokens (1) and padding (0). `attention` computes the attention of one layer
    /// from q, k, v `[batch, heads, seq, head_dim]` and the mask `[batch, seq]`.
    pub fn forward(&self, ids: &[u32], mask: &[u32], batch: usize, seq: usize, attention: &AttentionFn) -> Result<Vec<f32>, ModelError> {
        let dev = &self.device;
        let h = self.config.hidden_size;
        let heads = self.config.num_attention_heads;
        let ids = Tensor::<2, Int>::from_data(TensorData::new(ids.iter().map(|&i| i64::from(i)).collect::<Vec<_>>(), [batch, seq]), dev);
        let mask_t = Tensor::<2>::from_data(TensorData::new(mask.iter().map(|&m| m as f32).collect::<Vec<_>>(), [batch, seq]), dev);
        let positions = Tensor::<1, Int>::arange(0..seq as i64, dev);
        let word = ops::embedding(self.word.clone(), ids);
        let pos = self.position.clone().select(0, positions).unsqueeze::<3>();
        let typ = self.token_type.clone().narrow(0, 0, 1).unsqueeze::<3>();
        let mut x = self.embed_norm.forward(word + pos + typ);
        for layer in &self.layers {
            let split = |t: Tensor<3>| t.reshape([batch, seq, heads, h / heads]).swap_dims(1, 2);
            let q = split(layer.query.forward(x.clone()));
            let k = split(layer.key.forward(x.clone()));
            let v = split(layer.value.forward(x.clone()));
            let ctx = attention(q, k, v, mask_t.clone()).swap_dims(1, 2).reshape([batch, seq, h]);
            x = layer.attn_norm.forward(layer.attn_out.forward(ctx) + x);
            let inner = self.gelu(layer.intermediate.forward(x.clone()))?;
            x = layer.out_norm.forward(layer.output.forward(inner) + x);
        }
        x.into_data().convert::<f32>().try_into_vec::<f32>().map_err(|e| ModelError::Compute(format!("{e:?}")))
    }

    /// GELU: burn's op computes erf one value at a time on the CPU, so there the values go
    /// through Evident's vectorised version instead.
    fn gelu(&self, x: Tensor<3>) -> Result<Tensor<3>, ModelError> {
        if !self.on_cpu {
            return Ok(activation::gelu(x));
        }
        let shape = x.dims();
        let mut values = x.into_data().try_into_vec::<f32>().map_err(|e| ModelError::Compute(format!("{e:?}")))?;
        evident_kernels::gelu_in_place(&mut values);
        Ok(Tensor::from_data(TensorData::new(values, shape), &self.device))
    }
}

/// Burn's own attention with a padding mask (`mask` is 1 for real tokens).
pub fn burn_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, mask: Tensor<2>) -> Tensor<4> {
    let [b, heads, s, _] = q.dims();
    let pad = mask.equal_elem(0.0).reshape([b, 1, 1, s]).expand([b, heads, s, s]);
    ops::attention(q, k, v, Some(pad), None, Default::default())
}

/// The fused WGSL attention kernel (burn's wgpu device only; elsewhere burn's own op).
pub fn wgsl_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, mask: Tensor<2>) -> Tensor<4> {
    match evident_kernels::fused_attention(q.clone(), k.clone(), v.clone(), mask.clone()) {
        Ok(out) => out,
        Err(e) => {
            tracing::warn!("falling back to burn's attention: {e}");
            burn_attention(q, k, v, mask)
        }
    }
}
