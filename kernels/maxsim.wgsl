// MaxSim late-interaction scoring in two passes.
//
// For page p and query q: score = sum over q's tokens of max over p's tokens of dot(query, page).
// Pages are flattened with offsets (no padding) and cut into segments of a few dozen tokens, so
// that long pages spread over many workgroups and no invocation runs a long loop (Mesa's
// lavapipe stops loops after about 65k iterations per invocation).
//
//   segment_max: one workgroup per segment; each of its 64 threads owns up to 4 of the batch's
//                query tokens (at most 256) and writes their best dot product over the segment.
//                Segment tokens are staged through workgroup memory, shared by all threads.
//   page_sum:    one thread per (page, query): max over the page's segments, summed over the
//                query's tokens. A page with no tokens scores 0.
//
// The host prepends the element type: `enable f16; alias PageElem = f16;` where the device has
// shader-f16, else `alias PageElem = f32;`. Vectors are padded to a multiple of 4 dimensions.

struct Params {
    dim4: u32,            // vec4s per token
    num_pages: u32,
    num_segments: u32,
    num_queries: u32,
    query_tokens: u32,
    tile_tokens: u32,     // tokens per workgroup tile: floor(TILE_VEC4 / dim4)
    segment_groups_x: u32, // workgroups along x in segment_max (the rest wraps into y)
    sum_groups_x: u32,    // workgroups along x in page_sum
}

const WG: u32 = 64u;
const PER_THREAD: u32 = 4u;
const TILE_VEC4: u32 = 1024u;
const LOWEST: f32 = -3.4e38;

@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> pages: array<vec4<PageElem>>;
@group(0) @binding(2) var<storage, read> segments: array<vec2<u32>>;       // token [start, end)
@group(0) @binding(3) var<storage, read> page_segments: array<u32>;        // segment offsets per page
@group(0) @binding(4) var<storage, read> queries: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> query_offsets: array<u32>;
@group(0) @binding(6) var<storage, read_write> segment_maxima: array<f32>; // [segment][query token]
@group(0) @binding(7) var<storage, read_write> scores: array<f32>;         // [page][query]

var<workgroup> tile: array<vec4<f32>, TILE_VEC4>;

@compute @workgroup_size(64)
fn segment_max(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let seg = wid.x + wid.y * params.segment_groups_x;
    if (seg >= params.num_segments) {
        return;
    }
    let dim4 = params.dim4;
    let range = segments[seg];
    var best = array<f32, 4>(LOWEST, LOWEST, LOWEST, LOWEST);

    for (var t0 = range.x; t0 < range.y; t0 = t0 + params.tile_tokens) {
        let n = min(params.tile_tokens, range.y - t0);
        for (var i = lid; i < n * dim4; i = i + WG) {
            tile[i] = vec4<f32>(pages[t0 * dim4 + i]);
        }
        workgroupBarrier();
        for (var k = 0u; k < PER_THREAD; k = k + 1u) {
            let j = lid + k * WG;
            if (j < params.query_tokens) {
                let qbase = j * dim4;
                var m = best[k];
                for (var t = 0u; t < n; t = t + 1u) {
                    var acc = 0.0;
                    let tbase = t * dim4;
                    for (var d = 0u; d < dim4; d = d + 1u) {
                        acc = acc + dot(queries[qbase + d], tile[tbase + d]);
                    }
                    m = max(m, acc);
                }
                best[k] = m;
            }
        }
        workgroupBarrier();
    }
    for (var k = 0u; k < PER_THREAD; k = k + 1u) {
        let j = lid + k * WG;
        if (j < params.query_tokens) {
            segment_maxima[seg * params.query_tokens + j] = best[k];
        }
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
