//! Evident's compute kernels: hand-written WGSL run through wgpu, a native CPU path for boxes
//! without a GPU, and a plain-Rust reference for each that the tests compare against.

mod attention;
mod conv_cpu;
mod decoder_cpu;
mod dense_cpu;
mod dense_int8;
mod depthwise_cpu;
mod gelu_cpu;
mod gpu;
mod maxsim;
#[cfg(target_arch = "x86_64")]
mod maxsim_avx512;
mod maxsim_candidates;
mod maxsim_cpu;
mod maxsim_gpu;
mod pointwise_cpu;
mod quant;
pub mod testing;
mod token_pooling;
mod topk;
mod wgsl_layout;

pub use attention::{fused_attention, fused_attention_into, fused_causal_attention, fused_causal_attention_into};
pub use conv_cpu::{ConvShape, PlaneEpilogue, batched_matmul, conv2d, conv2d_reference, pointwise_conv_int8};
pub use decoder_cpu::{GroupedShape, RopeLayout, causal_attention, causal_attention_reference, rms_norm, rotary_angles, rotate, silu_gate};
pub use dense_cpu::{AttentionShape, SequenceSpan, Weight, attention as attention_cpu, layer_norm, linear, packed_attention_reference};
pub use dense_int8::{Int8Weight, int8_linear_available, linear_int8, linear_int8_reference};
pub use gelu_cpu::{gelu_in_place, gelu_reference};
pub use gpu::{AdapterChoice, GpuContext, GpuError};
pub use maxsim::{PageVectors, QueryBatch, maxsim_reference};
pub use maxsim_candidates::{CentroidTable, Codebook, PageCodes, candidates, centroid_scores, two_stage_top_k};
pub use maxsim_cpu::{MaxSimCpu, cpu_features};
pub use maxsim_gpu::{DevicePages, MaxSimKernel, SegmentMaxForm};
pub use pointwise_cpu::{PointwiseOp, add_assign, apply_pointwise, softmax_rows};
pub use quant::{BlockEncoding, CpuPath, MatmulPath, QuantMatrix, dequantize_gguf, dequantize_reference, rounded_input};
pub use token_pooling::pool_tokens;
pub use topk::top_k;
