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
        SourceTemplate::new(SHADER)
            .register("head_dim", self.head_dim.to_string())
            .register("workgroup", WORKGROUP.to_string())
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
    launch(q, k, v, mask, None)
}

/// As [`fused_attention`], writing into the buffer of `out` (same shape as `q`). Tests hand
/// it a tensor full of NaN, so that a value the kernel failed to write cannot pass.
pub fn fused_attention_into(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, mask: Tensor<2>, out: Tensor<4>) -> Result<Tensor<4>, GpuError> {
    launch(q, k, v, mask, Some(out))
}

fn launch(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, mask: Tensor<2>, out: Option<Tensor<4>>) -> Result<Tensor<4>, GpuError> {
    let [batch, heads, seq, head_dim] = q.dims();
    if k.dims() != q.dims() || v.dims() != q.dims() || mask.dims() != [batch, seq] {
        return Err(GpuError::Unsupported("attention inputs disagree in shape".into()));
    }
    let prim = |t: Tensor<4>| {
        t.try_into_primitive::<Cube>()
            .map(into_contiguous)
            .map_err(|e| GpuError::Unsupported(format!("the attention kernel needs tensors on the wgpu device ({e:?})")))
    };
    let (q, k, v) = (prim(q)?, prim(k)?, prim(v)?);
    let mask = into_contiguous(
        mask.try_into_primitive::<Cube>()
            .map_err(|e| GpuError::Unsupported(format!("the attention mask is not on the wgpu device ({e:?})")))?,
    );
    let rows = (batch * heads * seq) as u32;
    let groups = rows.div_ceil(WORKGROUP).max(1);
    let groups_x = groups.min(MAX_GROUPS_X);
    let groups_y = groups.div_ceil(groups_x);
    let scale = 1.0f32 / (head_dim as f32).sqrt();
    let info = [batch as u32, heads as u32, seq as u32, scale.to_bits(), groups_x];
    let client = q.client.clone();
    let out_len = batch * heads * seq * head_dim;
    let out = match out {
        Some(t) if t.dims() == [batch, heads, seq, head_dim] => prim(t)?,
        Some(_) => return Err(GpuError::Unsupported("the attention output has the wrong shape".into())),
        None => CubeTensor::new_contiguous(
            client.clone(),
            q.device.clone(),
            q.meta.shape().clone(),
            client.empty(out_len.max(1) * q.dtype.size()),
            q.dtype,
        ),
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
