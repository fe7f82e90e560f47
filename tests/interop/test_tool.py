#!/usr/bin/env python3
"""test_tool.py - tools/mirror_model.py refuses what mirror refuses, in one line, and never destroys a file.

Needs numpy and safetensors only (the tool's own needs); the checkpoints are
written here by hand. Checks that the tool knows every layer kind of mirror.h's
table and the arguments its description takes, that every argument of a model description is
held to mirror.h's ranges (mirror_model_from_checkpoint's parser and each
layer's checks: the edges accepted, one step past them refused), that a
file's tensors are checked against the description (shape, dtype, finite
values, the file's size) before any is read, and that every error is one
line on stderr, exit 1, never a traceback. Outputs: an export onto the
checkpoint (by name, through a symlink or a hard link), onto a kept copy
(another mirror checkpoint), onto a directory, into a missing directory, or
two outputs naming one file are refused before anything is written; a
write that fails leaves the older file whole and no temporary file. Where
onnx is installed, --onnx replaces an older file whole ("skipped:", with the
reason, where onnx is not installed or fails on its own: its import or a
small model of its own; a failure of the package is not mirror's).
predict: where BUILD_DIR/train is (the first argument, else build/), the
tool's numpy forward pass gives what train --predict writes, logits and
probabilities, within 1e-5, on checkpoints the trainer saves (mlp, cnn-bn
with dropout, resnet), from float32 samples (and the mlp from uint8 ones);
an --out that is the checkpoint or the data is refused, both unchanged.
Ends with "tool: N passed, N failed"; exit 1 when any failed. Run by
tests/run.sh (make test) and make test-interop.
"""
import contextlib
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "mirror_model.py")
sys.path.insert(0, os.path.dirname(TOOL))
import mirror_model  # noqa: E402

passed = failed = 0


def check(ok, what):
    global passed, failed
    passed, failed = passed + bool(ok), failed + (not ok)
    if not ok:
        print(f"FAILED: {what}")
    return ok


def write(path, model, tensors=None, dtype="F32", declared=None):
    """A checkpoint as mirror writes one (its checksums left out: the tool does not read them): the
    description and the tensors given, or the description's own of random values. declared: a header that
    claims these shapes instead of the data's (a file too short for them)."""
    if tensors is None:
        rng = np.random.default_rng(1)
        tensors = {n: rng.standard_normal(s).astype(np.float32) + 2 * n.endswith("_var")
                   for layer in mirror_model.parse_model(model)[1] for n, s in layer.tensors.items()}
    header, data = {"__metadata__": {"format": "mirror", "version": "1", "model": model}}, b""
    for name, t in tensors.items():
        b = np.ascontiguousarray(t).tobytes()
        shape = list(declared.get(name, t.shape)) if declared else list(t.shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(header, separators=(",", ":"))
    text += " " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text.encode() + data)
    return path


def tool(*args, process=False):
    """The tool's exit status, stdout and stderr: its main() called here (fast), or in a process of its own;
    an exception out of main() is the traceback a user would see."""
    args = [str(a) for a in args]
    if process:
        p = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)
        return p.returncode, p.stdout, p.stderr
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = mirror_model.main(args)
        except SystemExit as e:  # argparse
            rc = e.code
        except BaseException:
            rc = "an exception"
            err.write("Traceback (most recent call last):\n" + traceback.format_exc())
    return rc, out.getvalue(), err.getvalue()


def one_line(what, args, says, process=False):
    """The tool run on args exits 1 with one line on stderr that names the fault (says)."""
    rc, out, err = tool(*args, process=process)
    lines = err.strip().splitlines()
    return check(rc == 1 and len(lines) == 1 and lines[0].startswith("mirror_model: ") and says in lines[0]
                 and "Traceback" not in err,
                 f"{what}: exit {rc}, stderr {err.strip()[-400:]!r}; want exit 1, one line with {says!r}")


def descriptions(tmp):
    """Each argument at its edges: accepted there, refused one step past, as mirror_model_from_checkpoint
    refuses it (maxpool2d(0,1), dropout(5), batchnorm(0.1,-5,0) and input(1,60000,60000) once passed)."""
    flat, planes = "input(1,4,4);flatten;", "input(2,64,64);"
    accepted = [
        planes + "maxpool2d(64,64);flatten;dense(2)", planes + "avgpool2d(1,64);flatten;dense(2)",
        planes + "conv2d(3,64,64,63);flatten;dense(2)", flat + "dense(16777216)",
        flat + "dropout(0);dense(2)", flat + "dropout(0.99999994);dense(2)",
        flat + "batchnorm(1,1,1);dense(2)", flat + "batchnorm(1e-30,1e-30,0);dense(2)",
        flat + "batchnorm(0.5,0.5,0.5);dense(2)", flat + "dense(0x10);dense(2.9)", flat + "dense(1e1)",
        "input(1,16384,16384);maxpool2d(64,64);flatten;dense(2)",
        "input(1,1,1);" + "relu;" * 63 + "dense(2)", flat + "dense(65536);dense(16384)",  # 2^30 weights
    ]
    for model in accepted:
        try:
            mirror_model.parse_model(model + ";loss(softmax_ce)")
            check(True, "")
        except mirror_model.MirrorModelError as e:
            check(False, f"{model}: refused: {e}")
    try:
        shapes = [layer.out_shape for layer in mirror_model.parse_model(flat + "dense(0x10);dense(2.9);loss(mse)")[1]]
    except mirror_model.MirrorModelError as e:
        shapes = str(e)
    check(shapes == [(16, 1, 1), (16, 1, 1), (2, 1, 1)],
          f"dense(0x10);dense(2.9): strtod's hexadecimal, and the fraction dropped as (size_t) does: {shapes}")
    refused = [
        (planes + "maxpool2d(0,1);flatten;dense(2)", "window 0 is out of range [1, 64]"),
        (planes + "maxpool2d(65,1);flatten;dense(2)", "window 65 is out of range [1, 64]"),
        (planes + "avgpool2d(2,0);flatten;dense(2)", "stride 0 is out of range [1, 64]"),
        (planes + "avgpool2d(2,65);flatten;dense(2)", "stride 65 is out of range [1, 64]"),
        (planes + "conv2d(0,3,1,1);flatten;dense(2)", "filters 0 is out of range [1, 65536]"),
        (planes + "conv2d(65537,3,1,1);flatten;dense(2)", "filters 65537 is out of range"),
        (planes + "conv2d(2,65,1,1);flatten;dense(2)", "kernel 65 is out of range [1, 64]"),
        (planes + "conv2d(2,3,0,1);flatten;dense(2)", "stride 0 is out of range"),
        (planes + "conv2d(2,3,1,3);flatten;dense(2)", "padding 3 must be below the kernel size 3"),
        (flat + "dense(0)", "units 0 is out of range [1, 16777216]"),
        (flat + "dense(16777217)", "units 16777217 is out of range"),
        (flat + "dense(1000000001)", "out of range: each argument in [0, 1e9]"),
        (flat + "dense(1e999)", "out of range"),
        (flat + "dense(0x1p2000)", "out of range"),
        (flat + "dense(nan)", 'malformed layer "dense(nan)"'),
        (flat + "dense(inf)", 'malformed layer "dense(inf)"'),
        (flat + "dense(-2)", 'malformed layer "dense(-2)"'),
        (flat + "dense()", 'malformed layer "dense()"'),
        (flat + "dropout(5);dense(2)", "p 5: a probability in [0, 1)"),
        (flat + "dropout(1);dense(2)", "p 1: a probability in [0, 1)"),
        (flat + "dropout(0.99999998);dense(2)", "p 1: a probability in [0, 1)"),  # 1 as a float
        (flat + "batchnorm(0.1,-5,0);dense(2)", 'malformed layer "batchnorm(0.1,-5,0)"'),
        (flat + "batchnorm(0.1,5,0);dense(2)", "momentum 0.1 and eps 5: each in (0, 1]"),
        (flat + "batchnorm(0,1e-5,0);dense(2)", "momentum 0 and eps"),
        (flat + "batchnorm(1e-50,1e-5,0);dense(2)", "momentum 0 and eps"),  # 0 as a float
        (flat + "batchnorm(1.5,1e-5,0);dense(2)", "momentum 1.5"),
        (flat + "batchnorm(0.1,1e-5,2);dense(2)", "its third argument 2"),
        (flat + "relu(1);dense(2)", 'unknown layer "relu" with 1 arguments'),
        (flat + "dense(2,2)", 'unknown layer "dense" with 2 arguments'),
        (flat + "dense(2,2,2,2,2)", "malformed layer"),
        ("input(1,60000,60000);flatten;dense(2)", "too large (at most 2^28 values)"),
        ("input(0,4,4);flatten;dense(2)", "input(0,4,4) out of range"),
        ("input(1,4,4);flatten;dense(65536);dense(16385)", "too large"),  # 2^30 + 2^16 weights
        ("input(1,1,1);" + "relu;" * 64 + "dense(2)", "65 layers, more than 64"),
        (flat + "dense(1)", "softmax cross-entropy needs at least 2 outputs"),
        ("input(1,4,4)", "no layers"),
        (flat + "residual;dense(2)", "never closed"),
    ]
    for model, says in refused:
        model += ";loss(softmax_ce)"
        path = write(os.path.join(tmp, "bad.ckpt"), model, {})
        one_line(f"info on {model[:70]}", ("info", path), says)
    # The exports check too: --torch and --state-dict once died with a traceback here.
    path = write(os.path.join(tmp, "bad.ckpt"), flat + "batchnorm(0.1,5,0);dense(2);loss(softmax_ce)", {})
    for option in ("--onnx", "--pt2", "--torch", "--state-dict"):
        one_line(f"export {option} of batchnorm(0.1,5,0) (python3 tools/mirror_model.py)",
                 ("export", path, option, os.path.join(tmp, "x")), "momentum 0.1 and eps 5", process=True)
    check(not os.path.exists(os.path.join(tmp, "x")), "a refused export wrote its output")


def tensors(tmp):
    """The tensors against the description, before any is read."""
    model = "input(1,4,4);flatten;batchnorm(0.1,1e-5,0);dense(3);loss(softmax_ce)"
    good = {n: np.ones(s, np.float32) for layer in mirror_model.parse_model(model)[1] for n, s in layer.tensors.items()}
    path = os.path.join(tmp, "t.ckpt")
    check(tool("info", write(path, model, good))[0] == 0, "info on a good checkpoint")

    def changed(name, value):
        return {**good, name: value}
    cases = [
        ({k: v for k, v in good.items() if k != "layers.2.weight"}, "layers.2.weight [3, 16] of dense(3) is missing"),
        (changed("layers.2.weight", np.ones((16, 3), np.float32)), "has shape [16, 3], dense(3) needs [3, 16]"),
        (changed("layers.2.bias", np.array([1, np.nan, 1], np.float32)), "layers.2.bias holds a value that is not"),
        (changed("layers.1.weight", np.full(16, np.inf, np.float32)), "layers.1.weight holds a value that is not"),
        (changed("layers.1.running_var", -np.ones(16, np.float32)), "layers.1.running_var holds a negative variance"),
        ({**good, "layers.7.weight": np.ones(2, np.float32)}, "layers.7.weight belongs to no layer"),
    ]
    for t, says in cases:
        one_line(f"a checkpoint whose {says}", ("info", write(path, model, t)), says)
    one_line("F64 tensors", ("info", write(path, model, {k: v.astype(np.float64) for k, v in good.items()},
                                          dtype="F64")), "is F64, a checkpoint's are F32")
    # A header that claims 2^28 weights (1 GiB) over a file of a few hundred bytes: refused by its size,
    # nothing allocated.
    big = "input(1,16384,16384);flatten;dense(2);loss(softmax_ce)"
    write(path, big, {"layers.1.weight": np.ones((2, 4), np.float32), "layers.1.bias": np.ones(2, np.float32)},
          declared={"layers.1.weight": (2, 1 << 28)})
    one_line("a header that claims 1 GiB of weights in a small file", ("info", path), "cannot be read as safetensors")
    # --torch traces 2 samples: an input of 2^28 values in a 512 KiB file is refused before torch allocates.
    traced = "input(1,16384,16384);maxpool2d(64,64);flatten;dense(2);loss(softmax_ce)"
    write(path, traced)
    check(os.path.getsize(path) < 1 << 20, "the traced model's file is small")
    one_line("--torch of an input of 2^28 values", ("export", path, "--torch", os.path.join(tmp, "t.pt")),
             "--torch traces the network on 2 samples, whose activations take up to 2049 MiB, over the 1024 MiB")
    check(mirror_model.trace_bytes(mirror_model.load(path)) == 2 * 4 * ((1 << 28) + 256 * 256 * 2 + 2),
          "trace_bytes: the input and every layer's output, 2 samples of float32")
    one_line("info on a missing file", ("info", os.path.join(tmp, "none.ckpt")), "No such file or directory",
             process=True)
    one_line("info on a directory", ("info", tmp), "not a regular file")
    one_line("export with no output", ("export", write(path, model, good)), "nothing to write")
    rc, _, err = tool("export", path, "--bogus", process=True)
    check(rc == 2 and "usage:" in err, f"a bad option: exit {rc} (argparse's 2), {err.strip()[-200:]!r}")


def outputs(tmp):
    """Outputs that would destroy a file are refused before anything is written; writes replace whole."""
    model = "input(1,4,4);flatten;dense(3);loss(softmax_ce)"
    ckpt = write(os.path.join(tmp, "m.ckpt"), model)
    before = open(ckpt, "rb").read()
    shutil.copy(ckpt, ckpt + ".1")  # a kept copy, as fit rotates them (checkpoint_keep)
    os.symlink("m.ckpt", os.path.join(tmp, "link.onnx"))
    os.link(ckpt, os.path.join(tmp, "hard.onnx"))
    os.mkdir(os.path.join(tmp, "dir.onnx"))
    j = lambda *p: os.path.join(tmp, *p)  # noqa: E731
    cases = [
        (["--onnx", ckpt], "that is the checkpoint"),
        (["--torch", ckpt], "that is the checkpoint"),
        (["--pt2", ckpt], "that is the checkpoint"),
        (["--state-dict", ckpt], "that is the checkpoint"),
        (["--onnx", j(".", "m.ckpt")], "that is the checkpoint"),
        (["--onnx", j("link.onnx")], "that is the checkpoint"),
        (["--state-dict", j("hard.onnx")], "that is the checkpoint"),
        (["--onnx", ckpt + ".1"], "that is a mirror checkpoint"),
        (["--onnx", j("a.onnx"), "--torch", j("a.onnx")], "--onnx names the same file"),
        (["--onnx", j("a.onnx"), "--state-dict", j(".", "a.onnx")], "--onnx names the same file"),
        (["--onnx", j("dir.onnx")], "exists and is not a regular file"),
        (["--onnx", j("missing", "a.onnx")], "the directory " + j("missing") + " does not exist"),
        (["--torch", j("missing", "a.pt")], "does not exist"),
        (["--state-dict", j("missing", "a.safetensors")], "does not exist"),  # once 11-14 lines
        (["--onnx", ""], "--onnx: an empty path"),
    ]
    for i, (args, says) in enumerate(cases):
        one_line(f"export {' '.join(os.path.relpath(a, tmp) if a.startswith(tmp) else a for a in args)}",
                 ("export", ckpt, *args), says, process=i in (0, 13))
    check(open(ckpt, "rb").read() == before and open(ckpt + ".1", "rb").read() == before,
          "the checkpoint or its kept copy changed")
    check(sorted(os.listdir(tmp)) == ["dir.onnx", "hard.onnx", "link.onnx", "m.ckpt", "m.ckpt.1"],
          f"a refused export left files: {sorted(os.listdir(tmp))}")

    # A write that fails halfway leaves the older file as it was and no temporary file.
    old = j("old.onnx")
    with open(old, "w") as f:
        f.write("the older export\n")

    def half(tmp_path):
        with open(tmp_path, "w") as f:
            f.write("half")
        raise OSError(28, "No space left on device")
    try:
        mirror_model._replace(old, half)
        check(False, "_replace: the failed write was not raised")
    except OSError:
        pass
    check(open(old).read() == "the older export\n", "a failed write changed the older file")
    check(not [n for n in os.listdir(tmp) if n.endswith(".tmp")], "a failed write left its temporary file")

    def wanted(path, option, package):
        """An export onto an older file: exit 0, the file replaced, no temporary file, a new file's mode."""
        why = package_fails(package)
        if why:
            print(f"skipped: {option}'s write ({why})")
            return
        with open(path, "w") as f:
            f.write("older\n")
        rc, out, err = tool("export", ckpt, option, path)
        umask = os.umask(0)
        os.umask(umask)
        check(rc == 0 and out == f"wrote {path}\n" and open(path, "rb").read(4) != b"olde" and
              (os.stat(path).st_mode & 0o777) == 0o666 & ~umask and
              not [n for n in os.listdir(tmp) if n.endswith(".tmp")],
              f"export {option} onto an older file: exit {rc}, {err.strip()[-300:]!r}")
    wanted(j("old.onnx"), "--onnx", "onnx")  # the others write through the same _replace (test_export.py)


def predict(tmp):
    """tools/mirror_model.py predict against build/train --predict: the same numbers within 1e-5."""
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    train = os.path.join(build, "train")
    if not os.access(train, os.X_OK):
        print(f"predict: skipped: no {train} to compare with (make {train})")
        return
    j = lambda name: os.path.join(tmp, name)  # noqa: E731
    rng = np.random.default_rng(5)
    np.save(j("x.npy"), rng.random((37, 1, 28, 28), dtype=np.float32))
    np.save(j("u8.npy"), rng.integers(0, 256, (37, 28, 28), dtype=np.uint8))
    for model, extra in (("mlp", ()), ("cnn-bn", ("--dropout", "0.25")), ("resnet", ())):
        ckpt = j(model + ".ckpt")
        p = subprocess.run([train, "--model", model, "--synthetic", "60", "--batch", "20", "--epochs", "1",
                            "--progress", "none", "--save", ckpt, *extra], capture_output=True, text=True)
        if not check(p.returncode == 0, f"predict: train --model {model}: exit {p.returncode}: {p.stderr}"):
            continue
        cases = [("x.npy", ()), ("x.npy", ("--probabilities",))] + ([("u8.npy", ())] if model == "mlp" else [])
        for data, probs in cases:
            mine, theirs = j("tool.npy"), j("train.npy")
            rc, _, err = tool("predict", ckpt, j(data), "--out", mine, *probs)
            p = subprocess.run([train, "--predict", ckpt, "--data", j(data), "--out", theirs, *probs],
                               capture_output=True, text=True)
            what = f"predict {model} {data} {' '.join(probs) or 'logits'}"
            if check(rc == 0 and p.returncode == 0, f"{what}: exit {rc} ({err.strip()}), train exit "
                     f"{p.returncode} ({p.stderr.strip()})"):
                a, b = np.load(mine), np.load(theirs)
                d = float(np.abs(a - b).max()) if a.shape == b.shape else math.inf
                check(a.dtype == b.dtype == np.float32 and a.shape == b.shape == (37, 10) and d <= 1e-5,
                      f"{what}: the tool's outputs within 1e-5 of train --predict's ({a.shape}, {b.shape}, {d})")
    ckpt = j("mlp.ckpt")
    if os.path.exists(ckpt):
        def read(name):
            with open(j(name), "rb") as f:
                return f.read()
        before = {n: read(n) for n in ("mlp.ckpt", "x.npy")}
        one_line("predict --out the checkpoint", ["predict", ckpt, j("x.npy"), "--out", ckpt], "the checkpoint")
        one_line("predict --out the data", ["predict", ckpt, j("x.npy"), "--out", j("x.npy")], "that is DATA")
        check(all(read(n) == b for n, b in before.items()),
              "predict: the checkpoint and the data unchanged after the refusals")


# What each optional package must do on its own before a check leans on it: an import, and a small use.
PACKAGE_PROBES = {
    "onnx": "import onnx, onnx.helper as h; h.make_model(h.make_graph([], 'g', [], [])).SerializeToString()",
}


def package_fails(package):
    """Why the package cannot serve here (not installed, or failing on its own: an exception or a crash in a
    process of its own), or None. A failure of the package is a skip, never a failure of mirror's."""
    try:
        p = subprocess.run([sys.executable, "-c", PACKAGE_PROBES[package]], capture_output=True, text=True,
                           timeout=300)
    except subprocess.TimeoutExpired:
        return f"{package} did not import within 300 s"
    if p.returncode == 0:
        return None
    last = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1][-200:]
    if "ModuleNotFoundError" in last and f"'{package}'" in last:
        return f"{package} not installed: python3 -m pip install {package}"
    return f"{package} fails on its own, not mirror: {last}"


def kinds(tmp):
    """The tool knows every layer kind of mirror.h's table (mirror__kinds), with the arguments its description
    writes: a kind added to mirror.h and not to the tool fails here."""
    del tmp
    with open(os.path.join(ROOT, "mirror.h")) as f:
        text = f.read()
    start = text.index("static const mirror__kind_info mirror__kinds[")
    table = text[start:text.index("\n};", start)]
    kinds = {name: int(n) for name, n in re.findall(r'\.name = "([a-z_0-9]+)",.*?\.nargs = (\d+),', table, re.S)}
    check(len(kinds) >= 14 and kinds == mirror_model.ARITY,
          f"the tool's layer kinds and their arguments {mirror_model.ARITY} are mirror.h's {kinds}")


def main():
    start = time.time()
    tmp = tempfile.mkdtemp(prefix="mirror_tool_")
    try:
        for part in (kinds, descriptions, tensors, outputs, predict):
            os.mkdir(os.path.join(tmp, part.__name__))
            try:
                part(os.path.join(tmp, part.__name__))
            except Exception:  # the part's remaining checks not run: one failure, with its traceback
                check(False, f"{part.__name__}: {traceback.format_exc()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"({time.time() - start:.1f} s)")
    print(f"tool: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
