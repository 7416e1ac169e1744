// MaxSim's first pass, a thread per token: one workgroup per segment, one thread per segment
// token. Each thread takes the batch's query tokens (at most 256) eight at a time: eight dot
// products of its token, summed over the dimensions in registers, the query vectors read by all
// threads at the same address (one broadcast read). The workgroup then takes each query token's
// max over its tokens in workgroup memory. Measured on an H200: 146 GB/s of page vectors at 20
// query tokens (README, "On a GPU"). The host joins it to maxsim.wgsl.

// Query tokens one thread scores at a time (its accumulators).
const QB: u32 = 8u;

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

