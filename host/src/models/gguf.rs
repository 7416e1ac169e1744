//! A reader for GGUF model files (llama.cpp's format): metadata, tensor directory, and the
//! quantised tensor types, dequantised to f32.
//!
//! The header is read at open; a tensor's bytes are read from the file when asked for, so a
//! model is never held twice in memory while it loads (the 1.5B model's file is 1.1 GB).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use evident_kernels::{BlockEncoding, QuantMatrix, dequantize_gguf};
use half::{bf16, f16};
use thiserror::Error;

/// Why a GGUF file could not be read.
#[derive(Debug, Error)]
pub enum GgufError {
    #[error("cannot read the model file {path}: {source}; run the set-up (scripts/setup.sh)")]
    Read { path: String, source: std::io::Error },
    #[error("the model file is not GGUF: {0}")]
    Format(String),
    #[error("the model file lacks {0}")]
    Missing(String),
    #[error(
        "tensor {name} uses the {kind} encoding, which Evident does not read; use a file quantised with F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K or Q6_K"
    )]
    Unsupported { name: String, kind: String },
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Array(Vec<GgufValue>),
}

impl GgufValue {
    /// The value as an integer, when it is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            GgufValue::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// The value as a float (integers convert).
    pub fn as_float(&self) -> Option<f64> {
        match self {
            GgufValue::Float(v) => Some(*v),
            GgufValue::Int(v) => Some(*v as f64),
            _ => None,
        }
    }

    /// The value as a string, when it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The value as an array, when it is one.
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(v) => Some(v),
            _ => None,
        }
    }
}

/// How a tensor's elements are stored (ggml's type numbers).
// ggml's own names (Q4_K, Q6_K), as every GGUF tool spells them.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorEncoding {
    F32,
    F16,
    Bf16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4_K,
    Q6_K,
    Other(u32),
}

impl TensorEncoding {
    fn from_code(code: u32) -> TensorEncoding {
        match code {
            0 => TensorEncoding::F32,
            1 => TensorEncoding::F16,
            2 => TensorEncoding::Q4_0,
            3 => TensorEncoding::Q4_1,
            6 => TensorEncoding::Q5_0,
            7 => TensorEncoding::Q5_1,
            8 => TensorEncoding::Q8_0,
            12 => TensorEncoding::Q4_K,
            14 => TensorEncoding::Q6_K,
            30 => TensorEncoding::Bf16,
            other => TensorEncoding::Other(other),
        }
    }

    /// (elements per block, bytes per block), or None for types this reader does not decode.
    fn block(self) -> Option<(usize, usize)> {
        Some(match self {
            TensorEncoding::F32 => (1, 4),
            TensorEncoding::F16 | TensorEncoding::Bf16 => (1, 2),
            TensorEncoding::Q4_0 => (32, 18),
            TensorEncoding::Q4_1 => (32, 20),
            TensorEncoding::Q5_0 => (32, 22),
            TensorEncoding::Q5_1 => (32, 24),
            TensorEncoding::Q8_0 => (32, 34),
            TensorEncoding::Q4_K => (256, 144),
            TensorEncoding::Q6_K => (256, 210),
            TensorEncoding::Other(_) => return None,
        })
    }

    /// The block encoding the matrix kernels read directly, if this is one.
    pub fn blocks(self) -> Option<BlockEncoding> {
        Some(match self {
            TensorEncoding::Q4_0 => BlockEncoding::Q4_0,
            TensorEncoding::Q4_1 => BlockEncoding::Q4_1,
            TensorEncoding::Q5_0 => BlockEncoding::Q5_0,
            TensorEncoding::Q8_0 => BlockEncoding::Q8_0,
            TensorEncoding::Q4_K => BlockEncoding::Q4_K,
            TensorEncoding::Q6_K => BlockEncoding::Q6_K,
            _ => return None,
        })
    }
}

/// Where one tensor lives in the file.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    /// ggml order: `dims[0]` varies fastest (the row length).
    pub dims: Vec<usize>,
    pub encoding: TensorEncoding,
    offset: usize,
}

impl TensorInfo {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where the tensor data is read from.
enum Source {
    Bytes(Vec<u8>),
    File(File),
}

/// A GGUF file: its header in memory, its tensors read on demand.
pub struct GgufFile {
    source: Source,
    len: usize,
    data_start: usize,
    /// Metadata by key.
    pub metadata: BTreeMap<String, GgufValue>,
    /// Tensor directory by name.
    pub tensors: BTreeMap<String, TensorInfo>,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], GgufError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| GgufError::Format(format!("the header runs past the end of the file at byte {}", self.pos)))?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap_or_default()))
    }

    fn u64(&mut self) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap_or_default()))
    }

    fn len(&mut self) -> Result<usize, GgufError> {
        let n = self.u64()?;
        // No count can exceed the bytes left; this also bounds allocations from a hostile file.
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.bytes.len() - self.pos)
            .ok_or_else(|| GgufError::Format(format!("a length of {n} at byte {} is larger than the file", self.pos)))
    }

    fn string(&mut self) -> Result<String, GgufError> {
        let n = self.len()?;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }

    fn value(&mut self, kind: u32, depth: usize) -> Result<GgufValue, GgufError> {
        let mut fixed = |n: usize| -> Result<[u8; 8], GgufError> {
            let mut out = [0u8; 8];
            out[..n].copy_from_slice(self.take(n)?);
            Ok(out)
        };
        Ok(match kind {
            0 => GgufValue::Int(i64::from(fixed(1)?[0])),
            1 => GgufValue::Int(i64::from(fixed(1)?[0] as i8)),
            2 => GgufValue::Int(i64::from(u16::from_le_bytes(fixed(2)?[..2].try_into().unwrap_or_default()))),
            3 => GgufValue::Int(i64::from(i16::from_le_bytes(fixed(2)?[..2].try_into().unwrap_or_default()))),
            4 => GgufValue::Int(i64::from(u32::from_le_bytes(fixed(4)?[..4].try_into().unwrap_or_default()))),
            5 => GgufValue::Int(i64::from(i32::from_le_bytes(fixed(4)?[..4].try_into().unwrap_or_default()))),
            6 => GgufValue::Float(f64::from(f32::from_le_bytes(fixed(4)?[..4].try_into().unwrap_or_default()))),
            7 => GgufValue::Bool(fixed(1)?[0] != 0),
            8 => GgufValue::Str(self.string()?),
            9 => {
                if depth > 4 {
                    return Err(GgufError::Format("arrays nest too deeply".into()));
                }
                let inner = self.u32()?;
                let n = self.len()?;
                let mut items = Vec::with_capacity(n.min(1 << 20));
                for _ in 0..n {
                    items.push(self.value(inner, depth + 1)?);
                }
                GgufValue::Array(items)
            }
            10 => GgufValue::Int(u64::from_le_bytes(fixed(8)?) as i64),
            11 => GgufValue::Int(i64::from_le_bytes(fixed(8)?)),
            12 => GgufValue::Float(f64::from_le_bytes(fixed(8)?)),
            other => return Err(GgufError::Format(format!("unknown metadata type {other}"))),
        })
    }
}

impl GgufFile {
    /// Reads a GGUF file's header and indexes its tensors.
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let read_error = |source| GgufError::Read { path: path.display().to_string(), source };
        let file = File::open(path).map_err(read_error)?;
        let len = file.metadata().map_err(read_error)?.len() as usize;
        // The header's size is not stored: read a prefix, and a longer one if it runs past it.
        let mut prefix = 16 << 20;
        loop {
            let mut head = vec![0u8; prefix.min(len)];
            file.read_exact_at(&mut head, 0).map_err(read_error)?;
            match GgufFile::index(&head) {
                Err(GgufError::Format(_)) if head.len() < len => prefix *= 4,
                Err(e) => return Err(e),
                Ok((metadata, tensors, data_start)) => {
                    let gguf = GgufFile { source: Source::File(file), len, data_start, metadata, tensors };
                    gguf.check_tensors()?;
                    return Ok(gguf);
                }
            }
        }
    }

    /// Indexes GGUF bytes held in memory.
    pub fn parse(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        let (metadata, tensors, data_start) = GgufFile::index(&bytes)?;
        let gguf = GgufFile { len: bytes.len(), source: Source::Bytes(bytes), data_start, metadata, tensors };
        gguf.check_tensors()?;
        Ok(gguf)
    }

    /// The metadata, tensor directory and data offset from the header at the start of `bytes`.
    #[allow(clippy::type_complexity)]
    fn index(bytes: &[u8]) -> Result<(BTreeMap<String, GgufValue>, BTreeMap<String, TensorInfo>, usize), GgufError> {
        let mut c = Cursor { bytes, pos: 0 };
        if c.take(4)? != b"GGUF" {
            return Err(GgufError::Format("the file does not start with the GGUF magic".into()));
        }
        let version = c.u32()?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::Format(format!("GGUF version {version} is not supported (2 and 3 are)")));
        }
        let tensor_count = c.len()?;
        let kv_count = c.len()?;
        let mut metadata = BTreeMap::new();
        for _ in 0..kv_count {
            let key = c.string()?;
            let kind = c.u32()?;
            metadata.insert(key, c.value(kind, 0)?);
        }
        let mut tensors = BTreeMap::new();
        for _ in 0..tensor_count {
            let name = c.string()?;
            let n_dims = c.u32()? as usize;
            if n_dims > 4 {
                return Err(GgufError::Format(format!("tensor {name} has {n_dims} dimensions")));
            }
            let mut dims = Vec::with_capacity(n_dims);
            for _ in 0..n_dims {
                dims.push(c.len()?);
            }
            let encoding = TensorEncoding::from_code(c.u32()?);
            let offset = c.len()?;
            tensors.insert(name, TensorInfo { dims, encoding, offset });
        }
        let alignment = metadata.get("general.alignment").and_then(GgufValue::as_int).unwrap_or(32).max(1) as usize;
        let data_start = c.pos.div_ceil(alignment) * alignment;
        Ok((metadata, tensors, data_start))
    }

    /// Every tensor of a known encoding is whole blocks per row and lies inside the file.
    fn check_tensors(&self) -> Result<(), GgufError> {
        for (name, info) in &self.tensors {
            if let Some((per_block, _)) = info.encoding.block() {
                if info.dims.first().is_some_and(|&row| row % per_block != 0) {
                    return Err(GgufError::Format(format!("tensor {name}'s rows are not whole blocks")));
                }
                self.range(name, info)?;
            }
        }
        Ok(())
    }

    /// A metadata value.
    pub fn get(&self, key: &str) -> Result<&GgufValue, GgufError> {
        self.metadata.get(key).ok_or_else(|| GgufError::Missing(format!("metadata key {key}")))
    }

    /// An integer metadata value.
    pub fn int(&self, key: &str) -> Result<i64, GgufError> {
        self.get(key)?.as_int().ok_or_else(|| GgufError::Format(format!("{key} is not an integer")))
    }

    /// A float metadata value.
    pub fn float(&self, key: &str) -> Result<f64, GgufError> {
        self.get(key)?.as_float().ok_or_else(|| GgufError::Format(format!("{key} is not a number")))
    }

    /// A string metadata value.
    pub fn string(&self, key: &str) -> Result<&str, GgufError> {
        self.get(key)?.as_str().ok_or_else(|| GgufError::Format(format!("{key} is not a string")))
    }

    /// A tensor's directory entry.
    pub fn tensor(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.tensors.get(name).ok_or_else(|| GgufError::Missing(format!("tensor {name}")))
    }

    fn range(&self, name: &str, info: &TensorInfo) -> Result<std::ops::Range<usize>, GgufError> {
        let unsupported = || GgufError::Unsupported { name: name.to_string(), kind: format!("{:?}", info.encoding) };
        let (per_block, block_bytes) = info.encoding.block().ok_or_else(unsupported)?;
        let size = info.len() / per_block * block_bytes;
        let start = self.data_start.checked_add(info.offset);
        let range = start.and_then(|s| s.checked_add(size).map(|e| s..e)).filter(|r| r.end <= self.len);
        range.ok_or_else(|| GgufError::Format(format!("tensor {name} lies outside the file")))
    }

    fn raw(&self, name: &str, info: &TensorInfo) -> Result<Cow<'_, [u8]>, GgufError> {
        let range = self.range(name, info)?;
        match &self.source {
            Source::Bytes(bytes) => Ok(Cow::Borrowed(&bytes[range])),
            Source::File(file) => {
                let mut out = vec![0u8; range.len()];
                file.read_exact_at(&mut out, range.start as u64).map_err(|source| GgufError::Read { path: format!("(tensor {name})"), source })?;
                Ok(Cow::Owned(out))
            }
        }
    }

    /// A tensor's bytes as stored (whole blocks of its encoding).
    pub fn raw_bytes(&self, name: &str) -> Result<Cow<'_, [u8]>, GgufError> {
        self.raw(name, self.tensor(name)?)
    }

    /// The `[rows, cols]` matrix `name` (GGUF dims `[cols, rows]`), kept in its stored encoding
    /// where the matrix kernels read it directly, else as f32.
    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<QuantMatrix, GgufError> {
        let info = self.tensor(name)?;
        if info.dims != [cols, rows] {
            return Err(GgufError::Format(format!("tensor {name} has shape {:?}, expected [{cols}, {rows}]", info.dims)));
        }
        let built = match info.encoding.blocks() {
            Some(e) => QuantMatrix::from_gguf_blocks(e, rows, cols, &self.raw_bytes(name)?),
            None => QuantMatrix::from_f32(rows, cols, self.dequantize(name)?),
        };
        built.map_err(|e| GgufError::Format(format!("tensor {name}: {e}")))
    }

    /// A tensor's elements as f32, in file order (row-major with rows of `dims[0]`).
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>, GgufError> {
        let info = self.tensor(name)?;
        let raw = self.raw(name, info)?;
        let mut out = Vec::with_capacity(info.len());
        dequantize_into(info.encoding, &raw, &mut out);
        Ok(out)
    }
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Decodes whole blocks of `raw` (ggml's layouts) and appends the values to `out`.
fn dequantize_into(encoding: TensorEncoding, raw: &[u8], out: &mut Vec<f32>) {
    if let Some(blocks) = encoding.blocks() {
        return dequantize_gguf(blocks, raw, out);
    }
    match encoding {
        TensorEncoding::F32 => out.extend(raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
        TensorEncoding::F16 => out.extend(raw.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())),
        TensorEncoding::Bf16 => out.extend(raw.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32())),
        TensorEncoding::Q5_1 => {
            for b in raw.chunks_exact(24) {
                let (d, m) = (f16_at(b, 0), f16_at(b, 2));
                let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
                let value = |q: u32| q as f32 * d + m;
                out.extend(b[8..24].iter().enumerate().map(|(j, q)| value(u32::from(q & 0x0f) | (((qh >> j) << 4) & 0x10))));
                out.extend(b[8..24].iter().enumerate().map(|(j, q)| value(u32::from(q >> 4) | ((qh >> (j + 12)) & 0x10))));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_1_blocks_decode_low_nibbles_first() {
        let mut block = Vec::new();
        block.extend(f16::from_f32(0.5).to_le_bytes());
        block.extend(f16::from_f32(-1.0).to_le_bytes());
        block.extend((0..16u8).map(|i| i | ((15 - i) << 4)));
        let mut out = Vec::new();
        dequantize_into(TensorEncoding::Q4_1, &block, &mut out);
        assert_eq!(out.len(), 32);
        assert_eq!(out[3], 3.0 * 0.5 - 1.0);
        assert_eq!(out[16], 15.0 * 0.5 - 1.0);
        assert_eq!(out[31], -1.0);
    }

    #[test]
    fn q8_0_and_q5_0_blocks_decode() {
        let mut block = Vec::new();
        block.extend(f16::from_f32(0.25).to_le_bytes());
        block.extend((0..32).map(|i: i8| (i - 16) as u8));
        let mut out = Vec::new();
        dequantize_into(TensorEncoding::Q8_0, &block, &mut out);
        assert_eq!(out[0], -4.0);
        assert_eq!(out[31], 15.0 * 0.25);

        // Q5_0: element 0 has its fifth bit set in qh, element 16 (high nibble of byte 0) does not.
        let mut block = Vec::new();
        block.extend(f16::from_f32(1.0).to_le_bytes());
        block.extend(1u32.to_le_bytes());
        block.extend([0x21u8; 16]);
        let mut out = Vec::new();
        dequantize_into(TensorEncoding::Q5_0, &block, &mut out);
        assert_eq!(out[0], (1.0 + 16.0) - 16.0);
        assert_eq!(out[1], 1.0 - 16.0);
        assert_eq!(out[16], 2.0 - 16.0);
    }

    #[test]
    fn truncated_and_foreign_files_are_refused() {
        assert!(matches!(GgufFile::parse(b"GGML....".to_vec()), Err(GgufError::Format(_))));
        let mut bytes = b"GGUF".to_vec();
        bytes.extend(3u32.to_le_bytes());
        bytes.extend(u64::MAX.to_le_bytes());
        assert!(matches!(GgufFile::parse(bytes), Err(GgufError::Format(_))));
    }
}
