// Fused scaled dot-product attention with a key padding mask and online softmax.
//
// One invocation per query row (batch, head, position): it streams over the keys once, keeping
// the running maximum, the running sum of exponentials and the weighted sum of values, so the
// [seq x seq] score matrix is never written. Masked keys (mask 0) are skipped; a row whose keys
// are all masked yields zeros.
//
// Run by burn's wgpu backend as a raw kernel (template feature): the entry point is `main` and
// every binding is read_write because cubecl sub-allocates tensors inside shared buffers.
// Placeholders: {{ head_dim }}, {{ workgroup }}.

@group(0) @binding(0) var<storage, read_write> q: array<f32>;     // [batch, heads, seq, head_dim]
@group(0) @binding(1) var<storage, read_write> k: array<f32>;     // [batch, heads, seq, head_dim]
@group(0) @binding(2) var<storage, read_write> v: array<f32>;     // [batch, heads, seq, head_dim]
@group(0) @binding(3) var<storage, read_write> mask: array<f32>;  // [batch, seq], 1 = real token
@group(0) @binding(4) var<storage, read_write> out: array<f32>;   // [batch, heads, seq, head_dim]
@group(0) @binding(5) var<storage, read_write> info: array<u32>;  // batch, heads, seq, bits of scale, groups_x

const HD: u32 = {{ head_dim }}u;
const WG: u32 = {{ workgroup }}u;

@compute @workgroup_size({{ workgroup }}, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let batch = info[0];
    let heads = info[1];
    let seq = info[2];
    let scale = bitcast<f32>(info[3]);
    let row = (wid.x + wid.y * info[4]) * WG + lid;
    if (row >= batch * heads * seq) {
        return;
    }
    let b = row / (heads * seq);
    let kv = (row / seq) * seq * HD;

    var qv: array<f32, HD>;
    var acc: array<f32, HD>;
    for (var d = 0u; d < HD; d = d + 1u) {
        qv[d] = q[row * HD + d] * scale;
        acc[d] = 0.0;
    }
    var m = -3.4e38;
    var l = 0.0;
    for (var j = 0u; j < seq; j = j + 1u) {
        if (mask[b * seq + j] == 0.0) {
            continue;
        }
        let kb = kv + j * HD;
        var s = 0.0;
        for (var d = 0u; d < HD; d = d + 1u) {
            s = s + qv[d] * k[kb + d];
        }
        let m_new = max(m, s);
        let correction = exp(m - m_new);
        let p = exp(s - m_new);
        l = l * correction + p;
        for (var d = 0u; d < HD; d = d + 1u) {
            acc[d] = acc[d] * correction + p * v[kb + d];
        }
        m = m_new;
    }
    let inv = select(0.0, 1.0 / l, l > 0.0);
    for (var d = 0u; d < HD; d = d + 1u) {
        out[row * HD + d] = acc[d] * inv;
    }
}
