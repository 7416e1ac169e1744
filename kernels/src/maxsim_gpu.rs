//! MaxSim on a wgpu device: page vectors stay resident between queries; each call uploads
//! only the queries and reads back one score per page and query.

use std::sync::Arc;

use half::f16;
use wgpu::util::DeviceExt;

use crate::gpu::{GpuContext, GpuError};
use crate::maxsim::{PageVectors, QueryBatch};

const SHADER: &str = include_str!("../maxsim.wgsl");
const SEGMENT_MAX_ROWS: &str = include_str!("../maxsim_rows.wgsl");
const SEGMENT_MAX_TILED: &str = include_str!("../maxsim_tiled.wgsl");

/// Which form of the first pass (each segment's max per query token) a kernel compiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SegmentMaxForm {
    /// A thread per page token, eight query tokens at a time (the measured one: the default).
    #[default]
    Rows,
    /// A tiled product of 64 tokens by 24 query tokens through workgroup memory (a candidate,
    /// not yet measured on a GPU in this form).
    Tiled,
}

impl SegmentMaxForm {
    /// Both forms, the default first.
    pub const ALL: [SegmentMaxForm; 2] = [SegmentMaxForm::Rows, SegmentMaxForm::Tiled];

    /// The form's name in tables.
    pub fn name(self) -> &'static str {
        match self {
            SegmentMaxForm::Rows => "rows",
            SegmentMaxForm::Tiled => "tiled",
        }
    }

    fn source(self) -> &'static str {
        match self {
            SegmentMaxForm::Rows => SEGMENT_MAX_ROWS,
            SegmentMaxForm::Tiled => SEGMENT_MAX_TILED,
        }
    }
}

/// Query tokens one dispatch can score: each thread loops over them all, so their count bounds
/// its loop (lavapipe stops loops near 65k iterations).
pub const MAX_QUERY_TOKENS: usize = 256;
/// Threads per workgroup in the shader, and the most tokens of a segment (one thread each).
const WG: usize = 64;
/// Most workgroups along one dispatch dimension.
const MAX_GROUPS_X: usize = 65_535;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    dim4: u32,
    num_pages: u32,
    num_segments: u32,
    num_queries: u32,
    query_tokens: u32,
    segment_groups_x: u32,
    sum_groups_x: u32,
    pad: u32,
}

// The shader reads its parameters as laid out in maxsim.wgsl; the build stops if the two differ.
const _: () = assert!(
    crate::wgsl_layout::wgsl_scalar_struct_size(SHADER, "Params") == std::mem::size_of::<Params>(),
    "maxsim.wgsl's Params and the Rust Params differ in size"
);

/// The compiled MaxSim pipeline on one device.
pub struct MaxSimKernel {
    ctx: Arc<GpuContext>,
    segment_max: wgpu::ComputePipeline,
    page_sum: wgpu::ComputePipeline,
    /// Largest page buffer one binding may hold.
    max_chunk_bytes: u64,
    /// Page vectors stored as f16 on the device (else f32).
    f16: bool,
    form: SegmentMaxForm,
}

/// Page vectors resident on the device, in chunks that each fit one storage binding.
pub struct DevicePages {
    chunks: Vec<PageChunk>,
    dim: usize,
    page_count: usize,
    vector_bytes: u64,
}

struct PageChunk {
    vectors: wgpu::Buffer,
    /// Token ranges of the segments, relative to the chunk.
    segments: wgpu::Buffer,
    /// Segment offsets per page.
    page_segments: wgpu::Buffer,
    num_segments: usize,
    first_page: usize,
    num_pages: usize,
}

impl DevicePages {
    /// Number of pages.
    pub fn page_count(&self) -> usize {
        self.page_count
    }

    /// Bytes of page vectors on the device (padded to whole vec4s): what one score call reads.
    pub fn vector_bytes(&self) -> u64 {
        self.vector_bytes
    }

    /// Number of device buffers the pages were split into.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }
}

impl MaxSimKernel {
    /// Compiles the kernel for the device (f16 page storage where the device has shader-f16).
    pub fn new(ctx: Arc<GpuContext>) -> Result<MaxSimKernel, GpuError> {
        let f16 = ctx.shader_f16;
        MaxSimKernel::with_storage(ctx, f16)
    }

    /// Compiles the kernel with f16 or f32 page storage (f16 needs shader-f16).
    pub fn with_storage(ctx: Arc<GpuContext>, f16: bool) -> Result<MaxSimKernel, GpuError> {
        MaxSimKernel::with_form(ctx, f16, SegmentMaxForm::default())
    }

    /// Compiles the kernel with the given page storage and form of the first pass.
    pub fn with_form(ctx: Arc<GpuContext>, f16: bool, form: SegmentMaxForm) -> Result<MaxSimKernel, GpuError> {
        if f16 && !ctx.shader_f16 {
            return Err(GpuError::Unsupported(format!("{} has no shader-f16", ctx.info.name)));
        }
        let prelude = if f16 { "enable f16;\nalias PageElem = f16;\n" } else { "alias PageElem = f32;\n" };
        let source = format!("{prelude}{SHADER}\n{}", form.source());
        let (segment_max, page_sum) = ctx.checked(|| {
            let module =
                ctx.device.create_shader_module(wgpu::ShaderModuleDescriptor { label: Some("maxsim.wgsl"), source: wgpu::ShaderSource::Wgsl(source.into()) });
            let pipeline = |entry: &str| {
                ctx.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(entry),
                    layout: None,
                    module: &module,
                    entry_point: Some(entry),
                    compilation_options: Default::default(),
                    cache: None,
                })
            };
            (pipeline("segment_max"), pipeline("page_sum"))
        })?;
        let limits = ctx.device.limits();
        let max_chunk_bytes = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size) & !15;
        Ok(MaxSimKernel { ctx, segment_max, page_sum, max_chunk_bytes, f16, form })
    }

    /// Caps the bytes of page vectors per device buffer (to exercise chunking in tests).
    pub fn with_max_chunk_bytes(mut self, bytes: u64) -> MaxSimKernel {
        self.max_chunk_bytes = self.max_chunk_bytes.min(bytes.max(16) & !15);
        self
    }

    /// The form of the first pass this kernel runs.
    pub fn form(&self) -> SegmentMaxForm {
        self.form
    }

    /// The device this kernel runs on.
    pub fn context(&self) -> &Arc<GpuContext> {
        &self.ctx
    }

    fn elem_bytes(&self) -> usize {
        if self.f16 { 2 } else { 4 }
    }

    /// Uploads page vectors to the device.
    pub fn upload(&self, pages: &PageVectors) -> Result<DevicePages, GpuError> {
        let dim = pages.dim();
        let dim4 = dim.div_ceil(4).max(1);
        let token_bytes = (dim4 * 4 * self.elem_bytes()) as u64;
        let mut chunks = Vec::new();
        let mut first = 0;
        while first < pages.page_count() || (chunks.is_empty() && pages.page_count() == 0) {
            let mut last = first;
            let mut tokens = 0u64;
            while last < pages.page_count() {
                let n = pages.token_range(last).len() as u64;
                if (tokens + n) * token_bytes > self.max_chunk_bytes {
                    break;
                }
                tokens += n;
                last += 1;
            }
            if last == first && first < pages.page_count() {
                return Err(GpuError::Unsupported(format!(
                    "page {first} has {} token vectors, more than one device buffer holds",
                    pages.token_range(first).len()
                )));
            }
            chunks.push(self.upload_chunk(pages, first..last, dim4)?);
            first = last;
            if pages.page_count() == 0 {
                break;
            }
        }
        let vector_bytes = pages.token_count() as u64 * token_bytes;
        Ok(DevicePages { chunks, dim, page_count: pages.page_count(), vector_bytes })
    }

    fn upload_chunk(&self, pages: &PageVectors, range: std::ops::Range<usize>, dim4: usize) -> Result<PageChunk, GpuError> {
        let dim = pages.dim();
        let base = pages.offsets()[range.start];
        let offsets: Vec<u32> = pages.offsets()[range.start..=range.end].iter().map(|o| o - base).collect();
        let tokens = (offsets.last().copied().unwrap_or(0) as usize).max(1);
        let src = &pages.data()[base as usize * dim..pages.offsets()[range.end] as usize * dim];
        let padded = dim4 * 4;
        let bytes: Vec<u8> = if self.f16 {
            let mut v = vec![f16::ZERO; tokens * padded];
            for (t, tok) in src.chunks_exact(dim.max(1)).enumerate() {
                v[t * padded..t * padded + dim].copy_from_slice(tok);
            }
            bytemuck::cast_slice(&v).to_vec()
        } else {
            let mut v = vec![0.0f32; tokens * padded];
            for (t, tok) in src.chunks_exact(dim.max(1)).enumerate() {
                for (d, x) in tok.iter().enumerate() {
                    v[t * padded + d] = x.to_f32();
                }
            }
            bytemuck::cast_slice(&v).to_vec()
        };
        let seg_tokens = WG as u32;
        let mut segments: Vec<[u32; 2]> = Vec::new();
        let mut page_segments = vec![0u32];
        for w in offsets.windows(2) {
            let mut t = w[0];
            while t < w[1] {
                let end = (t + seg_tokens).min(w[1]);
                segments.push([t, end]);
                t = end;
            }
            page_segments.push(segments.len() as u32);
        }
        let num_segments = segments.len();
        if segments.is_empty() {
            segments.push([0, 0]);
        }
        let device = &self.ctx.device;
        let storage = |label, contents: &[u8]| {
            device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: Some(label), contents, usage: wgpu::BufferUsages::STORAGE })
        };
        self.ctx.checked(|| PageChunk {
            vectors: storage("maxsim pages", &bytes),
            segments: storage("maxsim segments", bytemuck::cast_slice(&segments)),
            page_segments: storage("maxsim page segments", bytemuck::cast_slice(&page_segments)),
            num_segments,
            first_page: range.start,
            num_pages: range.len(),
        })
    }

    /// Scores every resident page against every query: `scores[page * queries + query]`.
    /// Outputs start as NaN, so a score the kernel failed to write can never pass as real.
    pub fn score(&self, pages: &DevicePages, queries: &QueryBatch) -> Result<Vec<f32>, GpuError> {
        self.score_with(pages, queries, None)
    }

    /// [`score`](Self::score), and the seconds its passes took on the GPU by the device's own
    /// timestamps (`None` where the device has none): the kernels' time without the submission,
    /// uploads and read-back around them.
    pub fn score_timed(&self, pages: &DevicePages, queries: &QueryBatch) -> Result<(Vec<f32>, Option<f64>), GpuError> {
        if !self.ctx.timestamps || queries.query_count() == 0 || pages.page_count == 0 {
            return Ok((self.score(pages, queries)?, None));
        }
        let timer = self.ctx.checked(|| {
            let set = self.ctx.device.create_query_set(&wgpu::QuerySetDescriptor { label: Some("maxsim time"), ty: wgpu::QueryType::Timestamp, count: 2 });
            let resolved = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("maxsim time resolved"),
                size: 16,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            let readback = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("maxsim time readback"),
                size: 16,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            PassTimer { set, resolved, readback }
        })?;
        let scores = self.score_with(pages, queries, Some(&timer))?;
        let view = timer.readback.slice(..).get_mapped_range().map_err(|e| GpuError::Readback(e.to_string()))?;
        let ticks: &[u64] = bytemuck::cast_slice(&view);
        let seconds = ticks[1].saturating_sub(ticks[0]) as f64 * f64::from(self.ctx.queue.get_timestamp_period()) * 1e-9;
        Ok((scores, Some(seconds)))
    }

    fn score_with(&self, pages: &DevicePages, queries: &QueryBatch, timer: Option<&PassTimer>) -> Result<Vec<f32>, GpuError> {
        if queries.dim() != pages.dim {
            return Err(GpuError::Unsupported(format!("queries have {} dimensions, pages {}", queries.dim(), pages.dim)));
        }
        let nq = queries.query_count();
        let mut scores = vec![f32::NAN; pages.page_count * nq];
        if nq == 0 || pages.page_count == 0 {
            return Ok(scores);
        }
        let groups = query_groups(queries)?;
        let dim4 = pages.dim.div_ceil(4).max(1);
        let device = &self.ctx.device;
        let mut readbacks = Vec::new();
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("maxsim") });
        let passes = groups.len() * pages.chunks.len();
        let mut pass_index = 0;
        self.ctx.checked(|| {
            for group in &groups {
                let (qdata, qoffsets) = pack_queries(queries, group.clone(), dim4);
                let qbuf = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some("maxsim queries"),
                    contents: bytemuck::cast_slice(&qdata),
                    usage: wgpu::BufferUsages::STORAGE,
                });
                let qoff = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some("maxsim query offsets"),
                    contents: bytemuck::cast_slice(&qoffsets),
                    usage: wgpu::BufferUsages::STORAGE,
                });
                let gq = group.len();
                for chunk in &pages.chunks {
                    let query_tokens = *qoffsets.last().unwrap_or(&0) as usize;
                    let (seg_x, seg_y) = grid(chunk.num_segments);
                    let (sum_x, sum_y) = grid((chunk.num_pages * gq).div_ceil(WG));
                    let params = Params {
                        dim4: dim4 as u32,
                        num_pages: chunk.num_pages as u32,
                        num_segments: chunk.num_segments as u32,
                        num_queries: gq as u32,
                        query_tokens: query_tokens as u32,
                        segment_groups_x: seg_x,
                        sum_groups_x: sum_x,
                        pad: 0,
                    };
                    let storage = |label, contents: &[u8], extra| {
                        device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                            label: Some(label),
                            contents,
                            usage: wgpu::BufferUsages::STORAGE | extra,
                        })
                    };
                    let pbuf = storage("maxsim params", bytemuck::bytes_of(&params), wgpu::BufferUsages::empty());
                    // Written whole by segment_max, so left to wgpu's zeroing on the device: filling it
                    // from the host moved 4 bytes per segment and query token each call.
                    let maxima = device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("maxsim segment maxima"),
                        size: ((chunk.num_segments * query_tokens).max(1) * 4) as u64,
                        usage: wgpu::BufferUsages::STORAGE,
                        mapped_at_creation: false,
                    });
                    let out_len = (chunk.num_pages * gq).max(1);
                    let out = storage("maxsim scores", bytemuck::cast_slice(&vec![f32::NAN; out_len]), wgpu::BufferUsages::COPY_SRC);
                    let readback = device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("maxsim readback"),
                        size: (out_len * 4) as u64,
                        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    });
                    let bind = |pipeline: &wgpu::ComputePipeline, entries: &[(u32, &wgpu::Buffer)]| {
                        let entries: Vec<wgpu::BindGroupEntry> =
                            entries.iter().map(|(binding, buf)| wgpu::BindGroupEntry { binding: *binding, resource: buf.as_entire_binding() }).collect();
                        device.create_bind_group(&wgpu::BindGroupDescriptor {
                            label: Some("maxsim"),
                            layout: &pipeline.get_bind_group_layout(0),
                            entries: &entries,
                        })
                    };
                    let seg_bind = bind(&self.segment_max, &[(0, &pbuf), (1, &chunk.vectors), (2, &chunk.segments), (4, &qbuf), (6, &maxima)]);
                    let sum_bind = bind(&self.page_sum, &[(0, &pbuf), (3, &chunk.page_segments), (5, &qoff), (6, &maxima), (7, &out)]);
                    {
                        // The first pass writes the start time and the last the end; the others get
                        // no timestamp writes at all (on lavapipe, passes given writes with neither
                        // index returned wrong scores).
                        let (first, last) = (pass_index == 0, pass_index + 1 == passes);
                        let timestamp_writes = timer.filter(|_| first || last).map(|t| wgpu::ComputePassTimestampWrites {
                            query_set: &t.set,
                            beginning_of_pass_write_index: first.then_some(0),
                            end_of_pass_write_index: last.then_some(1),
                        });
                        pass_index += 1;
                        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("maxsim"), timestamp_writes });
                        if chunk.num_segments > 0 {
                            pass.set_pipeline(&self.segment_max);
                            pass.set_bind_group(0, &seg_bind, &[]);
                            pass.dispatch_workgroups(seg_x, seg_y, 1);
                        }
                        pass.set_pipeline(&self.page_sum);
                        pass.set_bind_group(0, &sum_bind, &[]);
                        pass.dispatch_workgroups(sum_x, sum_y, 1);
                    }
                    encoder.copy_buffer_to_buffer(&out, 0, &readback, 0, (out_len * 4) as u64);
                    readbacks.push((readback, chunk.first_page, chunk.num_pages, group.start, gq));
                }
            }
            if let Some(t) = timer {
                encoder.resolve_query_set(&t.set, 0..2, &t.resolved, 0);
                encoder.copy_buffer_to_buffer(&t.resolved, 0, &t.readback, 0, 16);
            }
        })?;
        self.ctx.queue.submit([encoder.finish()]);
        for (readback, _, _, _, _) in &readbacks {
            readback.slice(..).map_async(wgpu::MapMode::Read, |_| {});
        }
        if let Some(t) = timer {
            t.readback.slice(..).map_async(wgpu::MapMode::Read, |_| {});
        }
        device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| GpuError::Readback(e.to_string()))?;
        for (readback, first_page, num_pages, first_query, gq) in readbacks {
            let view = readback.slice(..).get_mapped_range().map_err(|e| GpuError::Readback(e.to_string()))?;
            let got: &[f32] = bytemuck::cast_slice(&view);
            for p in 0..num_pages {
                for q in 0..gq {
                    scores[(first_page + p) * nq + first_query + q] = got[p * gq + q];
                }
            }
        }
        Ok(scores)
    }
}

/// A timestamp query set and the buffers its two times pass through to the host.
struct PassTimer {
    set: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    readback: wgpu::Buffer,
}

/// A dispatch grid for `groups` workgroups: x up to the per-dimension limit, the rest in y.
fn grid(groups: usize) -> (u32, u32) {
    let x = groups.clamp(1, MAX_GROUPS_X);
    (x as u32, groups.div_ceil(x).max(1) as u32)
}

/// Splits the batch into runs of whole queries with at most MAX_QUERY_TOKENS tokens each.
fn query_groups(queries: &QueryBatch) -> Result<Vec<std::ops::Range<usize>>, GpuError> {
    let mut groups = Vec::new();
    let mut start = 0;
    let mut tokens = 0;
    for q in 0..queries.query_count() {
        let n = queries.token_range(q).len();
        if n > MAX_QUERY_TOKENS {
            return Err(GpuError::Unsupported(format!("a query has {n} token vectors; the GPU kernel takes at most {MAX_QUERY_TOKENS}")));
        }
        if tokens + n > MAX_QUERY_TOKENS {
            groups.push(start..q);
            start = q;
            tokens = 0;
        }
        tokens += n;
    }
    groups.push(start..queries.query_count());
    Ok(groups)
}

/// The group's query vectors padded to `dim4 * 4`, and its token offsets from 0.
fn pack_queries(queries: &QueryBatch, group: std::ops::Range<usize>, dim4: usize) -> (Vec<f32>, Vec<u32>) {
    let dim = queries.dim();
    let first = queries.offsets()[group.start];
    let last = queries.offsets()[group.end];
    let mut data = vec![0.0f32; ((last - first) as usize).max(1) * dim4 * 4];
    for (i, t) in (first..last).enumerate() {
        data[i * dim4 * 4..i * dim4 * 4 + dim].copy_from_slice(queries.token(t as usize));
    }
    let offsets = queries.offsets()[group.start..=group.end].iter().map(|o| o - first).collect();
    (data, offsets)
}
