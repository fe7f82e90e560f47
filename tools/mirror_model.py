#!/usr/bin/env python3
"""mirror_model.py - a mirror checkpoint as a PyTorch module or an ONNX model.

A checkpoint is a safetensors file whose metadata describes the layers
("model": "input(1,28,28);conv2d(16,3,1,1);relu;...;loss(softmax_ce)") and
whose tensors are named layers.<i>.weight, layers.<i>.bias (and
layers.<i>.running_mean, layers.<i>.running_var for batchnorm), i counting
the layers between input and loss. The tensors are the fp32 master weights
whatever precision the model trained in, so every export is fp32.

Command line:
  python3 tools/mirror_model.py info CKPT
      the layers, their output shapes and parameter counts
  python3 tools/mirror_model.py export CKPT [--onnx OUT.onnx] [--torch OUT.pt]
                                           [--state-dict OUT.safetensors]
      --onnx        ONNX (opset 17), input "input" [batch, C, H, W], output
                    "logits" [batch, outputs]; needs the onnx package only
      --torch       TorchScript (torch.jit.load opens it without this file)
      --state-dict  the torch module's state_dict (safetensors), whose names
                    are mirror's: train.c --init-weights loads it back

As a module (tools/ on sys.path):
  import mirror_model
  ckpt = mirror_model.load("model.ckpt")      # parsed and checked
  net = mirror_model.to_torch(ckpt)           # a torch.nn.Module in eval mode
  mirror_model.to_onnx(ckpt, "model.onnx")

The outputs are the last layer's (logits: no softmax). Needs numpy and
safetensors; torch and onnx are imported only by what uses them.
"""
import argparse
import importlib
import re
import sys
import warnings
from dataclasses import dataclass, field

try:
    import numpy as np
    from safetensors import safe_open
except ImportError as e:
    if __name__ != "__main__":
        raise
    sys.exit(f"mirror_model: needs numpy and safetensors ({e.name} is missing): "
             "python3 -m pip install numpy safetensors")


class MirrorModelError(Exception):
    """A checkpoint that cannot be read or exported, said in one line."""


# Each layer's number of arguments in the model description.
ARITY = {"dense": 1, "conv2d": 4, "maxpool2d": 2, "avgpool2d": 2, "dropout": 1, "batchnorm": 3,
         "relu": 0, "tanh": 0, "sigmoid": 0, "gelu": 0, "flatten": 0, "global_avgpool": 0,
         "residual": 0, "residual_end": 0}
# Layers that work on planes [N, C, H, W]; a flat [N, F] input becomes [N, F, 1, 1].
PLANE = {"conv2d", "maxpool2d", "avgpool2d", "global_avgpool"}


@dataclass
class Layer:
    index: int
    kind: str
    args: tuple       # the description's numbers (ints, or floats for dropout and batchnorm)
    in_shape: tuple   # (C, H, W) per sample
    out_shape: tuple
    flat_in: bool     # the input arrives flat, [N, F] (after flatten or dense)
    stride: int = 1   # residual_end: the projection's stride
    start: int = -1   # residual_end: the layer that opened the block
    tensors: dict = field(default_factory=dict)  # name -> shape

    @property
    def name(self):
        return self.kind + (f"({','.join(f'{a:g}' for a in self.args)})" if self.args else "")


@dataclass
class Checkpoint:
    path: str
    input_shape: tuple  # (C, H, W)
    layers: list
    loss: str           # softmax_ce or mse
    precision: str      # what it trained in; the tensors are fp32 anyway
    tensors: dict       # name -> float32 array, the layers' only

    @property
    def outputs(self):
        c, h, w = self.layers[-1].out_shape if self.layers else self.input_shape
        return c * h * w


def _entries(model, path):
    """The description's entries as (name, args): "conv2d(16,3,1,1)" -> ("conv2d", [16.0, 3.0, 1.0, 1.0])."""
    for text in model.split(";"):
        m = re.fullmatch(r"([a-z_0-9]+)(?:\(([^()]*)\))?", text)
        try:
            args = [float(a) for a in m.group(2).split(",")] if m and m.group(2) is not None else []
        except ValueError:
            m = None
        if not m:
            raise MirrorModelError(f'{path}: malformed layer "{text}" in the model description')
        yield m.group(1), args


def _f32(a):
    """A float as mirror holds it (batchnorm's eps "9.99999975e-06" is float32's 1e-5)."""
    return float(np.float32(a))


def parse_model(model, path="checkpoint"):
    """The layers of a model description, each with its shapes and tensors; the loss."""
    head, _, tail = model.rpartition(";")
    loss = re.fullmatch(r"loss\((softmax_ce|mse)\)", tail)
    if not loss:
        raise MirrorModelError(f'{path}: the model description ends in "{tail}", not loss(softmax_ce) or '
                               'loss(mse): truncated?')
    entries = list(_entries(head, path))
    name, args = entries[0]
    if name != "input" or len(args) != 3 or min(args) < 1:
        raise MirrorModelError(f'{path}: the model description starts with "{name}", not input(C,H,W)')
    shape, flat, block = tuple(int(a) for a in args), False, None
    input_shape, layers = shape, []
    for i, (kind, args) in enumerate(entries[1:]):
        where = f"{path}: layer {i}, {kind}"
        if kind not in ARITY or len(args) != ARITY[kind]:
            raise MirrorModelError(f'{path}: unknown layer "{kind}" with {len(args)} arguments (layer {i})')
        if kind not in ("dropout", "batchnorm"):
            args = [int(a) for a in args]
        else:
            args = [_f32(a) for a in args]
        c, h, w = shape
        layer = Layer(i, kind, tuple(args), shape, shape, flat)
        p = f"layers.{i}."
        if kind == "dense":
            if h != 1 or w != 1:
                raise MirrorModelError(f"{where}: input {c}x{h}x{w} is not flat")
            layer.out_shape = (args[0], 1, 1)
            layer.tensors = {p + "weight": (args[0], c), p + "bias": (args[0],)}
        elif kind == "conv2d":
            o, k, s, pad = args
            if pad >= k or k > h + 2 * pad or k > w + 2 * pad or s < 1:
                raise MirrorModelError(f"{where}: kernel {k}, padding {pad} do not fit the input {c}x{h}x{w}")
            layer.out_shape = (o, (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1)
            layer.tensors = {p + "weight": (o, c, k, k), p + "bias": (o,)}
        elif kind in ("maxpool2d", "avgpool2d"):
            k, s = args
            if k > h or k > w or s < 1:
                raise MirrorModelError(f"{where}: window {k} larger than the input {h}x{w}")
            layer.out_shape = (c, (h - k) // s + 1, (w - k) // s + 1)
        elif kind == "flatten":
            layer.out_shape = (c * h * w, 1, 1)
        elif kind == "global_avgpool":
            layer.out_shape = (c, 1, 1)
        elif kind == "batchnorm":
            layer.tensors = {p + t: (c,) for t in ("weight", "bias", "running_mean", "running_var")}
        elif kind == "residual":
            if block is not None:
                raise MirrorModelError(f"{where}: the block opened at layer {block.index} is still open")
            block = layer
        elif kind == "residual_end":
            if block is None:
                raise MirrorModelError(f"{where}: no residual block is open")
            (ic, ih, iw) = block.in_shape
            if (ic, ih, iw) != shape:  # a strided 1x1 convolution projects the block's input
                s = next((s for s in range(1, 65) if ((ih - 1) // s + 1, (iw - 1) // s + 1) == (h, w)), None)
                if s is None:
                    raise MirrorModelError(f"{where}: the block's input {ic}x{ih}x{iw} cannot be projected "
                                           f"onto {c}x{h}x{w}")
                layer.stride = s
                layer.tensors = {p + "weight": (c, ic, 1, 1), p + "bias": (c,)}
            layer.start, block = block.index, None
        layers.append(layer)
        shape = layer.out_shape
        # Flat after flatten and dense; planes again after the layers of PLANE.
        flat = kind in ("flatten", "dense") or (flat and kind not in PLANE)
    if block is not None:
        raise MirrorModelError(f"{path}: the residual block opened at layer {block.index} is never closed")
    return input_shape, layers, loss.group(1)


def load(path):
    """Reads and checks a mirror checkpoint: its layers and every tensor they need."""
    try:
        with safe_open(path, framework="numpy") as f:
            meta, names = f.metadata() or {}, set(f.keys())
            if meta.get("format") != "mirror" or "model" not in meta:
                raise MirrorModelError(f"{path}: not a mirror checkpoint (no \"format\": \"mirror\" and model)")
            input_shape, layers, loss = parse_model(meta["model"], path)
            tensors = {}
            for layer in layers:
                for name, shape in layer.tensors.items():
                    if name not in names:
                        raise MirrorModelError(f"{path}: tensor {name} {list(shape)} of {layer.name} is missing")
                    t = f.get_tensor(name)
                    if t.shape != shape:
                        raise MirrorModelError(f"{path}: tensor {name} has shape {list(t.shape)}, "
                                               f"{layer.name} needs {list(shape)}")
                    tensors[name] = t.astype(np.float32)
    except MirrorModelError:
        raise
    except Exception as e:  # OSError, or safetensors' own error
        raise MirrorModelError(f"{path}: cannot be read as safetensors ({e})") from None
    extra = sorted(n for n in names if n.startswith("layers.") and n not in tensors)
    if extra:
        raise MirrorModelError(f"{path}: tensor {extra[0]} belongs to no layer of the model")
    return Checkpoint(path, input_shape, layers, loss, meta.get("precision", "fp32"), tensors)


def _need(package, what):
    """Imports a package that only some exports need, or says how to get it."""
    try:
        return importlib.import_module(package)
    except ImportError:
        raise MirrorModelError(f"{what} needs {package}, which is not installed: "
                               f"python3 -m pip install {package}") from None


# ---- PyTorch -----------------------------------------------------------------

_torch_classes = None


def _torch_modules():
    """The module classes, defined on first use so that torch stays optional."""
    global _torch_classes
    if _torch_classes:
        return _torch_classes
    torch = _need("torch", "the PyTorch module")
    nn = torch.nn

    class Dense(nn.Linear):
        """nn.Linear on a flat input: a plane [N, C, 1, 1] (after global average pooling) is flattened first."""
        def forward(self, x):
            return super().forward(x.flatten(1))

    class ResidualEnd(nn.Module):
        """y = body output + block input, or + a strided 1x1 convolution of it where the shapes differ."""
        def __init__(self, stride, weight_shape):
            super().__init__()
            self.stride = stride
            self.projection = weight_shape is not None
            if self.projection:
                self.weight = nn.Parameter(torch.zeros(weight_shape))
                self.bias = nn.Parameter(torch.zeros(weight_shape[0]))

        def forward(self, x, block_in):
            if self.projection:
                if block_in.dim() == 2:
                    block_in = block_in[:, :, None, None]
                block_in = nn.functional.conv2d(block_in, self.weight, self.bias, self.stride)
            if block_in.dim() != x.dim():  # one flat, the other [N, F, 1, 1]: the same values
                block_in = block_in.reshape(x.shape)
            return x + block_in

    class MirrorNet(nn.Module):
        """mirror's layers in order: self.layers[i] is layer i, so state_dict() names are mirror's."""
        def __init__(self, kinds, layers):
            super().__init__()
            self.kinds = tuple(kinds)
            self.layers = nn.ModuleList(layers)

        def forward(self, x):
            block_in = x
            for kind, layer in zip(self.kinds, self.layers):
                if kind == "residual":
                    block_in = x  # the block's start: remember its input
                elif kind == "residual_end":
                    x = layer(x, block_in)
                else:
                    if kind in PLANE and x.dim() == 2:
                        x = x[:, :, None, None]
                    x = layer(x)
            return x.flatten(1)  # logits [N, outputs]

    _torch_classes = (torch, Dense, ResidualEnd, MirrorNet)
    return _torch_classes


def to_torch(ckpt):
    """An equivalent torch.nn.Module, in eval mode, with the checkpoint's weights and running statistics."""
    torch, Dense, ResidualEnd, MirrorNet = _torch_modules()
    nn = torch.nn
    modules = []
    for layer in ckpt.layers:
        k, a, (c, h, w) = layer.kind, layer.args, layer.in_shape
        if k == "dense":
            modules.append(Dense(c * h * w, a[0]))
        elif k == "conv2d":
            modules.append(nn.Conv2d(c, a[0], a[1], stride=a[2], padding=a[3]))
        elif k == "maxpool2d":
            modules.append(nn.MaxPool2d(a[0], a[1]))
        elif k == "avgpool2d":
            modules.append(nn.AvgPool2d(a[0], a[1]))
        elif k == "global_avgpool":
            modules.append(nn.AdaptiveAvgPool2d(1))
        elif k == "flatten":
            modules.append(nn.Flatten())
        elif k == "dropout":
            modules.append(nn.Dropout(a[0]))
        elif k == "batchnorm":  # momentum as PyTorch counts it: r = (1 - m) r + m batch
            bn = nn.BatchNorm1d if layer.flat_in else nn.BatchNorm2d
            modules.append(bn(c, eps=a[1], momentum=a[0]))
        elif k == "residual":
            modules.append(nn.Identity())
        elif k == "residual_end":
            shape = layer.tensors.get(f"layers.{layer.index}.weight")
            modules.append(ResidualEnd(layer.stride, shape))
        else:
            modules.append({"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU}[k]())
    net = MirrorNet([layer.kind for layer in ckpt.layers], modules)
    missing, unexpected = net.load_state_dict({n: torch.from_numpy(t) for n, t in ckpt.tensors.items()},
                                              strict=False)
    missing = [n for n in missing if not n.endswith("num_batches_tracked")]
    if missing or unexpected:  # a mismatch between this file's two halves, never the checkpoint's
        raise MirrorModelError(f"{ckpt.path}: the torch module does not match: {missing or unexpected}")
    return net.eval()


def save_torchscript(ckpt, path):
    """The module traced to TorchScript: torch.jit.load(path) runs it without this file."""
    torch = _torch_modules()[0]
    net = to_torch(ckpt)
    example = torch.rand(2, *ckpt.input_shape)  # any batch size runs the traced module
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # newer torch deprecates TorchScript, still loads it
        torch.jit.save(torch.jit.trace(net, example), path)


def save_state_dict(ckpt, path):
    """The module's state_dict as safetensors, under mirror's names (mirror_load_weights reads it)."""
    _torch_modules()
    st = _need("safetensors.torch", "--state-dict")
    st.save_file({n: t.contiguous() for n, t in to_torch(ckpt).state_dict().items()}, path)


# ---- ONNX --------------------------------------------------------------------

def to_onnx(ckpt, path):
    """Writes an ONNX model of the network (opset 17) with the onnx package alone; returns it."""
    onnx = _need("onnx", "the ONNX export")
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    nodes, inits = [], []

    def const(name, value, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(kind, inputs, out, **attrs):
        nodes.append(helper.make_node(kind, inputs, [out], name=out, **attrs))
        return out

    def planes(x, out):  # [N, F] -> [N, F, 1, 1]
        return op("Unsqueeze", [x, const(out + ".axes", [2, 3], np.int64)], out)

    for name, t in ckpt.tensors.items():
        const(name, t)
    x, flat = "input", False
    block_in, block_flat = x, flat
    for layer in ckpt.layers:
        k, a, p = layer.kind, layer.args, f"layers.{layer.index}"
        if k == "dense" and not flat:
            x, flat = op("Flatten", [x], p + ".flat", axis=1), True
        if k in PLANE and flat:
            x, flat = planes(x, p + ".planes"), False
        if k == "dense":
            x = op("Gemm", [x, p + ".weight", p + ".bias"], p, transB=1)
        elif k == "conv2d":
            x = op("Conv", [x, p + ".weight", p + ".bias"], p, kernel_shape=[a[1]] * 2, strides=[a[2]] * 2,
                   pads=[a[3]] * 4)
        elif k in ("maxpool2d", "avgpool2d"):
            x = op("MaxPool" if k == "maxpool2d" else "AveragePool", [x], p, kernel_shape=[a[0]] * 2,
                   strides=[a[1]] * 2)
        elif k == "global_avgpool":
            x = op("GlobalAveragePool", [x], p)
        elif k == "flatten":
            x, flat = op("Flatten", [x], p, axis=1), True
        elif k in ("relu", "tanh", "sigmoid"):
            x = op(k.capitalize(), [x], p)
        elif k == "gelu":  # Gelu is opset 20: 0.5 x (1 + erf(x / sqrt 2)), as mirror computes it
            e = op("Erf", [op("Mul", [x, const(p + ".c", 0.70710678118654752)], p + ".scaled")], p + ".erf")
            half = op("Mul", [x, const(p + ".half", 0.5)], p + ".halfx")
            x = op("Mul", [half, op("Add", [e, const(p + ".one", 1.0)], p + ".1erf")], p)
        elif k == "batchnorm":  # the inference form: the running statistics
            x = op("BatchNormalization", [x] + [f"{p}.{t}" for t in ("weight", "bias", "running_mean", "running_var")],
                   p, epsilon=a[1])
        elif k == "residual":
            block_in, block_flat = x, flat
        elif k == "residual_end":
            s, s_flat = block_in, block_flat
            if layer.tensors:  # the projection, a strided 1x1 convolution
                if s_flat:
                    s, s_flat = planes(s, p + ".planes"), False
                s = op("Conv", [s, p + ".weight", p + ".bias"], p + ".projection", kernel_shape=[1, 1],
                       strides=[layer.stride] * 2)
            if s_flat != flat:
                s = op("Flatten", [s], p + ".flat", axis=1) if flat else planes(s, p + ".planes")
            x = op("Add", [x, s], p)
        # dropout: the identity in inference, no node
    op("Flatten", [x], "logits", axis=1)  # [N, outputs], whatever the last layer's rank
    c, h, w = ckpt.input_shape
    graph = helper.make_graph(
        nodes, "mirror", [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, ["batch", c, h, w])],
        [helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["batch", ckpt.outputs])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="mirror")
    model.ir_version = 8  # opset 17's own IR version: older runtimes load it too
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return model


# ---- command line ----------------------------------------------------------

def info(ckpt):
    """The layers, output shapes and parameter counts, as lines."""
    c, h, w = ckpt.input_shape
    lines = [f"{ckpt.path}: a mirror checkpoint, trained in {ckpt.precision} (its weights: fp32), "
             f"loss {ckpt.loss}",
             f"{'':>4}  {'input':<24} {c}x{h}x{w}",
             f"{'#':>4}  {'layer':<24} {'output':<12} {'parameters':>10}  tensors"]
    total = 0
    for layer in ckpt.layers:
        count = sum(int(np.prod(s)) for n, s in layer.tensors.items() if not n.endswith(("_mean", "_var")))
        total += count
        tensors = ", ".join(f"{n.split('.')[-1]} {list(s)}" for n, s in layer.tensors.items())
        name = layer.name + (f" (from {layer.start})" if layer.kind == "residual_end" else "")
        shape = "x".join(map(str, layer.out_shape))
        lines.append(f"{layer.index:>4}  {name:<24} {shape:<12} {count:>10}  {tensors}".rstrip())
    lines.append(f"{total} parameters, {ckpt.outputs} outputs")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(prog="mirror_model.py", description="A mirror checkpoint out to "
                                     "PyTorch and ONNX.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="the layers, shapes and parameter counts").add_argument("ckpt")
    ex = sub.add_parser("export", help="write the model as ONNX, TorchScript or a state_dict")
    ex.add_argument("ckpt")
    ex.add_argument("--onnx", metavar="OUT.onnx")
    ex.add_argument("--torch", metavar="OUT.pt", help="TorchScript (torch.jit.trace)")
    ex.add_argument("--state-dict", metavar="OUT.safetensors", help="the torch module's state_dict")
    args = parser.parse_args(argv)
    try:
        ckpt = load(args.ckpt)
        if args.command == "info":
            print("\n".join(info(ckpt)))
            return 0
        if not (args.onnx or args.torch or args.state_dict):
            raise MirrorModelError("export: nothing to write (give --onnx, --torch or --state-dict)")
        if args.onnx:
            to_onnx(ckpt, args.onnx)
            print(f"wrote {args.onnx}")
        if args.torch:
            save_torchscript(ckpt, args.torch)
            print(f"wrote {args.torch}")
        if args.state_dict:
            save_state_dict(ckpt, args.state_dict)
            print(f"wrote {args.state_dict}")
    except (MirrorModelError, OSError) as e:
        print(f"mirror_model: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
