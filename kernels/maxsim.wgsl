// MaxSim late-interaction scoring in two passes.
//
// For page p and query q: score = sum over q's tokens of max over p's tokens of dot(query, page).
// Pages are flattened with offsets (no padding) and cut into segments of at most 64 tokens, so
// that long pages spread over many workgroups.
//
//   segment_max: one workgroup per segment, one thread per segment token. Each thread takes the
//                batch's query tokens (at most 256) eight at a time: eight dot products of its
//                token, summed over the dimensions in registers, the query vectors read by all
//                threads at the same address (one broadcast read, where a thread per query token
//                had left most of the threads idle for a 20-token question). The workgroup then
//                takes each query token's max over its tokens in workgroup memory.
//   page_sum:    one thread per (page, query): max over the page's segments, summed over the
//                query's tokens. A page with no tokens scores 0.
//
// No invocation loops more than about (query tokens) x (vec4s per token) times: Mesa's lavapipe
// stops loops after about 65k iterations per invocation.
//
// The host prepends the element type: `enable f16; alias PageElem = f16;` where the device has
// shader-f16, else `alias PageElem = f32;`. Vectors are padded to a multiple of 4 dimensions.

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
// Query tokens one thread scores at a time (its accumulators).
const QB: u32 = 8u;
const LOWEST: f32 = -3.4e38;

@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> pages: array<vec4<PageElem>>;
@group(0) @binding(2) var<storage, read> segments: array<vec2<u32>>;       // token [start, end)
@group(0) @binding(3) var<storage, read> page_segments: array<u32>;        // segment offsets per page
@group(0) @binding(4) var<storage, read> queries: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> query_offsets: array<u32>;
@group(0) @binding(6) var<storage, read_write> segment_maxima: array<f32>; // [segment][query token]
@group(0) @binding(7) var<storage, read_write> scores: array<f32>;         // [page][query]

// [query token of the block][segment token]: the block's dot products, then their maxima.
var<workgroup> dots: array<f32, 512>;

@compute @workgroup_size(64)
fn segment_max(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let seg = wid.x + wid.y * params.segment_groups_x;
    if (seg >= params.num_segments) {
        return;
    }
    let dim4 = params.dim4;
    let nq = params.query_tokens;
    let range = segments[seg];
    let n = range.y - range.x;
    let has_token = lid < n;
    // Threads past the segment's end read its last token and are left out of the max.
    let tbase = (range.x + min(lid, max(n, 1u) - 1u)) * dim4;

    for (var q0 = 0u; q0 < nq; q0 = q0 + QB) {
        var acc = array<f32, 8>(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
        for (var d = 0u; d < dim4; d = d + 1u) {
            let p = vec4<f32>(pages[tbase + d]);
            for (var i = 0u; i < QB; i = i + 1u) {
                let j = min(q0 + i, nq - 1u);
                acc[i] = acc[i] + dot(p, queries[j * dim4 + d]);
            }
        }
        for (var i = 0u; i < QB; i = i + 1u) {
            dots[i * WG + lid] = select(LOWEST, acc[i], has_token);
        }
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s = s >> 1u) {
            if (lid < s) {
                for (var i = 0u; i < QB; i = i + 1u) {
                    dots[i * WG + lid] = max(dots[i * WG + lid], dots[i * WG + lid + s]);
                }
            }
            workgroupBarrier();
        }
        if (lid < QB && q0 + lid < nq) {
            segment_maxima[seg * nq + q0 + lid] = dots[lid * WG];
        }
        workgroupBarrier();
    }
}

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
