//! The fused attention kernel, launched on burn's wgpu backend as a raw WGSL kernel.

use burn::backend::Cube;
use burn::backend::wgpu::{CubeTensor, KernelSource, SourceKernel, SourceTemplate, into_contiguous};
use burn::cubecl::prelude::KernelId;
use burn::cubecl::server::KernelArguments;
use burn::cubecl::{CubeCount, CubeDim};
use burn::prelude::*;

use crate::gpu::GpuError;

const SHADER: &str = include_str!("../attention.wgsl");
const WORKGROUP: u32 = 64;
const MAX_GROUPS_X: u32 = 65_535;

struct AttentionSource {
    head_dim: usize,
}

impl KernelSource for AttentionSource {
    fn source(&self) -> SourceTemplate {
        SourceTemplate::new(SHADER).register("head_dim", self.head_dim.to_string()).register("workgroup", WORKGROUP.to_string())
    }

    fn id(&self) -> KernelId {
        KernelId::new::<Self>().info(self.head_dim)
    }

    fn lang(&self) -> &'static str {
        "wgsl"
    }
}

/// Scaled dot-product attention of `q`, `k`, `v` (`[batch, heads, seq, head_dim]`, f32) with a
/// key padding mask (`[batch, seq]`, 1 for real tokens), scale 1/sqrt(head_dim). The tensors
/// must live on burn's wgpu device.
pub fn fused_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, mask: Tensor<2>) -> Result<Tensor<4>, GpuError> {
    launch(q, k, v, Masking::Padding(Box::new(mask)), None)
}

/// As [`fused_attention`], writing into the buffer of `out` (same shape as `q`). Tests hand
/// it a tensor full of NaN, so that a value the kernel failed to write cannot pass.
pub fn fused_attention_into(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, mask: Tensor<2>, out: Tensor<4>) -> Result<Tensor<4>, GpuError> {
    launch(q, k, v, Masking::Padding(Box::new(mask)), Some(out))
}

/// Causal attention for a decoder: `q` is `[batch, heads, q_len, head_dim]` (the newest tokens),
/// `k` and `v` are `[batch, kv_heads, kv_len, head_dim]` with `kv_len >= q_len` and `heads` a
/// multiple of `kv_heads` (grouped-query attention: query head h reads key/value head
/// h / (heads / kv_heads)). Query i sees keys up to i + kv_len - q_len.
pub fn fused_causal_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Result<Tensor<4>, GpuError> {
    launch(q, k, v, Masking::Causal, None)
}

/// As [`fused_causal_attention`], writing into the buffer of `out` (same shape as `q`).
pub fn fused_causal_attention_into(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, out: Tensor<4>) -> Result<Tensor<4>, GpuError> {
    launch(q, k, v, Masking::Causal, Some(out))
}

enum Masking {
    Padding(Box<Tensor<2>>),
    Causal,
}

fn launch(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, masking: Masking, out: Option<Tensor<4>>) -> Result<Tensor<4>, GpuError> {
    let [batch, heads, seq, head_dim] = q.dims();
    let [kb, kv_heads, kv_len, kd] = k.dims();
    let shape_ok = kb == batch
        && kd == head_dim
        && v.dims() == k.dims()
        && kv_heads > 0
        && heads.is_multiple_of(kv_heads)
        && match &masking {
            Masking::Padding(mask) => kv_heads == heads && kv_len == seq && mask.dims() == [batch, seq],
            Masking::Causal => kv_len >= seq,
        };
    if !shape_ok {
        return Err(GpuError::Unsupported("attention inputs disagree in shape".into()));
    }
    let (mask, use_mask, causal) = match masking {
        Masking::Padding(mask) => (*mask, 1u32, 0u32),
        // The binding must hold something; the kernel does not read it.
        Masking::Causal => (Tensor::<2>::ones([1, 1], &q.device()), 0, 1),
    };
    let prim = |t: Tensor<4>| {
        t.try_into_primitive::<Cube>()
            .map(into_contiguous)
            .map_err(|e| GpuError::Unsupported(format!("the attention kernel needs tensors on the wgpu device ({e:?})")))
    };
    let (q, k, v) = (prim(q)?, prim(k)?, prim(v)?);
    let mask =
        into_contiguous(mask.try_into_primitive::<Cube>().map_err(|e| GpuError::Unsupported(format!("the attention mask is not on the wgpu device ({e:?})")))?);
    let rows = (batch * heads * seq) as u32;
    let groups = rows.div_ceil(WORKGROUP).max(1);
    let groups_x = groups.min(MAX_GROUPS_X);
    let groups_y = groups.div_ceil(groups_x);
    let scale = 1.0f32 / (head_dim as f32).sqrt();
    let info = [batch as u32, heads as u32, seq as u32, scale.to_bits(), groups_x, kv_heads as u32, kv_len as u32, use_mask, causal];
    let client = q.client.clone();
    let out_len = batch * heads * seq * head_dim;
    let out = match out {
        Some(t) if t.dims() == [batch, heads, seq, head_dim] => prim(t)?,
        Some(_) => return Err(GpuError::Unsupported("the attention output has the wrong shape".into())),
        None => CubeTensor::new_contiguous(client.clone(), q.device.clone(), q.meta.shape().clone(), client.empty(out_len.max(1) * q.dtype.size()), q.dtype),
    };
    let info = client.create_from_slice(bytemuck::cast_slice(&info));
    let cube_dim = CubeDim::new_1d(WORKGROUP);
    client.launch(
        Box::new(SourceKernel::new(AttentionSource { head_dim }, cube_dim)),
        CubeCount::Static(groups_x, groups_y, 1),
        KernelArguments::new().with_buffers(vec![
            q.handle.clone().binding(),
            k.handle.clone().binding(),
            v.handle.clone().binding(),
            mask.handle.clone().binding(),
            out.handle.clone().binding(),
            info.binding(),
        ]),
    );
    Ok(Tensor::from_primitive::<Cube>(out))
}
