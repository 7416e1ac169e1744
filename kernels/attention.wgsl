// Fused scaled dot-product attention with online softmax: a key padding mask (encoder), or a
// causal mask with fewer key/value heads than query heads (decoder, grouped-query attention).
//
// One invocation per query row (batch, head, position): it streams over the keys once, keeping
// the running maximum, the running sum of exponentials and the weighted sum of values, so the
// [q_len x kv_len] score matrix is never written. Masked keys are skipped; a row whose keys are
// all masked yields zeros. Causal masking aligns the last query with the last key (the queries
// are the newest tokens): query i sees keys j <= i + kv_len - q_len.
//
// Run by burn's wgpu backend as a raw kernel (template feature): the entry point is `main` and
// every binding is read_write because cubecl sub-allocates tensors inside shared buffers.
// Placeholders: {{ head_dim }}, {{ workgroup }}.

@group(0) @binding(0) var<storage, read_write> q: array<f32>;     // [batch, heads, q_len, head_dim]
@group(0) @binding(1) var<storage, read_write> k: array<f32>;     // [batch, kv_heads, kv_len, head_dim]
@group(0) @binding(2) var<storage, read_write> v: array<f32>;     // [batch, kv_heads, kv_len, head_dim]
@group(0) @binding(3) var<storage, read_write> mask: array<f32>;  // [batch, kv_len], 1 = real token (read when info[7] is 1)
@group(0) @binding(4) var<storage, read_write> out: array<f32>;   // [batch, heads, q_len, head_dim]
// batch, heads, q_len, bits of scale, groups_x, kv_heads, kv_len, use mask, causal
@group(0) @binding(5) var<storage, read_write> info: array<u32>;

const HD: u32 = {{ head_dim }}u;
const WG: u32 = {{ workgroup }}u;

@compute @workgroup_size({{ workgroup }}, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let batch = info[0];
    let heads = info[1];
    let q_len = info[2];
    let scale = bitcast<f32>(info[3]);
    let kv_heads = info[5];
    let kv_len = info[6];
    let use_mask = info[7] == 1u;
    let causal = info[8] == 1u;
    let row = (wid.x + wid.y * info[4]) * WG + lid;
    if (row >= batch * heads * q_len) {
        return;
    }
    let i = row % q_len;
    let h = (row / q_len) % heads;
    let b = row / (heads * q_len);
    let kv = ((b * kv_heads + h / (heads / kv_heads)) * kv_len) * HD;
    var last = kv_len;
    if (causal) {
        last = min(kv_len, i + 1u + kv_len - q_len);
    }

    var qv: array<f32, HD>;
    var acc: array<f32, HD>;
    for (var d = 0u; d < HD; d = d + 1u) {
        qv[d] = q[row * HD + d] * scale;
        acc[d] = 0.0;
    }
    var m = -3.4e38;
    var l = 0.0;
    for (var j = 0u; j < last; j = j + 1u) {
        if (use_mask && mask[b * kv_len + j] == 0.0) {
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
