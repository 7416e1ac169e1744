// MaxSim late-interaction scoring in two passes: what both forms of the first pass share.
//
// For page p and query q: score = sum over q's tokens of max over p's tokens of dot(query, page).
// Pages are flattened with offsets (no padding) and cut into segments of at most 64 tokens, so
// that long pages spread over many workgroups.
//
//   segment_max: one workgroup of 64 threads per segment writes each query token's max over the
//                segment's tokens. Two forms, one joined to this file by the host:
//                maxsim_rows.wgsl (a thread per token) and maxsim_tiled.wgsl (a tiled product).
//   page_sum:    one thread per (page, query): max over the page's segments, summed over the
//                query's tokens. A page with no tokens scores 0.
//
// The host also prepends the element type: `enable f16; alias PageElem = f16;` where the device
// has shader-f16, else `alias PageElem = f32;`. Vectors are padded to a multiple of 4 dimensions.
// Mesa's lavapipe stops loops after about 65k iterations per invocation, so no invocation loops
// much more than (query tokens) x (vec4s per token) times.

struct Params {
    dim4: u32,            // vec4s per token
    num_pages: u32,
    num_segments: u32,
    num_queries: u32,
    query_tokens: u32,
    segment_groups_x: u32, // workgroups along x in segment_max (the rest wraps into y)
    sum_groups_x: u32,    // workgroups along x in page_sum
    pad: u32,
}

const WG: u32 = 64u;
const LOWEST: f32 = -3.4e38;

@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> pages: array<vec4<PageElem>>;
@group(0) @binding(2) var<storage, read> segments: array<vec2<u32>>;       // token [start, end)
@group(0) @binding(3) var<storage, read> page_segments: array<u32>;        // segment offsets per page
@group(0) @binding(4) var<storage, read> queries: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> query_offsets: array<u32>;
@group(0) @binding(6) var<storage, read_write> segment_maxima: array<f32>; // [segment][query token]
@group(0) @binding(7) var<storage, read_write> scores: array<f32>;         // [page][query]

@compute @workgroup_size(64)
fn page_sum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let pair = (wid.x + wid.y * params.sum_groups_x) * WG + lid;
    if (pair >= params.num_pages * params.num_queries) {
        return;
    }
    let page = pair / params.num_queries;
    let q = pair % params.num_queries;
    let first = page_segments[page];
    let last = page_segments[page + 1u];
    var total = 0.0;
    if (last > first) {
        for (var j = query_offsets[q]; j < query_offsets[q + 1u]; j = j + 1u) {
            var m = LOWEST;
            for (var s = first; s < last; s = s + 1u) {
                m = max(m, segment_maxima[s * params.query_tokens + j]);
            }
            total = total + m;
        }
    }
    scores[pair] = total;
}
