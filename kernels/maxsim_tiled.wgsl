// MaxSim's first pass as a tiled product: one workgroup per segment, the segment's tokens (64)
// by the batch's query tokens (24 per pass). Each tile of 32 dimensions is read from device
// memory once, coalesced, into workgroup memory (as f32), and each thread accumulates a 4-token
// by 6-query block in registers: 10 reads of workgroup memory feed 96 multiply-adds, where the
// thread-per-token form feeds 32 with 9 reads of device memory, its threads' rows 768 bytes apart.
// Workgroup memory stays under WebGPU's guaranteed 16 KiB. The host joins it to maxsim.wgsl.
//
// Not yet the default: its first form, with the accumulators in an array, ran at 57 GB/s on an
// H200 against the thread-per-token form's 146 (the driver likely kept the array in local
// memory); this form, with named accumulators, has not met a GPU yet. `bench maxsim` runs both.

// Threads along a segment's tokens and along the query tokens (TG x QG = WG).
const TG: u32 = 16u;
const QG: u32 = 4u;
// Tokens and query tokens one thread scores (its TM x QN accumulators): thread (tg, qg) takes
// tokens tg + TG * m and query tokens qg * QN + i.
const TM: u32 = 4u;
const QN: u32 = 6u;
// Query tokens a pass scores.
const QT: u32 = QG * QN;
// vec4s of dimensions per tile, and the tiles' row stride in workgroup memory: 9 vec4s put the
// rows 8 threads read at once in distinct banks.
const KC: u32 = 8u;
const KS: u32 = 9u;
// Tile rows the workgroup loads at once (one vec4 per thread).
const ROWS: u32 = WG / KC;

var<workgroup> page_tile: array<vec4<f32>, TG * TM * KS>;   // [token 64][KS]
var<workgroup> query_tile: array<vec4<f32>, QT * KS>;  // [query token 24][KS]
var<workgroup> partial_max: array<f32, QT * TG>;       // [query token 24][token group 16]

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
    let tg = lid % TG;
    let qg = lid / TG;
    // Tile loads: thread lid reads column lid % KC of rows lid / KC + ROWS * r.
    let load_k = lid % KC;
    let load_row = lid / KC;

    let row0 = tg * KS;
    let qrow0 = qg * QN * KS;
    for (var q0 = 0u; q0 < nq; q0 = q0 + QT) {
        // Named accumulators, not an array: an array indexed in nested loops may be left in
        // local memory by the driver (this kernel's first tiled form, with one, ran at a third
        // of the untiled one's speed on an H200). a_m holds token m's dots with the thread's
        // query tokens 0-3, b_m with 4-5.
        var a0 = vec4<f32>(0.0);
        var a1 = vec4<f32>(0.0);
        var a2 = vec4<f32>(0.0);
        var a3 = vec4<f32>(0.0);
        var b0 = vec2<f32>(0.0);
        var b1 = vec2<f32>(0.0);
        var b2 = vec2<f32>(0.0);
        var b3 = vec2<f32>(0.0);
        for (var k0 = 0u; k0 < dim4; k0 = k0 + KC) {
            let k = k0 + load_k;
            workgroupBarrier();
            for (var r = 0u; r < TG * TM / ROWS; r = r + 1u) {
                let t = load_row + ROWS * r;
                var v = vec4<f32>(0.0);
                if (t < n && k < dim4) {
                    v = vec4<f32>(pages[(range.x + t) * dim4 + k]);
                }
                page_tile[t * KS + load_k] = v;
            }
            for (var r = 0u; r < QT / ROWS; r = r + 1u) {
                let i = load_row + ROWS * r;
                let j = q0 + i;
                var v = vec4<f32>(0.0);
                if (j < nq && k < dim4) {
                    v = queries[j * dim4 + k];
                }
                query_tile[i * KS + load_k] = v;
            }
            workgroupBarrier();
            for (var kk = 0u; kk < KC; kk = kk + 1u) {
                // Columns are query tokens: p * q gives p's dot with each.
                let q = mat4x4<f32>(
                    query_tile[qrow0 + kk],
                    query_tile[qrow0 + KS + kk],
                    query_tile[qrow0 + 2u * KS + kk],
                    query_tile[qrow0 + 3u * KS + kk],
                );
                let q2 = mat2x4<f32>(query_tile[qrow0 + 4u * KS + kk], query_tile[qrow0 + 5u * KS + kk]);
                let p0 = page_tile[row0 + kk];
                let p1 = page_tile[row0 + TG * KS + kk];
                let p2 = page_tile[row0 + 2u * TG * KS + kk];
                let p3 = page_tile[row0 + 3u * TG * KS + kk];
                a0 = a0 + p0 * q;
                a1 = a1 + p1 * q;
                a2 = a2 + p2 * q;
                a3 = a3 + p3 * q;
                b0 = b0 + p0 * q2;
                b1 = b1 + p1 * q2;
                b2 = b2 + p2 * q2;
                b3 = b3 + p3 * q2;
            }
        }
        // Each thread's max over its tokens (token 0 of the thread always exists where any
        // does: n >= 1 for a stored segment), then the workgroup's over the token groups.
        var best_a = vec4<f32>(LOWEST);
        var best_b = vec2<f32>(LOWEST);
        if (tg < n) {
            best_a = a0;
            best_b = b0;
        }
        if (tg + TG < n) {
            best_a = max(best_a, a1);
            best_b = max(best_b, b1);
        }
        if (tg + 2u * TG < n) {
            best_a = max(best_a, a2);
            best_b = max(best_b, b2);
        }
        if (tg + 3u * TG < n) {
            best_a = max(best_a, a3);
            best_b = max(best_b, b3);
        }
        let out = qg * QN * TG + tg;
        partial_max[out] = best_a.x;
        partial_max[out + TG] = best_a.y;
        partial_max[out + 2u * TG] = best_a.z;
        partial_max[out + 3u * TG] = best_a.w;
        partial_max[out + 4u * TG] = best_b.x;
        partial_max[out + 5u * TG] = best_b.y;
        workgroupBarrier();
        if (lid < QT && q0 + lid < nq) {
            var best = LOWEST;
            for (var t = 0u; t < TG; t = t + 1u) {
                best = max(best, partial_max[lid * TG + t]);
            }
            segment_maxima[seg * nq + q0 + lid] = best;
        }
    }
}

