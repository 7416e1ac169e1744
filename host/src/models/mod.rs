//! Models: the embedded text encoder and decoder (burn), and the device they run on.

mod bert;
mod bert_cpu;
mod chat;
mod encoder;
pub mod gguf;
mod llama;
mod llama_native;

pub use bert::{AttentionFn, Bert, BertConfig, ModelError, burn_attention, wgsl_attention};
pub use bert_cpu::CpuBert;
pub use chat::{ChatTokenizer, ChatTurn};
pub use encoder::{MAX_WINDOW, TextEncoder, TokenVectors};
pub use llama::{CausalAttentionFn, KvCache, Llama, LlamaConfig, LogitsFor, burn_causal_attention, wgsl_causal_attention};
pub use llama_native::NativeDecoder;

use burn::prelude::Device;

use crate::config::ComputeBackend;

/// A burn device and whether it is burn's wgpu backend (where the WGSL kernels run).
#[derive(Debug, Clone)]
pub struct ComputeDevice {
    pub device: Device,
    pub wgpu: bool,
}

/// The burn device for a configured backend: `auto` takes wgpu only when a real GPU is there
/// (a software adapter is slower than the native CPU path), `cpu` is burn's flex backend.
pub fn burn_device(backend: ComputeBackend) -> ComputeDevice {
    let wgpu = match backend {
        ComputeBackend::Cpu => false,
        ComputeBackend::Wgpu => true,
        ComputeBackend::Auto => evident_kernels::GpuContext::new(evident_kernels::AdapterChoice::Hardware).is_ok(),
    };
    let device = if wgpu { Device::wgpu(burn::prelude::DeviceKind::DefaultDevice) } else { Device::flex() };
    ComputeDevice { device, wgpu }
}
