//! Reading an ONNX graph into steps over numbered slots, with the element-wise nodes that
//! follow a convolution folded into it.

use std::collections::HashMap;

use evident_kernels::{ConvShape, Int8Weight};
use onnx_ir::{AttributeProto, Message, ModelProto, NodeProto, TensorProto};

use super::{OcrError, Tensor, Value, ops};

/// 1x1 convolutions run in 8-bit integers only from this many input channels: the deep layers,
/// which hold most of the recogniser's products. Rounding every 1x1 layer doubled the
/// character error rate on `bench ocr`'s pages (0.071 against 0.034, with the smoothing in
/// `pointwise_conv_int8`; 0.146 without it); from 240 channels on it is unchanged (README, OCR).
const INT8_MIN_CHANNELS: usize = 240;

/// ONNX's element types that the OCR networks' constants use.
const ONNX_FLOAT: i32 = 1;
const ONNX_INT64: i32 = 7;

/// An element-wise operation with its constants: what a convolution's epilogue applies.
pub(super) use evident_kernels::PointwiseOp as Pointwise;

/// A two-input element-wise operation with broadcasting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
}

/// A convolution with its weights and the element-wise chain fused after it.
pub(super) struct ConvStep {
    pub shape: ConvShape,
    pub weight: Vec<f32>,
    /// Whether this (1x1) convolution runs in 8-bit integers.
    pub int8: bool,
    pub bias: Vec<f32>,
    pub epilogue: Vec<Pointwise>,
}

/// A transposed convolution (ONNX `ConvTranspose`, one group).
pub(super) struct ConvTransposeStep {
    pub c_in: usize,
    pub c_out: usize,
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub pad_begin: (usize, usize),
    pub pad_end: (usize, usize),
    /// The weight as `c_out·kh·kw` rows of `c_in` (ONNX stores `c_in` rows).
    pub weight_t: Vec<f32>,
    pub bias: Vec<f32>,
}

/// An average pool's window.
#[derive(Debug, Clone, Copy)]
pub(super) struct PoolShape {
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub pad_begin: (usize, usize),
    pub pad_end: (usize, usize),
    pub count_include_pad: bool,
}

/// What a step computes.
pub(super) enum Op {
    Conv(ConvStep),
    /// A product with a constant matrix (`k` × `n` in ONNX) in 8-bit integers.
    LinearInt8 {
        weight: Int8Weight,
        k: usize,
        n: usize,
        /// One value per output, added to each row (the `Add` that followed, folded in).
        bias: Vec<f32>,
    },
    ConvTranspose(ConvTransposeStep),
    Pointwise(Vec<Pointwise>),
    Binary(BinaryOp),
    MatMul,
    Softmax {
        axis: i64,
    },
    ReduceMean {
        axes: Vec<i64>,
        keep_dims: bool,
    },
    GlobalAveragePool,
    AveragePool(PoolShape),
    Resize,
    Shape,
    Slice,
    Concat {
        axis: i64,
    },
    Reshape,
    Squeeze {
        axes: Vec<i64>,
    },
    Unsqueeze {
        axes: Vec<i64>,
    },
    Transpose {
        perm: Vec<usize>,
    },
}

/// One step: an operation reading slots and writing one.
pub(super) struct Step {
    pub op: Op,
    pub inputs: Vec<usize>,
    pub output: usize,
}

/// A network as steps over numbered slots.
pub(super) struct Program {
    pub slots: usize,
    /// Each slot's constant value, if it is one.
    pub constants: Vec<Option<Value>>,
    pub steps: Vec<Step>,
    pub input: usize,
    pub output: usize,
    /// The last step reading each slot (usize::MAX when none does).
    pub last_use: Vec<usize>,
}

impl Program {
    /// Reads an ONNX model's bytes; with `int8`, the deep 1x1 convolutions and the products
    /// with constant matrices round their operands to 8-bit integers.
    pub fn from_onnx(bytes: &[u8], int8: bool) -> Result<Program, String> {
        let model = ModelProto::parse_from_bytes(bytes).map_err(|e| format!("not an ONNX model: {e}"))?;
        let graph = model.graph.as_ref().ok_or("the model has no graph")?;
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut constants: Vec<Option<Value>> = Vec::new();
        for t in &graph.initializer {
            names.insert(t.name.clone(), constants.len());
            constants.push(Some(tensor_value(t)?));
        }
        let inputs: Vec<&str> = graph.input.iter().map(|i| i.name.as_str()).filter(|n| !names.contains_key(*n)).collect();
        let [input_name] = inputs[..] else { return Err(format!("expected one input, found {}", inputs.len())) };
        let input = constants.len();
        names.insert(input_name.to_string(), input);
        constants.push(None);
        let mut steps = Vec::new();
        for node in &graph.node {
            let slot_of = |name: &str| names.get(name).copied().ok_or_else(|| format!("{} reads {name}, which nothing computes", node.op_type));
            if node.op_type == "Identity" {
                let from = slot_of(&node.input[0])?;
                names.insert(node.output[0].clone(), from);
                continue;
            }
            // Optional inputs are named "" in ONNX; the ops here take them positionally.
            let inputs = node.input.iter().take_while(|n| !n.is_empty()).map(|n| slot_of(n)).collect::<Result<Vec<_>, _>>()?;
            let op = op_of(node, &inputs, &constants, int8)?;
            let [output_name] = &node.output[..] else { return Err(format!("{} has {} outputs", node.op_type, node.output.len())) };
            let output = constants.len();
            constants.push(None);
            names.insert(output_name.clone(), output);
            let inputs = match op {
                // The weights live in the step; only the activation is read at run time.
                Op::Conv(_) | Op::ConvTranspose(_) | Op::LinearInt8 { .. } => vec![inputs[0]],
                _ => inputs,
            };
            steps.push(Step { op, inputs, output });
        }
        let [out] = &graph.output[..] else { return Err(format!("expected one output, found {}", graph.output.len())) };
        let output = *names.get(&out.name).ok_or("the output is never computed")?;
        let mut program = Program { slots: constants.len(), constants, steps, input, output, last_use: Vec::new() };
        program.fuse_epilogues();
        program.last_use = vec![usize::MAX; program.slots];
        for (i, step) in program.steps.iter().enumerate() {
            for &s in &step.inputs {
                program.last_use[s] = i;
            }
        }
        Ok(program)
    }

    /// Folds into each convolution the element-wise steps that alone read its result: adds and
    /// multiplies by per-channel or scalar constants, activations, and hard swish written as
    /// `x · HardSigmoid(x)`; and into each int8 product the bias added to its rows.
    fn fuse_epilogues(&mut self) {
        let mut readers: Vec<Vec<usize>> = vec![Vec::new(); self.slots];
        for (i, step) in self.steps.iter().enumerate() {
            for &s in &step.inputs {
                readers[s].push(i);
            }
        }
        let mut removed = vec![false; self.steps.len()];
        for i in 0..self.steps.len() {
            if let Some((j, add)) = self.bias_after_product(i, &readers) {
                removed[j] = true;
                self.steps[i].output = self.steps[j].output;
                if let Op::LinearInt8 { bias, .. } = &mut self.steps[i].op {
                    *bias = add;
                }
                continue;
            }
            let Op::Conv(conv) = &self.steps[i].op else { continue };
            let channels = conv.shape.c_out;
            let mut fused: Vec<Pointwise> = Vec::new();
            let mut current = self.steps[i].output;
            loop {
                if current == self.output {
                    break;
                }
                let reads: Vec<usize> = readers[current].iter().copied().filter(|&j| !removed[j]).collect();
                let next = match reads[..] {
                    [j] => self.fusible(j, current, channels).map(|ops| (ops, vec![j], self.steps[j].output)),
                    [j, k] => self.hard_swish(j, k, current, &readers, &removed).map(|(op, gone, output)| (vec![op], gone, output)),
                    _ => None,
                };
                let Some((ops, gone, output)) = next else { break };
                fused.extend(ops);
                gone.iter().for_each(|&j| removed[j] = true);
                current = output;
            }
            if let Op::Conv(conv) = &mut self.steps[i].op {
                // The bias joins the chain, where it folds into the affines that follow.
                if !fused.is_empty() && !conv.bias.is_empty() {
                    fused.insert(0, Pointwise::Add(std::mem::take(&mut conv.bias)));
                }
                conv.epilogue = fused;
            }
            self.steps[i].output = current;
        }
        let mut k = 0;
        self.steps.retain(|_| {
            k += 1;
            !removed[k - 1]
        });
    }

    /// When step `i` is an int8 product whose result only a constant bias's `Add` reads, that
    /// step and the bias (the output layer's 18,385 values, added to every row otherwise).
    fn bias_after_product(&self, i: usize, readers: &[Vec<usize>]) -> Option<(usize, Vec<f32>)> {
        let Op::LinearInt8 { n, .. } = &self.steps[i].op else { return None };
        let slot = self.steps[i].output;
        let [j] = readers[slot][..] else { return None };
        let step = &self.steps[j];
        if slot == self.output || !matches!(step.op, Op::Binary(BinaryOp::Add)) {
            return None;
        }
        let other = *step.inputs.iter().find(|&&s| s != slot)?;
        let Some(Value::Float(t)) = &self.constants[other] else { return None };
        let row_vector = t.shape.last() == Some(n) && t.data.len() == *n;
        row_vector.then(|| (j, t.data.clone()))
    }

    /// Step `j` as per-channel operations on `slot`, when it is that.
    fn fusible(&self, j: usize, slot: usize, channels: usize) -> Option<Vec<Pointwise>> {
        let step = &self.steps[j];
        match &step.op {
            Op::Pointwise(chain) => Some(chain.clone()),
            Op::Binary(op @ (BinaryOp::Add | BinaryOp::Mul)) => {
                let other = *step.inputs.iter().find(|&&s| s != slot)?;
                let Some(Value::Float(t)) = &self.constants[other] else { return None };
                let per_channel = t.data.len() == 1 || (t.data.len() == channels && channel_shape(&t.shape, channels));
                per_channel.then(|| vec![if *op == BinaryOp::Add { Pointwise::Add(t.data.clone()) } else { Pointwise::Mul(t.data.clone()) }])
            }
            _ => None,
        }
    }

    /// Steps `j` and `k` as `slot · HardSigmoid(slot)`, when that is what they are.
    fn hard_swish(&self, j: usize, k: usize, slot: usize, readers: &[Vec<usize>], removed: &[bool]) -> Option<(Pointwise, Vec<usize>, usize)> {
        let (sig, mul) = match (&self.steps[j].op, &self.steps[k].op) {
            (Op::Pointwise(_), Op::Binary(BinaryOp::Mul)) => (j, k),
            (Op::Binary(BinaryOp::Mul), Op::Pointwise(_)) => (k, j),
            _ => return None,
        };
        let Op::Pointwise(chain) = &self.steps[sig].op else { return None };
        let [Pointwise::HardSigmoid { alpha, beta }] = chain[..] else { return None };
        let h = self.steps[sig].output;
        let mul_inputs = &self.steps[mul].inputs;
        let pairs = mul_inputs.len() == 2 && mul_inputs.contains(&h) && mul_inputs.contains(&slot);
        let h_read_once = readers[h].iter().filter(|&&r| !removed[r]).count() == 1;
        (pairs && h_read_once && h != self.output).then(|| (Pointwise::HardSwish { alpha, beta }, vec![sig, mul], self.steps[mul].output))
    }
}

/// Whether a constant of `shape` broadcasts against NCHW as one value per channel.
fn channel_shape(shape: &[usize], channels: usize) -> bool {
    match shape {
        [c] => *c == channels && channels == 1,
        [c, 1, 1] | [1, c, 1, 1] => *c == channels,
        _ => false,
    }
}

fn tensor_value(t: &TensorProto) -> Result<Value, String> {
    let shape: Vec<usize> = t.dims.iter().map(|&d| usize::try_from(d).map_err(|_| format!("{} has a negative dimension", t.name))).collect::<Result<_, _>>()?;
    let n: usize = shape.iter().product();
    let value = match t.data_type {
        ONNX_FLOAT => {
            let data: Vec<f32> = if t.raw_data.is_empty() {
                t.float_data.clone()
            } else {
                t.raw_data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
            };
            Value::Float(Tensor { shape, data })
        }
        ONNX_INT64 => {
            let data: Vec<i64> = if t.raw_data.is_empty() {
                t.int64_data.clone()
            } else {
                t.raw_data.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8]))).collect()
            };
            Value::Int { shape, data }
        }
        other => return Err(format!("{} has element type {other}, which the OCR networks do not use", t.name)),
    };
    let len = match &value {
        Value::Float(t) => t.data.len(),
        Value::Int { data, .. } => data.len(),
    };
    if len != n {
        return Err(format!("{} holds {len} values for shape {:?}", t.name, t.dims));
    }
    Ok(value)
}

fn attr<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute.iter().find(|a| a.name == name)
}

fn ints(node: &NodeProto, name: &str) -> Option<Vec<i64>> {
    attr(node, name).map(|a| a.ints.clone())
}

fn int(node: &NodeProto, name: &str, default: i64) -> i64 {
    attr(node, name).map_or(default, |a| a.i)
}

fn float(node: &NodeProto, name: &str, default: f32) -> f32 {
    attr(node, name).map_or(default, |a| a.f)
}

fn string(node: &NodeProto, name: &str) -> Option<String> {
    attr(node, name).map(|a| String::from_utf8_lossy(&a.s).into_owned())
}

fn pair(v: &[i64], what: &str) -> Result<(usize, usize), String> {
    match v {
        [a, b] if *a >= 0 && *b >= 0 => Ok((*a as usize, *b as usize)),
        _ => Err(format!("{what} {v:?} is not two non-negative numbers")),
    }
}

/// Rows and columns of padding before, and after.
type Padding = ((usize, usize), (usize, usize));

/// Padding from ONNX's `pads` (`[top, left, bottom, right]`).
fn pads(node: &NodeProto) -> Result<Padding, String> {
    let p = ints(node, "pads").unwrap_or_else(|| vec![0; 4]);
    if let Some(auto) = string(node, "auto_pad")
        && !matches!(auto.as_str(), "" | "NOTSET")
    {
        return Err(format!("auto_pad {auto} is not supported"));
    }
    match p[..] {
        [t, l, b, r] => Ok((pair(&[t, l], "pads")?, pair(&[b, r], "pads")?)),
        _ => Err(format!("pads {p:?} are not four numbers")),
    }
}

fn constant_floats<'a>(constants: &'a [Option<Value>], slot: Option<&usize>, what: &str) -> Result<&'a Tensor, String> {
    match slot.and_then(|&s| constants[s].as_ref()) {
        Some(Value::Float(t)) => Ok(t),
        _ => Err(format!("the {what} must be a float constant")),
    }
}

fn op_of(node: &NodeProto, inputs: &[usize], constants: &[Option<Value>], int8: bool) -> Result<Op, String> {
    let arity = |n: usize| if inputs.len() >= n { Ok(()) } else { Err(format!("{} needs {n} inputs", node.op_type)) };
    let unary = |p: Pointwise| Ok(Op::Pointwise(vec![p]));
    match node.op_type.as_str() {
        "Conv" => {
            let weight = constant_floats(constants, inputs.get(1), "convolution's weight")?;
            let bias = if inputs.len() > 2 { constant_floats(constants, inputs.get(2), "convolution's bias")?.data.clone() } else { Vec::new() };
            let [c_out, cg, kh, kw] = weight.shape[..] else { return Err(format!("a 2-D convolution's weight, not {:?}", weight.shape)) };
            let groups = int(node, "group", 1).max(1) as usize;
            let (pad_begin, pad_end) = pads(node)?;
            let shape = ConvShape {
                c_in: cg * groups,
                c_out,
                groups,
                kh,
                kw,
                stride: pair(&ints(node, "strides").unwrap_or(vec![1, 1]), "strides")?,
                pad_begin,
                pad_end,
                dilation: pair(&ints(node, "dilations").unwrap_or(vec![1, 1]), "dilations")?,
            };
            if !bias.is_empty() && bias.len() != c_out {
                return Err(format!("a convolution with {c_out} outputs has {} biases", bias.len()));
            }
            let pointwise = kh == 1 && kw == 1 && groups == 1 && shape.stride == (1, 1) && shape.pad_begin == (0, 0) && shape.pad_end == (0, 0);
            let int8 = int8 && pointwise && shape.c_in >= INT8_MIN_CHANNELS;
            Ok(Op::Conv(ConvStep { shape, weight: weight.data.clone(), int8, bias, epilogue: Vec::new() }))
        }
        "ConvTranspose" => {
            let weight = constant_floats(constants, inputs.get(1), "transposed convolution's weight")?;
            let bias = if inputs.len() > 2 { constant_floats(constants, inputs.get(2), "transposed convolution's bias")?.data.clone() } else { Vec::new() };
            let [c_in, c_out, kh, kw] = weight.shape[..] else { return Err(format!("a 2-D transposed convolution's weight, not {:?}", weight.shape)) };
            if int(node, "group", 1) != 1
                || ints(node, "dilations").is_some_and(|d| d.iter().any(|&v| v != 1))
                || ints(node, "output_padding").is_some_and(|d| d.iter().any(|&v| v != 0))
            {
                return Err("a transposed convolution with groups, dilation or output padding is not supported".into());
            }
            let (pad_begin, pad_end) = pads(node)?;
            let mut weight_t = vec![0.0f32; weight.data.len()];
            let per = c_out * kh * kw;
            for ci in 0..c_in {
                for r in 0..per {
                    weight_t[r * c_in + ci] = weight.data[ci * per + r];
                }
            }
            Ok(Op::ConvTranspose(ConvTransposeStep {
                c_in,
                c_out,
                kernel: (kh, kw),
                stride: pair(&ints(node, "strides").unwrap_or(vec![1, 1]), "strides")?,
                pad_begin,
                pad_end,
                weight_t,
                bias,
            }))
        }
        "BatchNormalization" => {
            arity(5)?;
            let get = |k: usize, what: &str| constant_floats(constants, inputs.get(k), what).map(|t| t.data.clone());
            let (gamma, beta, mean, var) = (get(1, "scale")?, get(2, "bias")?, get(3, "mean")?, get(4, "variance")?);
            let eps = float(node, "epsilon", 1e-5);
            let scale: Vec<f32> = gamma.iter().zip(&var).map(|(g, v)| g / (v + eps).sqrt()).collect();
            let shift: Vec<f32> = beta.iter().zip(&mean).zip(&scale).map(|((b, m), s)| b - m * s).collect();
            Ok(Op::Pointwise(vec![Pointwise::Mul(scale), Pointwise::Add(shift)]))
        }
        "Relu" => unary(Pointwise::Relu),
        "Sigmoid" => unary(Pointwise::Sigmoid),
        "Sqrt" => unary(Pointwise::Sqrt),
        "HardSigmoid" => unary(Pointwise::HardSigmoid { alpha: float(node, "alpha", 0.2), beta: float(node, "beta", 0.5) }),
        "HardSwish" => unary(Pointwise::HardSwish { alpha: 1.0 / 6.0, beta: 0.5 }),
        "Add" | "Sub" | "Mul" | "Div" | "Pow" => {
            arity(2)?;
            Ok(Op::Binary(match node.op_type.as_str() {
                "Add" => BinaryOp::Add,
                "Sub" => BinaryOp::Sub,
                "Mul" => BinaryOp::Mul,
                "Div" => BinaryOp::Div,
                _ => BinaryOp::Pow,
            }))
        }
        "MatMul" => {
            arity(2)?;
            match constants[inputs[1]].as_ref() {
                Some(Value::Float(w)) if int8 && w.shape.len() == 2 => {
                    let (k, n) = (w.shape[0], w.shape[1]);
                    // Int8Weight holds one row per output: the k × n matrix transposed.
                    let rows: Vec<f32> = (0..n).flat_map(|o| (0..k).map(move |i| w.data[i * n + o])).collect();
                    Ok(Op::LinearInt8 { weight: Int8Weight::new(&rows, k, n), k, n, bias: vec![0.0; n] })
                }
                _ => Ok(Op::MatMul),
            }
        }
        "Softmax" => Ok(Op::Softmax { axis: int(node, "axis", 1) }),
        "ReduceMean" => Ok(Op::ReduceMean { axes: ints(node, "axes").ok_or("ReduceMean without axes")?, keep_dims: int(node, "keepdims", 1) != 0 }),
        "GlobalAveragePool" => Ok(Op::GlobalAveragePool),
        "AveragePool" => {
            if int(node, "ceil_mode", 0) != 0 {
                return Err("AveragePool with ceil_mode is not supported".into());
            }
            let (pad_begin, pad_end) = pads(node)?;
            let kernel = pair(&ints(node, "kernel_shape").ok_or("AveragePool without kernel_shape")?, "kernel_shape")?;
            Ok(Op::AveragePool(PoolShape {
                kernel,
                stride: pair(&ints(node, "strides").unwrap_or(vec![1, 1]), "strides")?,
                pad_begin,
                pad_end,
                count_include_pad: int(node, "count_include_pad", 0) != 0,
            }))
        }
        "Resize" => {
            arity(3)?;
            let nearest = string(node, "mode").as_deref() == Some("nearest")
                && string(node, "coordinate_transformation_mode").as_deref() == Some("asymmetric")
                && string(node, "nearest_mode").as_deref().unwrap_or("round_prefer_floor") == "floor";
            if !nearest {
                return Err("only nearest, asymmetric, floor resizing is supported".into());
            }
            constant_floats(constants, inputs.get(2), "resize's scales")?;
            Ok(Op::Resize)
        }
        "Shape" => Ok(Op::Shape),
        "Slice" => arity(3).map(|_| Op::Slice),
        "Concat" => Ok(Op::Concat { axis: int(node, "axis", 0) }),
        "Reshape" => arity(2).map(|_| Op::Reshape),
        "Squeeze" => Ok(Op::Squeeze { axes: ints(node, "axes").ok_or("Squeeze without axes")? }),
        "Unsqueeze" => Ok(Op::Unsqueeze { axes: ints(node, "axes").ok_or("Unsqueeze without axes")? }),
        "Transpose" => {
            let perm = ints(node, "perm").ok_or("Transpose without perm")?;
            Ok(Op::Transpose { perm: perm.iter().map(|&p| usize::try_from(p).map_err(|_| "a negative axis in perm".to_string())).collect::<Result<_, _>>()? })
        }
        other => Err(format!("the ONNX operation {other} is not supported by the native OCR networks")),
    }
}

impl ConvStep {
    /// The convolution and its epilogue over `x` (N × C × H × W).
    pub(super) fn run(&self, x: &Tensor) -> Result<Tensor, OcrError> {
        let [n, c, h, w] = x.shape[..] else { return Err(OcrError::Compute(format!("a convolution's input of shape {:?}", x.shape))) };
        if c != self.shape.c_in {
            return Err(OcrError::Compute(format!("a convolution for {} channels got {c}", self.shape.c_in)));
        }
        let (oh, ow) = self.shape.out_size(h, w).ok_or_else(|| OcrError::Compute(format!("an image of {h} x {w} is smaller than a convolution's kernel")))?;
        let mut out = vec![0.0f32; n * self.shape.c_out * oh * ow];
        let chain = &self.epilogue;
        let epilogue = |channel: usize, plane: &mut [f32]| ops::apply_chain_plane(plane, channel, chain);
        if self.int8 {
            evident_kernels::pointwise_conv_int8(&x.data, n, c, h * w, &self.weight, self.shape.c_out, &self.bias, &mut out, &epilogue);
        } else {
            evident_kernels::conv2d(&x.data, n, h, w, &self.weight, &self.bias, &self.shape, &mut out, &epilogue);
        }
        Ok(Tensor { shape: vec![n, self.shape.c_out, oh, ow], data: out })
    }
}

impl ConvTransposeStep {
    /// The transposed convolution over `x` (N × C × H × W).
    pub(super) fn run(&self, x: &Tensor) -> Result<Tensor, OcrError> {
        ops::conv_transpose(x, self)
    }
}
