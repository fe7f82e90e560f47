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
  python3 tools/mirror_model.py export CKPT [--onnx OUT.onnx] [--pt2 OUT.pt2]
                                           [--torch OUT.pt] [--state-dict OUT.safetensors]
      --onnx        ONNX (opset 17), input "input" [batch, C, H, W], output
                    "logits" [batch, outputs]; needs the onnx package only
      --pt2         torch.export's ExportedProgram (torch.export.load(path)
                    .module() runs it without this file, any batch size):
                    PyTorch's format of choice from 2.x on
      --torch       TorchScript (torch.jit.load opens it without this file),
                    which PyTorch 2.15 marks deprecated when it loads it
      --state-dict  the torch module's state_dict (safetensors), whose names
                    are mirror's: train.c --init-weights loads it back
  python3 tools/mirror_model.py predict CKPT DATA.npy --out OUT.npy [--probabilities]
      the model's outputs for every sample of DATA.npy (float32, or uint8
      scaled to [0, 1] as mirror's loader does; shaped (n, C, H, W), (n, H, W)
      or (n, features)) as float32 (n, outputs): logits, or softmax
      probabilities; numpy alone runs the network (forward), in float64,
      what build/train --predict writes within 1e-5. OUT never replaces the
      checkpoint or DATA.

As a module (tools/ on sys.path):
  import mirror_model
  ckpt = mirror_model.load("model.ckpt")      # parsed and checked
  net = mirror_model.to_torch(ckpt)           # a torch.nn.Module in eval mode
  mirror_model.to_onnx(ckpt, "model.onnx")
  logits = mirror_model.forward(ckpt, x)      # numpy: x [n, C, H, W] -> [n, outputs]

The outputs are the last layer's (logits: no softmax). Needs numpy and
safetensors; torch and onnx are imported only by what uses them.

A checkpoint is untrusted input: its description is held to mirror.h's
limits (mirror_model_from_checkpoint's parser, each layer's ranges), its
tensors to the description and the file's size, before anything is built.
An export never replaces the checkpoint, another mirror checkpoint or
another output of the same command (by path, device and inode), and goes
to a temporary file beside its place, renamed there when whole. Every
error is one line on stderr, exit 1 (argparse's usage errors: 2).
"""
import argparse
import contextlib
import importlib
import io
import json
import math
import os
import re
import stat
import sys
import tempfile
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
# mirror.h's limits, which a description is held to as mirror_model_from_checkpoint holds it: every
# argument in [0, 1e9]; the sizes each layer takes (mirror_dense, mirror_conv2d, ...); at most 2^28
# values in the input and in any layer's output per sample, 2^30 weights in a layer, 64 layers.
ARG_MAX = 1e9
SIZE_MAX = {"dense": (1 << 24,), "conv2d": (1 << 16, 64, 64), "maxpool2d": (64, 64), "avgpool2d": (64, 64)}
SIZE_NAMES = {"dense": ("units",), "conv2d": ("filters", "kernel", "stride"), "maxpool2d": ("window", "stride"),
              "avgpool2d": ("window", "stride")}
VALUES_MAX, WEIGHTS_MAX, LAYERS_MAX = 1 << 28, 1 << 30, 64
# A number as mirror's parser (strtod after a digit) reads one: decimal or hexadecimal, no sign.
NUMBER = (r"0[xX](?:[0-9a-fA-F]+(?:\.[0-9a-fA-F]*)?|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?"
          r"|[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?")
# --torch traces the network on 2 samples: the activations that trace may take.
TRACE_BYTES = 1 << 30


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
        m = re.fullmatch(rf"([a-z_0-9]+)(?:\(((?:{NUMBER})(?:,(?:{NUMBER})){{0,3}})\))?", text)
        if not m:
            raise MirrorModelError(f'{path}: malformed layer "{text}" in the model description')
        args = [_number(a) for a in m.group(2).split(",")] if m.group(2) is not None else []
        yield m.group(1), args


def _number(text):
    """A number as C's strtod reads it: a hexadecimal float too large is infinite, as in C (then out of range)."""
    try:
        return float.fromhex(text) if text[1:2] in ("x", "X") else float(text)
    except OverflowError:
        return math.inf


def _f32(a):
    """A float as mirror holds it (batchnorm's eps "9.99999975e-06" is float32's 1e-5)."""
    with np.errstate(over="ignore"):
        return float(np.float32(a))


def _check_args(kind, args, where):
    """A layer's arguments checked as mirror_dense, mirror_conv2d, ... check them; the sizes as ints."""
    if kind in SIZE_MAX:
        sizes = [int(a) for a in args]  # (size_t) in C: the fraction dropped
        for name, v, top in zip(SIZE_NAMES[kind], sizes, SIZE_MAX[kind]):
            if not 1 <= v <= top:
                raise MirrorModelError(f"{where}: {name} {v} is out of range [1, {top}]")
        return tuple(sizes)
    if kind == "dropout":
        p = _f32(args[0])
        if not 0 <= p < 1:
            raise MirrorModelError(f"{where}: p {p:g}: a probability in [0, 1)")
        return (p,)
    if kind == "batchnorm":
        momentum, eps = _f32(args[0]), _f32(args[1])
        if not (0 < momentum <= 1 and 0 < eps <= 1):
            raise MirrorModelError(f"{where}: momentum {momentum:g} and eps {eps:g}: each in (0, 1]")
        if args[2] > 1:
            raise MirrorModelError(f"{where}: its third argument {args[2]:g} is 1 (local statistics) or 0 "
                                   "(synchronised)")
        return (momentum, eps, args[2])
    return tuple(args)


def parse_model(model, path="checkpoint"):
    """The layers of a model description, each with its shapes and tensors; the loss. Every argument,
    shape and size is checked as mirror checks it when it rebuilds the model."""
    head, _, tail = model.rpartition(";")
    loss = re.fullmatch(r"loss\((softmax_ce|mse)\)", tail)
    if not loss:
        raise MirrorModelError(f'{path}: the model description ends in "{tail}", not loss(softmax_ce) or '
                               'loss(mse): truncated?')
    entries = list(_entries(head, path))
    name, args = entries[0]
    if name != "input" or len(args) != 3:
        raise MirrorModelError(f'{path}: the model description starts with "{name}", not input(C,H,W)')
    if not all(1 <= a <= ARG_MAX for a in args):
        raise MirrorModelError(f"{path}: input({','.join(f'{a:g}' for a in args)}) out of range: each in [1, 1e9]")
    shape, flat, block = tuple(int(a) for a in args), False, None
    if np.prod(shape, dtype=np.float64) > VALUES_MAX:
        raise MirrorModelError(f"{path}: input {'x'.join(map(str, shape))} is too large (at most 2^28 values)")
    if len(entries) - 1 > LAYERS_MAX:
        raise MirrorModelError(f"{path}: {len(entries) - 1} layers, more than {LAYERS_MAX}")
    input_shape, layers = shape, []
    for i, (kind, args) in enumerate(entries[1:]):
        where = f"{path}: layer {i}, {kind}"
        if kind not in ARITY or len(args) != ARITY[kind]:
            raise MirrorModelError(f'{path}: unknown layer "{kind}" with {len(args)} arguments (layer {i})')
        if not all(0 <= a <= ARG_MAX for a in args):
            raise MirrorModelError(f"{where}({','.join(f'{a:g}' for a in args)}) out of range: each "
                                   "argument in [0, 1e9]")
        args = _check_args(kind, args, where)
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
            if pad >= k:
                raise MirrorModelError(f"{where}: padding {pad} must be below the kernel size {k}")
            if k > h + 2 * pad or k > w + 2 * pad:
                raise MirrorModelError(f"{where}: kernel {k}, padding {pad} do not fit the input {c}x{h}x{w}")
            layer.out_shape = (o, (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1)
            layer.tensors = {p + "weight": (o, c, k, k), p + "bias": (o,)}
        elif kind in ("maxpool2d", "avgpool2d"):
            k, s = args
            if k > h or k > w:
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
        weights = max((int(np.prod(t, dtype=np.float64)) for t in layer.tensors.values()), default=0)
        if np.prod(layer.out_shape, dtype=np.float64) > VALUES_MAX or weights > WEIGHTS_MAX:
            raise MirrorModelError(f"{where}: too large (an output of {'x'.join(map(str, layer.out_shape))}, "
                                   f"{weights} weights; at most 2^28 and 2^30)")
        layers.append(layer)
        shape = layer.out_shape
        # Flat after flatten and dense; planes again after the layers of PLANE.
        flat = kind in ("flatten", "dense") or (flat and kind not in PLANE)
    if not layers:
        raise MirrorModelError(f"{path}: the model description has no layers")
    if block is not None:
        raise MirrorModelError(f"{path}: the residual block opened at layer {block.index} is never closed")
    if loss.group(1) == "softmax_ce" and np.prod(shape) < 2:
        raise MirrorModelError(f"{path}: softmax cross-entropy needs at least 2 outputs, the last layer gives "
                               f"{int(np.prod(shape))}")
    return input_shape, layers, loss.group(1)


def _safetensors(path, read):
    """read(f) on the safetensors file at path, whose header safetensors checks against the file's size
    (every tensor inside the file, nothing else in it); its errors said in one line."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise MirrorModelError(f"{path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise MirrorModelError(f"{path}: not a regular file")
    try:
        with safe_open(path, framework="numpy") as f:
            return read(f)
    except Exception as e:  # OSError, or safetensors' own error
        raise MirrorModelError(f"{path}: cannot be read as safetensors ({e})") from None


def load(path):
    """Reads and checks a mirror checkpoint: its layers and every tensor they need, each tensor's dtype and
    shape checked against the description before any is read, then its values."""
    meta, found = _safetensors(path, lambda f: (f.metadata() or {}, {
        n: (f.get_slice(n).get_dtype(), tuple(f.get_slice(n).get_shape())) for n in f.keys()}))
    if meta.get("format") != "mirror" or "model" not in meta:
        raise MirrorModelError(f"{path}: not a mirror checkpoint (no \"format\": \"mirror\" and model)")
    input_shape, layers, loss = parse_model(meta["model"], path)
    for layer in layers:
        for name, shape in layer.tensors.items():
            if name not in found:
                raise MirrorModelError(f"{path}: tensor {name} {list(shape)} of {layer.name} is missing")
            dtype, got = found[name]
            if got != shape:
                raise MirrorModelError(f"{path}: tensor {name} has shape {list(got)}, {layer.name} needs "
                                       f"{list(shape)}")
            if dtype != "F32":
                raise MirrorModelError(f"{path}: tensor {name} is {dtype}, a checkpoint's are F32")
    needed = [n for layer in layers for n in layer.tensors]
    extra = sorted(n for n in found if n.startswith("layers.") and n not in needed)
    if extra:
        raise MirrorModelError(f"{path}: tensor {extra[0]} belongs to no layer of the model")
    tensors = _safetensors(path, lambda f: {n: f.get_tensor(n).astype(np.float32) for n in needed})
    for name, t in tensors.items():
        if not np.isfinite(t).all():
            raise MirrorModelError(f"{path}: tensor {name} holds a value that is not finite")
        if name.endswith(".running_var") and (t < 0).any():
            raise MirrorModelError(f"{path}: tensor {name} holds a negative variance")
    return Checkpoint(path, input_shape, layers, loss, meta.get("precision", "fp32"), tensors)


def _need(package, what):
    """Imports a package that only some exports need, or says how to get it."""
    try:
        return importlib.import_module(package)
    except ImportError:
        raise MirrorModelError(f"{what} needs {package}, which is not installed: "
                               f"python3 -m pip install {package}") from None


# ---- outputs -----------------------------------------------------------------

def _header_metadata(path):
    """The __metadata__ of a safetensors file's header, or None (not one, unreadable): read from its first
    bytes only, the length bounded as mirror bounds a checkpoint's."""
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if not 2 <= n <= 1 << 26:
                return None
            meta = json.loads(f.read(n)).get("__metadata__")
            return meta if isinstance(meta, dict) else None
    except (OSError, ValueError, AttributeError):
        return None


def check_outputs(ckpt_path, outputs):
    """Refuses outputs (option -> path) that would destroy a file that is not theirs: the checkpoint itself
    (by path, or by device and inode: a symlink or hard link to it), another mirror checkpoint (its kept
    copies PATH.1, ...), something not a regular file, or one file named by two outputs; and an output whose
    directory does not exist. Nothing is written before all of them pass."""
    try:
        ckpt = os.stat(ckpt_path)
    except OSError as e:
        raise MirrorModelError(f"{ckpt_path}: {e.strerror}") from None
    seen = {}
    for option, path in outputs.items():
        where = f"{option} {path}"
        if not path:
            raise MirrorModelError(f"{option}: an empty path")
        real, folder = os.path.realpath(path), os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise MirrorModelError(f"{where}: the directory {folder} does not exist")
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise MirrorModelError(f"{where}: {e.strerror}") from None
        if real == os.path.realpath(ckpt_path) or (st and (st.st_dev, st.st_ino) == (ckpt.st_dev, ckpt.st_ino)):
            raise MirrorModelError(f"{where}: that is the checkpoint {ckpt_path}, which an export never replaces")
        if st and not stat.S_ISREG(st.st_mode):
            raise MirrorModelError(f"{where}: exists and is not a regular file")
        if st and (_header_metadata(path) or {}).get("format") == "mirror":
            raise MirrorModelError(f"{where}: that is a mirror checkpoint, which an export never replaces")
        for key in [real] + ([(st.st_dev, st.st_ino)] if st else []):
            if key in seen:
                raise MirrorModelError(f"{where}: {seen[key]} names the same file")
            seen[key] = option


def _replace(path, write):
    """write(tmp) into a temporary file beside path, then renamed onto it: path is the whole new file or
    what it was before, never a part. The file gets the mode a new file would (0666 less the umask)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename itself on disk
        d = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(d)
        finally:
            os.close(d)


# ---- numpy -------------------------------------------------------------------

def _erf(x):
    """erf elementwise (numpy has none; math's, vectorised), for gelu."""
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


def _windows(x, k, s, pad=0):
    """The k x k windows of planes x [N, C, H, W] at stride s, zero-padded: [N, C, Ho, Wo, k, k]."""
    if pad:
        x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    return np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::s, ::s]


def _forward_chunk(ckpt, x):
    """The network on x [n, C, H, W] (float64), as mirror runs it in inference: dropout passes its input,
    batchnorm normalises with the running statistics."""
    t, block_in = ckpt.tensors, None
    for layer in ckpt.layers:
        k, a, p = layer.kind, layer.args, f"layers.{layer.index}."
        x = x.reshape((len(x),) + tuple(layer.in_shape))  # a flat [n, F] as [n, F, 1, 1]
        if k == "dense":
            x = x.reshape(len(x), -1) @ t[p + "weight"].astype(np.float64).T + t[p + "bias"]
        elif k == "conv2d":
            win = _windows(x, a[1], a[2], a[3])
            x = np.einsum("nchwij,ocij->nohw", win, t[p + "weight"].astype(np.float64), optimize=True)
            x = x + t[p + "bias"].astype(np.float64)[None, :, None, None]
        elif k == "maxpool2d":
            x = _windows(x, a[0], a[1]).max(axis=(4, 5))
        elif k == "avgpool2d":
            x = _windows(x, a[0], a[1]).mean(axis=(4, 5))
        elif k == "global_avgpool":
            x = x.mean(axis=(2, 3))
        elif k == "batchnorm":
            shape = (1, -1, 1, 1)
            scale = t[p + "weight"].astype(np.float64) / np.sqrt(t[p + "running_var"].astype(np.float64) + a[1])
            x = (x - t[p + "running_mean"].reshape(shape)) * scale.reshape(shape) + t[p + "bias"].reshape(shape)
        elif k == "relu":
            x = np.maximum(x, 0.0)
        elif k == "tanh":
            x = np.tanh(x)
        elif k == "sigmoid":
            x = 1.0 / (1.0 + np.exp(-x))
        elif k == "gelu":
            x = 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
        elif k == "residual":
            block_in = x
        elif k == "residual_end":
            add = block_in
            if p + "weight" in t:  # the block's input projected: a strided 1x1 convolution
                w = t[p + "weight"].astype(np.float64)[:, :, 0, 0]
                add = np.einsum("nchw,oc->nohw", add[:, :, ::layer.stride, ::layer.stride], w)
                add = add + t[p + "bias"].astype(np.float64)[None, :, None, None]
            x = x + add.reshape(x.shape)
        # flatten and dropout (inference) change no value
    return x.reshape(len(x), -1)


def forward(ckpt, x, probabilities=False, chunk=256):
    """The model's outputs for x [n, C, H, W] (or any shape of n x C*H*W values) as float32 [n, outputs]:
    logits, or softmax probabilities. numpy only, in float64 (mirror's float32 sums differ by rounding)."""
    x = np.asarray(x)
    size = int(np.prod(ckpt.input_shape))
    if x.ndim < 1 or x.size != len(x) * size:
        raise MirrorModelError(f"the samples have shape {list(x.shape)}; the model takes "
                               f"{'x'.join(map(str, ckpt.input_shape))} = {size} values each")
    x = x.reshape((len(x),) + tuple(ckpt.input_shape)).astype(np.float64)
    out = np.concatenate([_forward_chunk(ckpt, x[i:i + chunk]) for i in range(0, len(x), chunk)]) \
        if len(x) else np.zeros((0, ckpt.outputs))
    if probabilities:
        if ckpt.loss != "softmax_ce":
            raise MirrorModelError(f"{ckpt.path}: --probabilities: the model's loss is {ckpt.loss}, its outputs "
                                   "are no logits")
        out = np.exp(out - out.max(axis=1, keepdims=True))
        out /= out.sum(axis=1, keepdims=True)
    return out.astype(np.float32)


def load_samples(path):
    """A .npy file of samples as mirror_dataset_load_npy reads one: float32 as it is, uint8 scaled to [0, 1]."""
    try:
        x = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise MirrorModelError(f"{path}: not a .npy file numpy reads ({e})") from None
    if x.dtype == np.uint8:
        return x.astype(np.float32) * np.float32(1.0 / 255.0)
    if x.dtype != np.float32:
        raise MirrorModelError(f"{path}: dtype {x.dtype}; samples are float32 or uint8, as mirror reads them")
    return x


def save_predictions(ckpt, data_path, out_path, probabilities=False):
    """forward() of DATA's samples into out_path (.npy, float32), written whole or not at all; out_path is
    never the checkpoint nor DATA (check_outputs's care, and DATA's by path, device and inode)."""
    check_outputs(ckpt.path, {"--out": out_path})
    with contextlib.suppress(OSError):
        a, b = os.stat(data_path), os.stat(out_path)
        if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino):
            raise MirrorModelError(f"--out {out_path}: that is DATA {data_path}, which predict never replaces")
    if os.path.realpath(data_path) == os.path.realpath(out_path):
        raise MirrorModelError(f"--out {out_path}: that is DATA {data_path}, which predict never replaces")
    y = forward(ckpt, load_samples(data_path), probabilities)

    def write(tmp):
        with open(tmp, "wb") as f:  # a file object: np.save would add ".npy" to a name
            np.save(f, y)
    _replace(out_path, write)
    return y


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


def trace_bytes(ckpt):
    """What the trace's 2 samples take at most: the input and every layer's output, in float32."""
    values = np.prod(ckpt.input_shape, dtype=np.float64) + sum(np.prod(layer.out_shape, dtype=np.float64)
                                                              for layer in ckpt.layers)
    return int(2 * 4 * values)


def save_torchscript(ckpt, path):
    """The module traced to TorchScript: torch.jit.load(path) runs it without this file."""
    need = trace_bytes(ckpt)
    if need > TRACE_BYTES:  # before torch allocates: a small file may describe huge activations
        raise MirrorModelError(f"{ckpt.path}: --torch traces the network on 2 samples, whose activations take "
                               f"up to {need / 2**20:.0f} MiB, over the {TRACE_BYTES >> 20} MiB allowed "
                               "(--onnx and --state-dict run nothing)")
    torch = _torch_modules()[0]
    net = to_torch(ckpt)
    example = torch.rand(2, *ckpt.input_shape)  # any batch size runs the traced module
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # newer torch deprecates TorchScript, still loads it
        traced = torch.jit.trace(net, example)
        _replace(path, lambda tmp: torch.jit.save(traced, tmp))


def save_exported(ckpt, path):
    """The module through torch.export, saved as a .pt2 archive: torch.export.load(path).module() runs it
    without this file, on any batch size (the batch is a dynamic dimension). torch.export traces with fake
    tensors: nothing runs on data, so no activation is allocated."""
    torch = _torch_modules()[0]
    net = to_torch(ckpt)
    example = (torch.rand(2, *ckpt.input_shape),)
    batch = torch.export.Dim("batch", min=1)
    with torch.no_grad():
        program = torch.export.export(net, example, dynamic_shapes=({0: batch},))
    buffer = io.BytesIO()  # torch.export.save wants a name ending in .pt2, or a buffer: the temporary's is not
    torch.export.save(program, buffer)

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(buffer.getvalue())
    _replace(path, write)


def save_state_dict(ckpt, path):
    """The module's state_dict as safetensors, under mirror's names (mirror_load_weights reads it)."""
    _torch_modules()
    st = _need("safetensors.torch", "--state-dict")
    state = {n: t.contiguous() for n, t in to_torch(ckpt).state_dict().items()}
    _replace(path, lambda tmp: st.save_file(state, tmp))


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
    _replace(path, lambda tmp: onnx.save(model, tmp))
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
    ex = sub.add_parser("export", help="write the model as ONNX, a torch.export program, TorchScript or a state_dict")
    ex.add_argument("ckpt")
    ex.add_argument("--onnx", metavar="OUT.onnx")
    ex.add_argument("--pt2", metavar="OUT.pt2", help="torch.export's ExportedProgram (torch.export.load)")
    ex.add_argument("--torch", metavar="OUT.pt", help="TorchScript (torch.jit.trace; deprecated by PyTorch 2.15)")
    ex.add_argument("--state-dict", metavar="OUT.safetensors", help="the torch module's state_dict")
    pr = sub.add_parser("predict", help="the model's outputs for a .npy of samples, by numpy alone")
    pr.add_argument("ckpt")
    pr.add_argument("data", metavar="DATA.npy")
    pr.add_argument("--out", metavar="OUT.npy", required=True, help="float32 [n, outputs]")
    pr.add_argument("--probabilities", action="store_true", help="softmax probabilities instead of logits")
    args = parser.parse_args(argv)
    step = "reading"
    try:
        ckpt = load(args.ckpt)
        if args.command == "info":
            print("\n".join(info(ckpt)))
            return 0
        if args.command == "predict":
            step = f"--out {args.out}"
            y = save_predictions(ckpt, args.data, args.out, args.probabilities)
            print(f"wrote {args.out}: {len(y)} samples, {'probabilities' if args.probabilities else 'logits'} "
                  f"of {y.shape[1]} outputs")
            return 0
        outputs = {o: p for o, p in (("--onnx", args.onnx), ("--pt2", args.pt2), ("--torch", args.torch),
                                     ("--state-dict", args.state_dict)) if p is not None}
        if not outputs:
            raise MirrorModelError("export: nothing to write (give --onnx, --pt2, --torch or --state-dict)")
        check_outputs(args.ckpt, outputs)
        for option, path in outputs.items():
            step = f"{option} {path}"
            {"--onnx": to_onnx, "--pt2": save_exported, "--torch": save_torchscript,
             "--state-dict": save_state_dict}[option](ckpt, path)
            print(f"wrote {path}")
    except MirrorModelError as e:
        print(f"mirror_model: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"mirror_model: {step}: {e.filename + ': ' if e.filename else ''}{e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mirror_model: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # what onnx or torch refuse, still one line
        text = " ".join(str(e).split())
        print(f"mirror_model: {step}: {type(e).__name__}: {text[:500]}", file=sys.stderr)
        return 1
    return 0

if __name__ == "__main__":
    sys.exit(main())
