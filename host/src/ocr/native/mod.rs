//! PP-OCRv5's networks run natively on the CPU, straight from their ONNX files.
//!
//! burn's CPU backend runs each of the graph's ~500 nodes as its own pass, and after every
//! convolution come seven element-wise ones (bias, the learnable affine blocks, hard swish),
//! each reading and writing the whole activation. Here the graph is read once into [`Step`]s,
//! those element-wise nodes are folded into the convolution's epilogue, and convolutions run
//! on `evident-kernels`' CPU code. The networks compute what burn's do (the same ONNX
//! semantics); tests/ocr.rs checks both against onnxruntime.

mod graph;
mod ops;

use std::path::Path;

use graph::{BinaryOp, Op, Program, Step};

use super::OcrError;
use crate::config::CpuPrecision;

/// An f32 tensor, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl Tensor {
    /// A tensor of `shape` holding `data` (whose length must be the shape's product).
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Result<Tensor, OcrError> {
        if shape.iter().product::<usize>() != data.len() {
            return Err(OcrError::Compute(format!("a tensor of shape {shape:?} cannot hold {} values", data.len())));
        }
        Ok(Tensor { shape, data })
    }
}

/// A value flowing through the graph: activations, or the integer shapes that reshapes read.
#[derive(Debug, Clone)]
enum Value {
    Float(Tensor),
    Int { shape: Vec<usize>, data: Vec<i64> },
}

impl Value {
    fn shape(&self) -> &[usize] {
        match self {
            Value::Float(t) => &t.shape,
            Value::Int { shape, .. } => shape,
        }
    }

    fn float(&self) -> Result<&Tensor, OcrError> {
        match self {
            Value::Float(t) => Ok(t),
            Value::Int { .. } => Err(OcrError::Compute("an integer tensor where the network expects floats".into())),
        }
    }

    fn ints(&self) -> Result<&[i64], OcrError> {
        match self {
            Value::Int { data, .. } => Ok(data),
            Value::Float(_) => Err(OcrError::Compute("a float tensor where the network expects integers".into())),
        }
    }
}

/// One of PP-OCRv5's networks, ready to run on the CPU.
pub struct NativeNetwork {
    program: Program,
}

impl std::fmt::Debug for NativeNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeNetwork").field("steps", &self.program.steps.len()).finish_non_exhaustive()
    }
}

impl NativeNetwork {
    /// Reads the ONNX file at `path`; `precision` is the arithmetic of its deep 1x1
    /// convolutions and of its products with constant matrices (int8 only where the CPU has
    /// AVX-512 VNNI).
    pub fn load(path: &Path, precision: CpuPrecision) -> Result<NativeNetwork, OcrError> {
        if !path.is_file() {
            return Err(OcrError::Missing(path.to_path_buf()));
        }
        let bytes = std::fs::read(path).map_err(|e| OcrError::Convert { path: path.to_path_buf(), reason: e.to_string() })?;
        let int8 = precision == CpuPrecision::Int8 && evident_kernels::int8_linear_available();
        let program = Program::from_onnx(&bytes, int8).map_err(|reason| OcrError::Convert { path: path.to_path_buf(), reason })?;
        Ok(NativeNetwork { program })
    }

    /// Whether any of its products run in 8-bit integers.
    pub fn is_int8(&self) -> bool {
        self.program.steps.iter().any(|s| matches!(&s.op, Op::LinearInt8 { .. } | Op::Conv(graph::ConvStep { int8: true, .. })))
    }

    /// Graph steps after fusion (for tests and logs).
    pub fn steps(&self) -> usize {
        self.program.steps.len()
    }

    /// Runs the network on `input` and returns its one output.
    pub fn run(&self, input: Tensor) -> Result<Tensor, OcrError> {
        let p = &self.program;
        let mut slots: Vec<Option<Value>> = vec![None; p.slots];
        slots[p.input] = Some(Value::Float(input));
        for (i, step) in p.steps.iter().enumerate() {
            let value = run_step(p, &mut slots, i, step)?;
            slots[step.output] = Some(value);
            for &slot in &step.inputs {
                if p.last_use[slot] == i && slot != p.output {
                    slots[slot] = None;
                }
            }
        }
        match slots[p.output].take() {
            Some(Value::Float(t)) => Ok(t),
            _ => Err(OcrError::Compute("the network produced no float output".into())),
        }
    }
}

/// The value in `slot`: computed earlier in this run, or one of the network's constants.
fn read<'a>(p: &'a Program, slots: &'a [Option<Value>], slot: usize) -> Result<&'a Value, OcrError> {
    slots[slot].as_ref().or(p.constants[slot].as_ref()).ok_or_else(|| OcrError::Compute(format!("value {slot} is read before it is computed")))
}

/// Step `i`'s first input, owned: moved out when this is its last reader, else copied.
fn take_first(p: &Program, slots: &mut [Option<Value>], i: usize, step: &Step) -> Result<Tensor, OcrError> {
    let slot = step.inputs[0];
    let last = p.last_use[slot] == i && step.inputs.iter().filter(|&&s| s == slot).count() == 1 && slot != p.output;
    if last && let Some(Value::Float(t)) = slots[slot].take() {
        return Ok(t);
    }
    read(p, slots, slot)?.float().cloned()
}

fn run_step(p: &Program, slots: &mut [Option<Value>], i: usize, step: &Step) -> Result<Value, OcrError> {
    let arg = |k: usize| -> Result<&Value, OcrError> { read(p, slots, step.inputs[k]) };
    Ok(match &step.op {
        Op::Conv(conv) => Value::Float(conv.run(arg(0)?.float()?)?),
        Op::ConvTranspose(conv) => Value::Float(conv.run(arg(0)?.float()?)?),
        Op::Pointwise(chain) => {
            let mut t = take_first(p, slots, i, step)?;
            ops::apply_chain(&mut t, chain);
            Value::Float(t)
        }
        Op::Binary(BinaryOp::Add) if arg(0)?.shape() == arg(1)?.shape() && p.last_use[step.inputs[0]] == i && step.inputs[0] != step.inputs[1] => {
            // A residual connection: added into the first operand, which nothing reads later.
            let mut a = take_first(p, slots, i, step)?;
            evident_kernels::add_assign(&mut a.data, &read(p, slots, step.inputs[1])?.float()?.data);
            Value::Float(a)
        }
        Op::Binary(op) => Value::Float(ops::binary(arg(0)?.float()?, arg(1)?.float()?, *op)?),
        Op::MatMul => Value::Float(ops::matmul(arg(0)?.float()?, arg(1)?.float()?)?),
        Op::LinearInt8 { weight, k, n, bias } => Value::Float(ops::linear_int8(arg(0)?.float()?, weight, *k, *n, bias)?),
        Op::Softmax { axis } => {
            let mut t = take_first(p, slots, i, step)?;
            ops::softmax(&mut t, *axis)?;
            Value::Float(t)
        }
        Op::ReduceMean { axes, keep_dims } => Value::Float(ops::reduce_mean(arg(0)?.float()?, axes, *keep_dims)?),
        Op::GlobalAveragePool => Value::Float(ops::global_average_pool(arg(0)?.float()?)?),
        Op::AveragePool(pool) => Value::Float(ops::average_pool(arg(0)?.float()?, pool)?),
        Op::Resize => Value::Float(ops::resize_nearest(arg(0)?.float()?, arg(2)?.float()?)?),
        Op::Shape => {
            let shape = arg(0)?.shape();
            Value::Int { shape: vec![shape.len()], data: shape.iter().map(|&d| d as i64).collect() }
        }
        Op::Slice => {
            let ints = |k: usize| -> Result<Option<&[i64]>, OcrError> { step.inputs.get(k).map(|_| arg(k)?.ints()).transpose() };
            ops::slice(arg(0)?, ints(1)?.unwrap_or_default(), ints(2)?.unwrap_or_default(), ints(3)?, ints(4)?)?
        }
        Op::Concat { axis } => {
            let parts = step.inputs.iter().map(|&s| read(p, slots, s)).collect::<Result<Vec<_>, _>>()?;
            ops::concat(&parts, *axis)?
        }
        Op::Reshape => {
            let value = arg(0)?.clone();
            let shape = ops::reshape_target(value.shape(), arg(1)?.ints()?)?;
            ops::with_shape(value, shape)?
        }
        Op::Squeeze { axes } => {
            let value = arg(0)?.clone();
            let shape = ops::squeezed(value.shape(), axes)?;
            ops::with_shape(value, shape)?
        }
        Op::Unsqueeze { axes } => {
            let value = arg(0)?.clone();
            let shape = ops::unsqueezed(value.shape(), axes)?;
            ops::with_shape(value, shape)?
        }
        Op::Transpose { perm } => Value::Float(ops::transpose(arg(0)?.float()?, perm)?),
    })
}
