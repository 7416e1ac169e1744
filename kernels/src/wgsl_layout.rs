//! The size of a WGSL uniform struct, read from the shader's source at compile time, so that a
//! shader's parameter struct and its `#[repr(C)]` Rust mirror cannot drift apart unnoticed.

const fn is_space(b: u8) -> bool {
    b == b' ' || b == b'\t' || b == b'\n' || b == b'\r'
}

const fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Whether `src[at..]` starts with `word` as a whole identifier.
const fn word_at(src: &[u8], at: usize, word: &[u8]) -> bool {
    if at + word.len() > src.len() || (at > 0 && is_ident(src[at - 1])) {
        return false;
    }
    let mut i = 0;
    while i < word.len() {
        if src[at + i] != word[i] {
            return false;
        }
        i += 1;
    }
    at + word.len() == src.len() || !is_ident(src[at + word.len()])
}

/// The first position at or after `at` that is not white space or inside a `//` comment.
const fn skip_blank(src: &[u8], mut at: usize) -> usize {
    while at < src.len() {
        if is_space(src[at]) {
            at += 1;
        } else if at + 1 < src.len() && src[at] == b'/' && src[at + 1] == b'/' {
            while at < src.len() && src[at] != b'\n' {
                at += 1;
            }
        } else {
            break;
        }
    }
    at
}

/// The size in bytes of the WGSL struct `name` in `source`. Its fields must all be 4-byte
/// scalars (`u32`, `i32`, `f32`), whose layout is the same in WGSL and in `#[repr(C)]` Rust;
/// anything else (vectors, arrays, nested structs have their own alignment rules) stops the
/// build, as does a missing struct.
pub const fn wgsl_scalar_struct_size(source: &str, name: &str) -> usize {
    let src = source.as_bytes();
    let name = name.as_bytes();
    let mut at = 0;
    let mut start = usize::MAX;
    while at < src.len() {
        if at + 1 < src.len() && src[at] == b'/' && src[at + 1] == b'/' {
            at = skip_blank(src, at);
            continue;
        }
        if word_at(src, at, b"struct") {
            let n = skip_blank(src, at + 6);
            if word_at(src, n, name) {
                let brace = skip_blank(src, n + name.len());
                if brace < src.len() && src[brace] == b'{' {
                    start = brace + 1;
                    break;
                }
            }
        }
        at += 1;
    }
    assert!(start != usize::MAX, "the WGSL source has no such struct");
    let mut fields = 0;
    at = start;
    loop {
        at = skip_blank(src, at);
        assert!(at < src.len(), "the WGSL struct is not closed");
        if src[at] == b'}' {
            break;
        }
        // A field: `name: type,` (attributes such as @align would change the layout).
        assert!(src[at] != b'@', "the WGSL struct has an attribute; only plain 4-byte scalar fields are supported");
        while at < src.len() && is_ident(src[at]) {
            at += 1;
        }
        at = skip_blank(src, at);
        assert!(at < src.len() && src[at] == b':', "a WGSL struct field without a type");
        at = skip_blank(src, at + 1);
        assert!(word_at(src, at, b"u32") || word_at(src, at, b"i32") || word_at(src, at, b"f32"), "a WGSL struct field that is not a 4-byte scalar");
        at += 3;
        fields += 1;
        at = skip_blank(src, at);
        if at < src.len() && src[at] == b',' {
            at += 1;
        }
    }
    fields * 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_scalar_fields_past_comments() {
        let src = "// struct Params { a: u32 }\nstruct Other { x: f32 }\nstruct Params {\n  a: u32, // vec4s\n  b : i32,\n  c: f32\n}\n";
        assert_eq!(wgsl_scalar_struct_size(src, "Params"), 12);
        assert_eq!(wgsl_scalar_struct_size(src, "Other"), 4);
        assert_eq!(wgsl_scalar_struct_size(include_str!("../maxsim.wgsl"), "Params"), 32);
    }

    #[test]
    #[should_panic(expected = "not a 4-byte scalar")]
    fn refuses_vectors() {
        wgsl_scalar_struct_size("struct P { a: vec4<f32>, }", "P");
    }

    #[test]
    #[should_panic(expected = "no such struct")]
    fn refuses_a_missing_struct() {
        wgsl_scalar_struct_size("struct Params2 { a: u32 }", "Params");
    }
}
