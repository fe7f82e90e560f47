#!/usr/bin/env python3
"""test_export.py BUILD_DIR - tools/mirror_model.py's exports give mirror's logits.

Trains small checkpoints with BUILD_DIR/train (mlp, cnn, cnn-bn, resnet in
fp32; cnn-bn in bf16, whose export is its fp32 master weights), writes one
by hand of the layers those lack (LAYERS), gets mirror's logits for random
inputs from BUILD_DIR/interop_predict (tests/interop/predict.c) and
compares them with onnxruntime's on the ONNX export and, where torch
imports, with the torch module's, the torch.export program's (.pt2) and the
TorchScript file's, each file loaded by a Python that has never seen
mirror_model: at most 1e-5 apart (a torch that is missing or fails to
import skips those checks, saying why). Checks that broken checkpoints are refused in one line, and, with
torch, that the module's state_dict loads back into mirror
(mirror_load_weights) to bitwise the same logits.
Ends with "interop: N passed, N failed"; exit 1 when any failed.
Run by make test-interop (needs numpy, safetensors, onnx, onnxruntime).
"""
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np
import onnxruntime
from safetensors.numpy import load_file, save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "mirror_model.py")
sys.path.insert(0, os.path.dirname(TOOL))
import mirror_model  # noqa: E402

try:
    import torch
    TORCH_WHY = None
except Exception as e:  # missing, or broken: its failure is not mirror's, so its checks skip with the reason
    torch, TORCH_WHY = None, " ".join(f"{type(e).__name__}: {e}".split())[:300]

TOLERANCE = 1e-5
# The layers build/train has no model for: tanh, sigmoid, gelu, avgpool2d,
# dropout, batchnorm and dense on flat inputs, blocks whose projection has
# another stride than their body's, or goes from planes to a flat output.
LAYERS = ("input(1,28,28);conv2d(8,3,2,1);tanh;avgpool2d(2,2);residual;conv2d(8,3,1,1);gelu;residual_end;"
          "residual;conv2d(12,3,2,0);sigmoid;residual_end;global_avgpool;residual;dense(16);residual_end;"
          "batchnorm(0.100000001,9.99999975e-06,0);dropout(0.25);residual;dense(16);gelu;residual_end;dense(10);"
          "loss(mse)")
# What the trainer writes beside the model for an SGD run.
RUN = {"format": "mirror", "version": "1", "optimizer": "sgd", "lr": "0.00999999978", "momentum": "0",
       "nesterov": "0", "weight_decay": "0", "beta1": "0.899999976", "beta2": "0.999000013", "eps": "9.99999994e-09",
       "clip_norm": "0", "precision": "fp32", "loss_scaler": "none", "seed": "1", "lr_schedule": "constant",
       "warmup": "0", "step_size": "0", "gamma": "0.100000001", "total_steps": "0", "min_lr": "0",
       "deterministic": "1", "chunk": "16", "backend": "cpu", "step": "2", "epoch": "1", "epoch_step": "0",
       "shuffle_seed": "1", "batch": "64", "samples": "128", "drop_remainder": "0", "micro_batch": "64"}
SAMPLES = 256
passed = failed = 0


def check(ok, what):
    global passed, failed
    passed, failed = passed + bool(ok), failed + (not ok)
    if not ok:
        print(f"FAILED: {what}")
    return ok


def run(*args):
    """A command's exit status and its output, stdout and stderr apart."""
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def max_diff(a, b):
    return float(np.max(np.abs(a - b))) if a.shape == b.shape else float("inf")


def train(build, tmp, name, model, *extra, samples=512):
    """A checkpoint of `model` after one short epoch on synthetic digits."""
    path = os.path.join(tmp, name + ".ckpt")
    rc, _, err = run(f"{build}/train", "--model", model, "--synthetic", samples, "--epochs", 1, "--batch", 64,
                       "--progress", "none", "--save", path, *extra)
    if not check(rc == 0, f"train {name}: exit {rc}: {err.strip()}"):
        return None
    return path


def handmade(path, model, seed=3):
    """A checkpoint of `model` with random weights, as mirror writes one: each tensor's crc32, and the
    header's over its text with that value zeroed."""
    rng, header, meta, data = np.random.default_rng(seed), {}, dict(RUN, model=model), b""
    for layer in mirror_model.parse_model(model)[1]:
        for name, shape in layer.tensors.items():
            t = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))  # 1 / sqrt(fan in)
            if layer.kind == "batchnorm":  # gamma near 1, beta and mean near 0, var in [0.5, 1.5]
                t = {"weight": 1 + t / 4, "bias": t / 4, "running_mean": t / 4}.get(name.split(".")[2],
                                                                                      rng.random(shape) + 0.5)
            b = t.astype("<f4").tobytes()
            header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [len(data), len(data) + len(b)]}
            meta["crc32." + name] = f"{zlib.crc32(b):08x}"
            data += b
    meta["crc32.header"] = "00000000"
    text = json.dumps({"__metadata__": meta, **header}, separators=(",", ":"))
    text += " " * (-len(text) % 8)
    text = text.replace('"crc32.header":"00000000"', f'"crc32.header":"{zlib.crc32(text.encode()):08x}"')
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text.encode() + data)
    return path


def predict(build, tmp, ckpt, weights=None):
    """mirror's logits for tmp/in.f32 (fp32, 1 CPU replica); None when predict fails."""
    y = os.path.join(tmp, "out.f32")
    rc, _, err = run(f"{build}/interop_predict", ckpt, os.path.join(tmp, "in.f32"), SAMPLES, y,
                     *([weights] if weights else []))
    if not check(rc == 0, f"interop_predict {os.path.basename(ckpt)}: exit {rc}: {err.strip()}"):
        return None
    return np.fromfile(y, np.float32).reshape(SAMPLES, -1)


def compare(name, tmp, ckpt, want, x, scripts):
    """The exports of ckpt against mirror's logits `want`; returns what was measured."""
    onnx_path, pt_path, pt2_path = (os.path.join(tmp, name + e) for e in (".onnx", ".pt", ".pt2"))
    with contextlib.redirect_stdout(io.StringIO()):  # its "wrote ..." lines
        rc = mirror_model.main(["export", ckpt, "--onnx", onnx_path] +
                               (["--torch", pt_path, "--pt2", pt2_path] if torch else []))
    if not check(rc == 0, f"{name}: export: exit {rc}"):
        return ""
    session = onnxruntime.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    d = max_diff(session.run(["logits"], {"input": x})[0], want)
    check(d <= TOLERANCE, f"{name}: onnxruntime's logits {d:.3g} from mirror's")
    line = f"logits up to {np.abs(want).max():.2g}, max |difference| from mirror's: onnxruntime {d:.2g}"
    d = max_diff(mirror_model.forward(mirror_model.load(ckpt), x), want)  # the tool's predict, numpy alone
    check(d <= TOLERANCE, f"{name}: mirror_model.forward's (numpy) logits {d:.3g} from mirror's")
    line += f", numpy {d:.2g}"
    if torch:
        net = mirror_model.to_torch(mirror_model.load(ckpt))
        with torch.no_grad():
            d = max_diff(net(torch.from_numpy(x)).numpy(), want)
        check(d <= TOLERANCE, f"{name}: the torch module's logits {d:.3g} from mirror's")
        names = {n for n in net.state_dict() if not n.endswith(".num_batches_tracked")}
        check(names == set(load_file(ckpt)) - {"optimizer.m", "optimizer.v"},
              f"{name}: the state_dict's names are not the checkpoint's: {sorted(names)[:4]}...")
        line += f", torch {d:.2g}"
        scripts.append((name, pt_path, pt2_path, want))
    return line


def torchscript(tmp, x, scripts):
    """The TorchScript and torch.export files, loaded by a Python that has never seen mirror_model: the
    .pt2 program on the whole input and on one sample (its batch is dynamic)."""
    if not scripts:
        return {}
    np.save(os.path.join(tmp, "x.npy"), x)
    code = ("import sys, numpy as np, torch\nx = torch.from_numpy(np.load(sys.argv[1]))\n"
            "for p in sys.argv[2:]:\n"
            "    if p.endswith('.pt2'):\n"
            "        net = torch.export.load(p).module()\n"
            "        np.save(p + '.npy', torch.cat([net(x[:1]), net(x[1:])]).detach().numpy())\n"
            "    else:\n"
            "        np.save(p + '.npy', torch.jit.load(p)(x).detach().numpy())\n")
    rc, _, err = run(sys.executable, "-I", "-W", "ignore", "-c", code, os.path.join(tmp, "x.npy"),
                     *[p for _, pt, pt2, _ in scripts for p in (pt, pt2)])
    if not check(rc == 0, f"torch.jit.load and torch.export.load of the files: exit {rc}: {err.strip()[-300:]}"):
        return {}
    diffs = {}
    for name, pt, pt2, want in scripts:
        diffs[name] = d, d2 = max_diff(np.load(pt + ".npy"), want), max_diff(np.load(pt2 + ".npy"), want)
        check(d <= TOLERANCE, f"{name}: the TorchScript file's logits {d:.3g} from mirror's")
        check(d2 <= TOLERANCE, f"{name}: the torch.export program's logits {d2:.3g} from mirror's")
    return diffs


def refused(tmp, good, name, change, says):
    """A broken copy of checkpoint `good`: info fails with one line naming the fault, exit 1."""
    tensors = load_file(good)
    with open(good, "rb") as f:  # the metadata, which safetensors.numpy does not return
        meta = json.loads(f.read(int.from_bytes(f.read(8), "little")))["__metadata__"]
    change(tensors, meta)
    path = os.path.join(tmp, name + ".ckpt")
    save_file(tensors, path, metadata=meta)
    rc, _, err = run(sys.executable, TOOL, "info", path)
    lines = err.strip().splitlines()
    check(rc == 1 and len(lines) == 1 and lines[0].startswith("mirror_model: ") and says in lines[0],
          f"{name}: info exits {rc}, saying {err.strip()[-300:]!r}; want one line with {says!r}")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: test_export.py BUILD_DIR")
    build, start = sys.argv[1], time.time()
    tmp = tempfile.mkdtemp(prefix="mirror_interop_")
    try:
        x = np.random.default_rng(7).random((SAMPLES, 1, 28, 28), dtype=np.float32)  # digits' range, [0, 1)
        x.tofile(os.path.join(tmp, "in.f32"))
        ckpts = {m: train(build, tmp, m, m) for m in ("mlp", "cnn", "cnn-bn", "resnet")}
        ckpts["cnn-bn-bf16"] = train(build, tmp, "cnn-bn-bf16", "cnn-bn", "--precision", "bf16")
        ckpts["layers"] = handmade(os.path.join(tmp, "layers.ckpt"), LAYERS)
        # BatchNorm's running statistics moved off their start (0 and 1), so that a check sees them.
        if ckpts["cnn-bn"]:
            t = load_file(ckpts["cnn-bn"])
            check(np.abs(t["layers.1.running_mean"]).min() > 0 and np.abs(t["layers.1.running_var"] - 1).min() > 0,
                  "cnn-bn: the running statistics are still 0 and 1 after training")

        scripts, lines, wants = [], {}, {}
        for name, ckpt in ckpts.items():
            if not ckpt:
                continue
            if name == "cnn-bn-bf16":  # mirror's fp32 logits from the bf16 run's masters
                rc, _, err = run(f"{build}/interop_predict", ckpt, os.path.join(tmp, "in.f32"), SAMPLES,
                                 os.path.join(tmp, "no.f32"))
                check(rc == 1 and "16-bit checkpoint" in err, f"interop_predict on a bf16 CKPT: exit {rc}, {err}")
                want = predict(build, tmp, ckpts["cnn-bn"], ckpt) if ckpts["cnn-bn"] else None
            else:
                want = predict(build, tmp, ckpt)
            if want is not None:
                wants[name] = want
                try:
                    lines[name] = compare(name, tmp, ckpt, want, x, scripts)
                except Exception as e:  # onnxruntime or torch refusing an export
                    check(False, f"{name}: {type(e).__name__}: {e}")
        diffs = torchscript(tmp, x, scripts)
        for name, line in lines.items():
            ts = diffs.get(name)
            print(f"{name}: {line}" + (f", torchscript {ts[0]:.2g}, torch.export {ts[1]:.2g}" if ts else ""))
        if not torch:
            print(f"skipped: the torch checks (the module, TorchScript, torch.export, the state_dict): torch does "
                  f"not import ({TORCH_WHY})")

        if ckpts["cnn"]:
            def truncate(t, meta):
                meta["model"] = meta["model"][:len(meta["model"]) // 2]

            def unknown(t, meta):
                meta["model"] = meta["model"].replace("relu", "swish", 1)

            def drop(t, meta):
                del t["layers.0.weight"]

            def reshape(t, meta):
                t["layers.7.weight"] = np.ascontiguousarray(t["layers.7.weight"].T)

            refused(tmp, ckpts["cnn"], "truncated", truncate, "truncated")
            refused(tmp, ckpts["cnn"], "unknown", unknown, '"swish"')
            refused(tmp, ckpts["cnn"], "missing", drop, "layers.0.weight")
            refused(tmp, ckpts["cnn"], "reshaped", reshape, "[1568, 128]")

        # mirror -> torch module -> state_dict file -> mirror: bitwise the same logits, in a
        # model rebuilt from another checkpoint of the same layers (another seed, one step).
        if torch:
            for name in ("mlp", "cnn", "cnn-bn", "resnet", "layers"):
                if name not in wants:
                    continue
                sd = os.path.join(tmp, name + ".safetensors")  # the module's state_dict(), save_file'd
                with contextlib.redirect_stdout(io.StringIO()):
                    mirror_model.main(["export", ckpts[name], "--state-dict", sd])
                other = (handmade(os.path.join(tmp, "other.ckpt"), LAYERS, seed=4) if name == "layers" else
                         train(build, tmp, "other", name, "--seed", 2, samples=64))
                got = predict(build, tmp, other, sd) if other else None
                check(got is not None and np.array_equal(got, wants[name]),
                      f"{name}: the torch state_dict loaded into mirror gives other logits")
            print("state_dict round trips into mirror: checked")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"({time.time() - start:.1f} s)")
    print(f"interop: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
