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
    /// Whether passes can write GPU timestamps (kernel time without the submission around it).
    pub timestamps: bool,
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
        let timestamps = adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        let required_features = adapter.features() & (wgpu::Features::SHADER_F16 | wgpu::Features::TIMESTAMP_QUERY);
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("evident kernels"),
            required_features,
            required_limits: adapter.limits(),
            ..Default::default()
        }))
        .map_err(|e| GpuError::Device(e.to_string()))?;
        device.on_uncaptured_error(Arc::new(|e: wgpu::Error| tracing::error!("uncaptured GPU error: {e}")));
        tracing::info!(adapter = %info.name, backend = ?info.backend, kind = ?info.device_type, shader_f16, timestamps, "GPU opened");
        Ok(Arc::new(GpuContext { device, queue, info, shader_f16, timestamps }))
    }

    /// Whether this is a software adapter (lavapipe and the like).
    pub fn is_software(&self) -> bool {
        self.info.device_type == wgpu::DeviceType::Cpu
    }

    /// Bytes a device-to-device buffer copy moves per second, read and written counted (best of
    /// `runs`, after one warm-up): the memory bound a streaming kernel is measured against.
    pub fn copy_bandwidth(&self, bytes: u64, runs: usize) -> Result<f64, GpuError> {
        // Several copies per submission, so that one submission's latency is a small share.
        const COPIES: u64 = 8;
        let bytes = bytes.min(self.device.limits().max_buffer_size) & !3;
        let buffer =
            |usage| self.device.create_buffer(&wgpu::BufferDescriptor { label: Some("copy bandwidth"), size: bytes, usage, mapped_at_creation: false });
        let (src, dst) = self.checked(|| (buffer(wgpu::BufferUsages::COPY_SRC), buffer(wgpu::BufferUsages::COPY_DST)))?;
        let mut best = f64::INFINITY;
        for run in 0..=runs {
            let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("copy bandwidth") });
            for _ in 0..COPIES {
                encoder.copy_buffer_to_buffer(&src, 0, &dst, 0, bytes);
            }
            let start = std::time::Instant::now();
            self.queue.submit([encoder.finish()]);
            self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| GpuError::Readback(e.to_string()))?;
            if run > 0 {
                best = best.min(start.elapsed().as_secs_f64());
            }
        }
        Ok((2 * COPIES * bytes) as f64 / best)
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
