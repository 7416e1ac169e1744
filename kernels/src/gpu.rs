//! One wgpu device for the kernels: adapter choice, features, limits and error capture.

use std::sync::Arc;

use thiserror::Error;

/// What went wrong on the GPU side.
#[derive(Debug, Error)]
pub enum GpuError {
    #[error("no usable GPU adapter was found ({0}); install a Vulkan driver (or Mesa's software one, mesa-vulkan-drivers) or use the CPU backend")]
    NoAdapter(String),
    #[error("the GPU device could not be opened: {0}")]
    Device(String),
    #[error("the GPU rejected a kernel: {0}")]
    Validation(String),
    #[error("reading results back from the GPU failed: {0}")]
    Readback(String),
    #[error("{0}")]
    Unsupported(String),
}

/// Which adapters may serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdapterChoice {
    /// The best adapter there is, software ones (lavapipe) included.
    Any,
    /// Only real GPUs; software adapters are refused.
    Hardware,
}

/// An opened wgpu device.
pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    /// Whether shaders may use f16.
    pub shader_f16: bool,
}

impl GpuContext {
    /// Opens the best adapter allowed by `choice`: discrete, then integrated, virtual and
    /// software. `WGPU_BACKEND` and friends narrow the search as usual.
    pub fn new(choice: AdapterChoice) -> Result<Arc<GpuContext>, GpuError> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        if choice == AdapterChoice::Hardware {
            // GL adapters are never the fast path, and probing EGL on a headless box logs errors.
            desc.backends.remove(wgpu::Backends::GL);
        }
        let instance = wgpu::Instance::new(desc);
        let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
        let rank = |t: wgpu::DeviceType| match t {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Other => 3,
            wgpu::DeviceType::Cpu => 4,
        };
        let seen: Vec<String> = adapters.iter().map(|a| format!("{} ({:?})", a.get_info().name, a.get_info().device_type)).collect();
        let adapter = adapters
            .into_iter()
            .filter(|a| a.get_info().backend != wgpu::Backend::Gl || choice == AdapterChoice::Any)
            .filter(|a| choice == AdapterChoice::Any || a.get_info().device_type != wgpu::DeviceType::Cpu)
            .min_by_key(|a| (rank(a.get_info().device_type), a.get_info().backend == wgpu::Backend::Gl))
            .ok_or_else(|| GpuError::NoAdapter(if seen.is_empty() { "none at all".into() } else { format!("only {}", seen.join(", ")) }))?;
        let info = adapter.get_info();
        let shader_f16 = adapter.features().contains(wgpu::Features::SHADER_F16);
        let required_features = if shader_f16 { wgpu::Features::SHADER_F16 } else { wgpu::Features::empty() };
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("evident kernels"),
            required_features,
            required_limits: adapter.limits(),
            ..Default::default()
        }))
        .map_err(|e| GpuError::Device(e.to_string()))?;
        device.on_uncaptured_error(Arc::new(|e: wgpu::Error| tracing::error!("uncaptured GPU error: {e}")));
        tracing::info!(adapter = %info.name, backend = ?info.backend, kind = ?info.device_type, shader_f16, "GPU opened");
        Ok(Arc::new(GpuContext { device, queue, info, shader_f16 }))
    }

    /// Whether this is a software adapter (lavapipe and the like).
    pub fn is_software(&self) -> bool {
        self.info.device_type == wgpu::DeviceType::Cpu
    }

    /// Runs `f` and turns any validation error it raised into a `GpuError`.
    pub(crate) fn checked<T>(&self, f: impl FnOnce() -> T) -> Result<T, GpuError> {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let value = f();
        match pollster::block_on(scope.pop()) {
            Some(e) => Err(GpuError::Validation(e.to_string())),
            None => Ok(value),
        }
    }
}
