"""Other people's PyTorch training code, unchanged, on PyTorch and on tracegrad:

    python benchmarks/pytorch_scripts.py --checkouts DIR [--models ...] [--steps 4]
                                         [--rounds R] [--timed-steps N] [--budget S] [--no-timing]
    python benchmarks/pytorch_scripts.py --checkouts DIR --profile MODEL

DIR holds checkouts of karpathy/nanoGPT, karpathy/minGPT, pytorch/examples and
karpathy/micrograd (as `nanoGPT`, `minGPT`, `examples`, `micrograd`); nothing of theirs is
copied here. Each model's file is loaded twice from the checkout: once with `import torch`
meaning PyTorch, once meaning `tracegrad.torch` (the import hook of `python -m tracegrad run`).
A file that does more than define its model when imported (mnist's and dcgan's `main.py` read
data and train at the top level) runs only its imports of torch and the standard library, and
the classes and functions the model needs, with the script's settings (dcgan's `nz`, `ngf`,
...) given as globals. Each model's step is the training loop's body in its repository
(`zero_grad`, forward, loss, `backward`, clipping, `step`, or `p.data.add_(p.grad, alpha=-lr)`),
written once here as a function of the loaded file and the library.

Parity (float64): PyTorch builds the model (seeded), tracegrad's two copies load its
state_dict, and all three train `--steps` steps on the same random batches: PyTorch eager,
tracegrad eager and tracegrad traced (`tracegrad.trace` of the step, Numba backend). Dropout is
set to 0 (the libraries draw different masks). A row gives, for tracegrad eager and traced, the
largest relative difference from PyTorch of the losses (every step), of the gradients left by
the last step and of the state after it (parameters and buffers): per tensor max|a - b| /
max|b|, the largest over tensors. micrograd is not a PyTorch model: its tests use torch as the
oracle, and its row says whether they pass with PyTorch and with tracegrad.torch.

Timing (float32, larger sizes, each model as its authors run it, dropout included): PyTorch
eager and tracegrad traced, each in a child process of its own, alternating in `--rounds`
rounds (`harness.py`'s rounds); a row gives each one's median step and the median over the
rounds of traced / PyTorch of the same round. `--profile MODEL` shows where the traced step's
time goes (`zoo.py --profile`'s report).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import math
import os
import platform
import statistics
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import MARK, blas_info, paired, run_marked, run_rounds, time_step  # noqa: E402

Step = Callable[..., Any]
LIBS = ("torch", "tracegrad")


@dataclass(frozen=True)
class Script:
    """One model of a checkout: where its file is, how to build it and train it a step."""

    path: str  # the model's file, relative to the checkouts' directory
    build: Callable[[Any, Any, dict], dict]  # (loaded file, torch-like lib, config) -> networks
    train: Callable[[Any, Any, dict, dict], Step]  # (file, lib, networks, config) -> the step
    data: Callable[[dict, np.random.Generator], tuple[tuple, tuple]]  # -> (batch, carried)
    parity: dict  # float64 sizes
    timing: dict  # float32 sizes
    # run only these top-level definitions and assignments (and the imports of torch and the
    # standard library); None: the whole file
    keep: tuple[str, ...] | None = None
    settings: Callable[[dict], dict] = lambda c: {}  # the file's globals a kept part reads
    root: str = ""  # put on sys.path while loading (the checkout's package root)
    about: str = ""


# --- loading a checkout's file under one library -----------------------------------------------


def _kept(node: ast.stmt, keep: tuple[str, ...]) -> bool:
    if isinstance(node, ast.Import | ast.ImportFrom):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
        roots = {(n or "").split(".")[0] for n in names}
        return all(r == "torch" or r in sys.stdlib_module_names for r in roots)
    if isinstance(node, ast.Assign):  # a setting: NAME = ...
        return any(isinstance(t, ast.Name) and t.id in keep for t in node.targets)
    return getattr(node, "name", None) in keep


@contextlib.contextmanager
def library(lib: str) -> Iterator[Any]:
    """Inside, `import torch` means `lib`'s torch; gives that module."""
    if lib == "torch":
        import torch

        yield torch
        return
    import tracegrad.torch as tgt

    with tgt.imported_as_torch():
        yield tgt


def load(checkouts: Path, script: Script, lib: str, config: dict) -> types.ModuleType:
    """The script's file run as a fresh module with `import torch` meaning `lib` (call inside
    `library(lib)`). Modules it imports from its checkout are imported afresh and dropped
    after, so that the other library's load gets its own."""
    path = checkouts / script.path
    tree = ast.parse(path.read_text(), filename=str(path))
    if script.keep is not None:
        tree.body = [n for n in tree.body if _kept(n, script.keep)]
    name = f"_{lib}_{path.stem}_{abs(hash(str(path)))}"
    module = types.ModuleType(name)
    module.__file__ = str(path)
    module.__dict__.update(script.settings(config))
    root = str(checkouts / script.root) if script.root else str(path.parent)
    before = set(sys.modules)
    sys.path.insert(0, root)
    sys.modules[name] = module  # dataclasses look their module up
    try:
        exec(compile(tree, str(path), "exec"), module.__dict__)  # noqa: S102 (their code, ours to run)
    finally:
        sys.path.remove(root)
        for k in set(sys.modules) - before:
            if (getattr(sys.modules[k], "__file__", None) or "").startswith(root):
                del sys.modules[k]
    return module


def no_dropout(model: Any, lib: Any) -> None:
    """Dropout off everywhere, training mode kept: the libraries draw different masks."""
    for m in model.modules():
        if isinstance(m, lib.nn.Dropout):
            m.p = 0.0
        if isinstance(getattr(m, "dropout", None), float):  # attention's, RNN's between layers
            m.dropout = 0.0


def quiet(fn: Callable, *args: Any) -> Any:
    """fn(*args) with its prints (parameter counts, optimizer groups) swallowed."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args)


# --- the models --------------------------------------------------------------------------------


def tokens(c: dict, rng: np.random.Generator) -> tuple[tuple, tuple]:
    """A batch of random token windows and the next tokens after each position."""
    stream = rng.integers(0, c["vocab"], (c["batch"], c["block"] + 1))
    return (stream[:, :-1], stream[:, 1:]), ()


def nanogpt_build(mod: Any, lib: Any, c: dict) -> dict:
    config = mod.GPTConfig(block_size=c["block"], vocab_size=c["vocab"], n_layer=c["layers"],
                           n_head=c["heads"], n_embd=c["d"], dropout=c["dropout"],
                           bias=True)  # fmt: skip
    return {"model": quiet(mod.GPT, config)}


def nanogpt_train(mod: Any, lib: Any, nets: dict, c: dict) -> Step:
    """train.py's step: AdamW groups from configure_optimizers, forward with targets,
    backward, clipping at 1.0, the update."""
    model = nets["model"]
    opt = quiet(model.configure_optimizers, 0.1, c["lr"], (0.9, 0.95), "cpu")

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    return step


def mingpt_build(mod: Any, lib: Any, c: dict) -> dict:
    config = mod.GPT.get_default_config()
    config.model_type, config.vocab_size, config.block_size = None, c["vocab"], c["block"]
    config.n_layer, config.n_head, config.n_embd = c["layers"], c["heads"], c["d"]
    config.embd_pdrop = config.resid_pdrop = config.attn_pdrop = c["dropout"]
    return {"model": quiet(mod.GPT, config)}


def mingpt_train(mod: Any, lib: Any, nets: dict, c: dict) -> Step:
    """Trainer.run()'s step: forward with targets, zero_grad, backward, clipping at 1.0, AdamW
    (configure_optimizers' groups, Trainer's defaults)."""
    model = nets["model"]
    train_config = types.SimpleNamespace(weight_decay=0.1, learning_rate=c["lr"], betas=(0.9, 0.95))
    opt = model.configure_optimizers(train_config)

    def step(x, y):
        _, loss = model(x, y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    return step


def mnist_data(c: dict, rng: np.random.Generator) -> tuple[tuple, tuple]:
    return (rng.standard_normal((c["batch"], 1, 28, 28)), rng.integers(0, 10, c["batch"])), ()


def mnist_train(mod: Any, lib: Any, nets: dict, c: dict) -> Step:
    """train()'s step: Adadelta(lr=1.0), NLL of the log-softmax output."""
    model, F = nets["model"], lib.nn.functional
    opt = lib.optim.Adadelta(model.parameters(), lr=1.0)

    def step(data, target):
        opt.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        opt.step()
        return loss

    return step


def dcgan_settings(c: dict) -> dict:
    return {"nz": c["nz"], "ngf": c["ngf"], "ndf": c["ndf"], "nc": 3}


def dcgan_build(mod: Any, lib: Any, c: dict) -> dict:
    nets = {"netG": mod.Generator(0), "netD": mod.Discriminator(0)}
    for net in nets.values():
        net.apply(mod.weights_init)
    return nets


def dcgan_data(c: dict, rng: np.random.Generator) -> tuple[tuple, tuple]:
    real = rng.uniform(-1, 1, (c["batch"], 3, 64, 64))
    return (real, rng.standard_normal((c["batch"], c["nz"], 1, 1))), ()


def dcgan_train(mod: Any, lib: Any, nets: dict, c: dict) -> Step:
    """main.py's loop body: D on real (label 1) and on detached fakes (`label.fill_(0)`), its
    Adam step; G through D (label 1), its Adam step; the noise is an input. Returns
    errD + errG."""
    netG, netD = nets["netG"], nets["netD"]
    criterion = lib.nn.BCELoss()
    optimizerD = lib.optim.Adam(netD.parameters(), lr=c["lr"], betas=(0.5, 0.999))
    optimizerG = lib.optim.Adam(netG.parameters(), lr=c["lr"], betas=(0.5, 0.999))

    def step(real_cpu, noise):
        netD.zero_grad()
        label = lib.full((real_cpu.size(0),), 1, dtype=real_cpu.dtype)
        errD_real = criterion(netD(real_cpu), label)
        errD_real.backward()
        fake = netG(noise)
        label.fill_(0)
        errD_fake = criterion(netD(fake.detach()), label)
        errD_fake.backward()
        optimizerD.step()
        netG.zero_grad()
        label.fill_(1)
        errG = criterion(netD(fake), label)
        errG.backward()
        optimizerG.step()
        return errD_real + errD_fake + errG

    return step


def wlm_build(kind: str) -> Callable[[Any, Any, dict], dict]:
    def build(mod: Any, lib: Any, c: dict) -> dict:
        if kind == "Transformer":
            model = mod.TransformerModel(c["vocab"], c["d"], c["heads"], c["hidden"], c["layers"],
                                         c["dropout"])  # fmt: skip
        else:
            model = mod.RNNModel(kind, c["vocab"], c["d"], c["hidden"], c["layers"], c["dropout"])
        return {"model": model}

    return build


def wlm_data(kind: str) -> Callable[[dict, np.random.Generator], tuple[tuple, tuple]]:
    """main.py's batches: (bptt, batch) tokens and the next ones flattened; for an RNN, the
    first hidden state (zeros; LSTM's h and c)."""

    def data(c: dict, rng: np.random.Generator) -> tuple[tuple, tuple]:
        stream = rng.integers(0, c["vocab"], (c["bptt"] + 1, c["batch"]))
        zeros = np.zeros((c["layers"], c["batch"], c["hidden"]))
        carried = () if kind == "Transformer" else (zeros,) * (2 if kind == "LSTM" else 1)
        return (stream[:-1], stream[1:].reshape(-1)), carried

    return data


def wlm_train(mod: Any, lib: Any, nets: dict, c: dict) -> Step:
    """main.py's train() body: zero_grad, forward (the hidden state carried, detached), NLL,
    backward, clip_grad_norm_ at 0.25, `p.data.add_(p.grad, alpha=-lr)`."""
    model, criterion = nets["model"], lib.nn.NLLLoss()

    def step(data, targets, *hidden):
        model.zero_grad()
        if hidden:
            output, hidden = model(data, hidden if len(hidden) == 2 else hidden[0])
        else:
            output = model(data).view(-1, c["vocab"])
        loss = criterion(output, targets)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-c["lr"])
        hidden = hidden if isinstance(hidden, tuple) else (hidden,)
        return (loss, *(h.detach() for h in hidden))

    return step


def gpt_sizes(**timing: Any) -> tuple[dict, dict]:
    parity = {"vocab": 17, "block": 8, "batch": 3, "layers": 2, "heads": 2, "d": 16, "lr": 1e-2}
    return {**parity, "dropout": 0.0}, {**parity, "dropout": 0.0, "lr": 1e-3, **timing}


def wlm(kind: str) -> Script:
    parity = {"vocab": 23, "d": 8, "hidden": 8, "heads": 2, "layers": 2, "bptt": 5, "batch": 3,
              "lr": 20.0, "dropout": 0.0}  # fmt: skip
    # main.py's defaults (emsize = nhid = 200, 2 layers, bptt 35, batch 20, dropout 0.2; its
    # --nhead 2), a vocabulary of 10,000 (wikitext-2's is 33,278)
    timing = {**parity, "vocab": 10_000, "d": 200, "hidden": 200, "bptt": 35, "batch": 20,
              "dropout": 0.2}  # fmt: skip
    model = "TransformerModel" if kind == "Transformer" else f"RNNModel({kind!r})"
    return Script("examples/word_language_model/model.py", wlm_build(kind), wlm_train,
                  wlm_data(kind), parity, timing,
                  about=f"pytorch/examples word_language_model {model}")  # fmt: skip


_NANO_PARITY, _NANO_TIMING = gpt_sizes(vocab=65, block=64, batch=16, layers=4, heads=4, d=128)
SCRIPTS: dict[str, Script] = {
    "nanogpt": Script(
        "nanoGPT/model.py",
        nanogpt_build,
        nanogpt_train,
        tokens,
        _NANO_PARITY,
        _NANO_TIMING,
        about="karpathy/nanoGPT GPT(GPTConfig), configure_optimizers AdamW, clip 1.0",
    ),  # fmt: skip
    "mingpt": Script(
        "minGPT/mingpt/model.py",
        mingpt_build,
        mingpt_train,
        tokens,
        *gpt_sizes(vocab=65, block=64, batch=16, layers=4, heads=4, d=128),
        root="minGPT",
        about="karpathy/minGPT GPT, Trainer's step",
    ),  # fmt: skip
    "mnist": Script(
        "examples/mnist/main.py",
        lambda mod, lib, c: {"model": mod.Net()},
        mnist_train,
        mnist_data,
        {"batch": 3},
        {"batch": 64},
        keep=("Net",),
        about="pytorch/examples mnist Net, Adadelta",
    ),  # fmt: skip
    "dcgan": Script(
        "examples/dcgan/main.py",
        dcgan_build,
        dcgan_train,
        dcgan_data,
        {"nz": 6, "ngf": 4, "ndf": 4, "batch": 2, "lr": 2e-4},
        {"nz": 100, "ngf": 32, "ndf": 32, "batch": 32, "lr": 2e-4},
        keep=("weights_init", "Generator", "Discriminator"),
        settings=dcgan_settings,
        about="pytorch/examples dcgan Generator and Discriminator, a step each",
    ),  # fmt: skip
    "wlm-lstm": wlm("LSTM"),
    "wlm-gru": wlm("GRU"),
    "wlm-transformer": wlm("Transformer"),
}
MODELS = (*SCRIPTS, "micrograd")


# --- building and running a step ---------------------------------------------------------------


def build(checkouts: Path, name: str, lib_name: str, lib: Any, c: dict,
          weights: dict[str, dict[str, np.ndarray]] | None = None) -> dict:  # fmt: skip
    """The model's networks under `lib` (inside `library(lib_name)`), in the config's dtype,
    with `weights` (state_dict arrays by network) if given."""
    script = SCRIPTS[name]
    mod = load(checkouts, script, lib_name, c)
    lib.manual_seed(0)
    nets = script.build(mod, lib, c)
    for net_name, net in nets.items():
        net.to(getattr(lib, c["dtype"]))
        if c["dropout_off"]:
            no_dropout(net, lib)
        if weights is not None:
            net.load_state_dict({k: lib.tensor(v) for k, v in weights[net_name].items()})
    return {"module": mod, "nets": nets}


def make_run(name: str, lib: Any, built: dict, c: dict, traced: bool) -> Callable:
    """`run(batch, carried)`: one step on arrays; the loss as a float and the carried state.
    A traced run also has `traced` (the tracegrad.trace'd step)."""
    script = SCRIPTS[name]
    step = script.train(built["module"], lib, built["nets"], c)
    if traced:
        import tracegrad

        step = tracegrad.trace(step)

    def run(batch: tuple, carried: tuple) -> tuple[float, tuple]:
        out = step(*(lib.tensor(a) for a in batch), *carried)
        loss, carried = (out[0], tuple(out[1:])) if isinstance(out, tuple) else (out, ())
        return float(loss.detach()), carried

    run.traced = step if traced else None
    return run


def to_numpy(t: Any) -> np.ndarray:
    return np.array(t.detach().numpy(), dtype=np.float64)


def snapshot(nets: dict) -> dict[str, dict[str, np.ndarray]]:
    """Each network's state_dict (parameters and buffers) and gradients, as float64 arrays."""
    state = {f"{n}.{k}": to_numpy(v) for n, net in nets.items()
             for k, v in net.state_dict().items()}  # fmt: skip
    grads = {f"{n}.{k}": None if p.grad is None else to_numpy(p.grad)
             for n, net in nets.items() for k, p in net.named_parameters()}  # fmt: skip
    return {"state": state, "grads": grads}


def rel_diff(a: np.ndarray | None, b: np.ndarray | None) -> float:
    """max|a - b| / max|b| (b is PyTorch's); inf when one is missing or the shapes differ."""
    if a is None or b is None:
        return 0.0 if a is None and b is None else math.inf
    if a.shape != b.shape:
        return math.inf
    scale = float(np.max(np.abs(b), initial=0.0))
    err = float(np.max(np.abs(a - b), initial=0.0))
    return err / scale if scale > 0 else err


def compare(mine: dict, theirs: dict) -> tuple[float, str]:
    """The largest relative difference over tensors matched by name, and the worst one's name
    (a name only one side has counts as inf)."""
    worst, where = 0.0, ""
    for key in sorted(set(mine) | set(theirs)):
        d = rel_diff(mine.get(key), theirs.get(key)) if key in mine and key in theirs else math.inf
        if not d <= worst:  # nan counts as worse
            worst, where = d, key
    return worst, where


def train_steps(run: Callable, batches: list[tuple], carried: tuple, wrap: Callable) -> list:
    losses = []
    for batch in batches:
        loss, carried = run(batch, tuple(wrap(a) for a in carried) if carried else ())
        losses.append(loss)
        carried = tuple(to_numpy(h) for h in carried)
    return losses


def parity(checkouts: Path, name: str, steps: int = 4, config: dict | None = None) -> dict:
    """PyTorch eager, tracegrad eager and tracegrad traced, `steps` steps each from PyTorch's
    float64 weights on the same batches: their losses, gradients and state, and the relative
    differences of tracegrad's from PyTorch's."""
    script = SCRIPTS[name]
    c = {**script.parity, **(config or {}), "dtype": "float64", "dropout_off": True}
    batches, carried = [], ()
    for k in range(steps):
        batch, first = script.data(c, np.random.default_rng(k))
        batches.append(batch)
        carried = carried or first
    result: dict[str, Any] = {}
    with library("torch") as torch:
        torch.set_default_dtype(torch.float64)
        try:
            built = build(checkouts, name, "torch", torch, c)
            weights = {n: {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
                       for n, net in built["nets"].items()}  # fmt: skip
            run = make_run(name, torch, built, c, traced=False)
            result["torch"] = {"losses": train_steps(run, batches, carried, torch.tensor),
                               **snapshot(built["nets"])}  # fmt: skip
        finally:
            torch.set_default_dtype(torch.float32)
    with library("tracegrad") as tgt:
        tgt.set_default_dtype(tgt.float64)
        try:
            for method, traced in (("eager", False), ("traced", True)):
                try:
                    built = build(checkouts, name, "tracegrad", tgt, c, weights)
                    run = make_run(name, tgt, built, c, traced)
                    losses = train_steps(run, batches, carried, tgt.tensor)
                    result[method] = {"losses": losses, **snapshot(built["nets"])}
                except Exception as e:  # a row says what failed; the other models still run
                    result[method] = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:200]}
        finally:
            tgt.set_default_dtype(tgt.float32)
    ref = result["torch"]
    for method in ("eager", "traced"):
        r = result[method]
        if "error" in r:
            continue
        r["loss_diff"] = max(rel_diff(np.array([a]), np.array([b]))
                             for a, b in zip(r["losses"], ref["losses"], strict=True))  # fmt: skip
        r["grad_diff"], r["grad_worst"] = compare(r["grads"], ref["grads"])
        r["state_diff"], r["state_worst"] = compare(r["state"], ref["state"])
    return result


def micrograd_tests(checkouts: Path) -> dict[str, str]:
    """micrograd's test/test_engine.py, each test function run with `import torch` meaning
    each library: 'passed' or the failure."""
    script = Script("micrograd/test/test_engine.py", None, None, None, {}, {}, root="micrograd")
    out = {}
    for lib_name in LIBS:
        with library(lib_name) as lib:
            lib.set_default_dtype(lib.float32)
            mod = load(checkouts, script, lib_name, {})
            tests = [v for k, v in vars(mod).items() if k.startswith("test_") and callable(v)]
            failed = []
            for test in tests:
                try:
                    test()
                except Exception as e:
                    failed.append(f"{test.__name__}: {type(e).__name__}: {e}"[:200])
            out[lib_name] = "; ".join(failed) or f"{len(tests)} passed"
    return out


# --- timing ------------------------------------------------------------------------------------


def child(checkouts: Path, name: str, method: str, steps: int, budget: float) -> dict:
    """One child's timing: float32, the timing sizes, dropout as the authors have it."""
    script = SCRIPTS[name]
    c = {**script.timing, "dtype": "float32", "dropout_off": False}
    lib_name = "torch" if method == "torch" else "tracegrad"
    batch, carried = script.data(c, np.random.default_rng(0))
    batch = tuple(a.astype(np.float32) if a.dtype.kind == "f" else a for a in batch)
    with library(lib_name) as lib:
        start = time.perf_counter()
        built = build(checkouts, name, lib_name, lib, c)
        run = make_run(name, lib, built, c, traced=method == "tg-traced")
        state = [lib.tensor(a.astype(np.float32)) for a in carried]

        def one() -> float:
            loss, state[:] = run(batch, tuple(state))
            return loss

        if run.traced is not None:
            one.wait_for_kernels = run.traced.wait_for_kernels
        setup = time.perf_counter() - start
        return {"setup_s": setup, **time_step(one, steps, budget, least=1.0)}


def measure(checkouts: Path, name: str, steps: int, budget: float, method: str, env: dict,
            first_only: bool) -> dict:  # fmt: skip
    cmd = [sys.executable, os.path.abspath(__file__), "--checkouts", str(checkouts),
           "--child", name, method, "--timed-steps", str(steps),
           "--budget", str(budget)]  # fmt: skip
    return run_marked(cmd, env)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


# --- printing ----------------------------------------------------------------------------------


def _e(x: float | None) -> str:
    return "-" if x is None else f"{x:.1e}"


def print_parity(rows: dict[str, dict], steps: int, micro: dict | None) -> None:
    print(f"\n## Parity: float64, {steps} steps from PyTorch's weights on the same batches\n")
    print("Largest relative difference from PyTorch eager (per tensor max|a-b|/max|b|):\n")
    print(
        "| model | loss, eager | grads, eager | params, eager | loss, traced | grads, traced "
        "| params, traced | PyTorch's losses (first, last) | worst tensor |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    for name, r in rows.items():
        cells, worst = [], ""
        for method in ("eager", "traced"):
            m = r.get(method, {})
            if "error" in m:
                cells += [m["error"], "", ""]
                continue
            cells += [_e(m["loss_diff"]), _e(m["grad_diff"]), _e(m["state_diff"])]
            w = max((m["grad_diff"], "grad " + m["grad_worst"]),
                    (m["state_diff"], m["state_worst"]))  # fmt: skip
            worst = worst or (w[1] if w[0] > 1e-13 else "")
        losses = r["torch"]["losses"]
        print(f"| {name} | " + " | ".join(cells) +
              f" | {losses[0]:.4f}, {losses[-1]:.4f} | {worst} |")  # fmt: skip
    if micro is not None:
        print(f"| micrograd | test/test_engine.py with torch: {micro['torch']}; "
              f"with tracegrad.torch: {micro['tracegrad']} |||||||")  # fmt: skip


def print_timing(results: dict[str, list[dict]], rounds: int) -> None:
    print(f"\n## Step time: float32, PyTorch eager against tracegrad traced, {rounds} rounds\n")
    print(
        "| model | sizes | PyTorch eager ms | tracegrad traced ms | traced / PyTorch, round by "
        "round | median | first call s, traced (kernels ready) | busy elsewhere |"
    )
    print("|---|---|---:|---:|---|---:|---:|---:|")
    for name, res in results.items():
        cells = []
        for method in ("torch", "tg-traced"):
            times = [r[method]["median_s"] for r in res if "median_s" in r.get(method, {})]
            err = next((r[method].get("error") for r in res if "error" in r.get(method, {})), None)
            cells.append(f"{statistics.median(times) * 1e3:.1f}" if times else f"failed: {err}")
        ratios = paired(res, "tg-traced", ["torch"])
        first = res[0].get("tg-traced", {})
        nan = float("nan")
        busy = max((r[m].get("busy_elsewhere", 0.0) for r in res for m in r), default=nan)
        sizes = ", ".join(f"{k} {v}" for k, v in SCRIPTS[name].timing.items()
                          if k not in ("lr", "dropout"))  # fmt: skip
        print(f"| {name} | {sizes} | {cells[0]} | {cells[1]} | "
              f"{', '.join(f'{x:.2f}' for x in ratios)} | "
              f"{statistics.median(ratios) if ratios else float('nan'):.2f} | "
              f"{first.get('first_s', nan):.1f} ({first.get('kernels_s', nan):.0f}) | "
              f"{busy:.0%} |")  # fmt: skip


def print_host(blas: list[str] | None) -> None:
    import numba

    print(f"\nCPU: {cpu_name()}, {os.cpu_count()} cores; Python {platform.python_version()}, "
          f"NumPy {np.__version__}, Numba {numba.__version__}")  # fmt: skip
    try:
        import torch

        backend = next((line.split(":")[1].strip() for line in
                        torch.__config__.parallel_info().splitlines()
                        if line.startswith("ATen parallel backend")), "?")  # fmt: skip
        print(f"PyTorch {torch.__version__}: {torch.get_num_threads()} threads ({backend}), "
              f"CPU capability {torch.backends.cpu.get_cpu_capability()}, "
              f"BLAS {torch.backends.mkl.is_available() and 'MKL' or '?'}")  # fmt: skip
    except ImportError:
        pass
    print(f"NumPy's BLAS: {'; '.join(blas or blas_info())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkouts", type=Path, required=True,
                        help="the directory of nanoGPT, minGPT, examples, micrograd")  # fmt: skip
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--steps", type=int, default=4, help="parity: steps per method")
    parser.add_argument("--rounds", type=int, default=3, help="timing: rounds")
    parser.add_argument("--timed-steps", type=int, default=10, help="timing: steps per child")
    parser.add_argument("--budget", type=float, default=6.0, help="timing: seconds per child")
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--no-parity", action="store_true")
    parser.add_argument("--json", help="also write every result to this file")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "METHOD"), help=argparse.SUPPRESS)
    parser.add_argument("--profile", choices=list(SCRIPTS), metavar="MODEL",
                        help="where the traced step's time goes, instead")  # fmt: skip
    args = parser.parse_args()
    checkouts = args.checkouts.resolve()
    if args.child:
        result = child(checkouts, *args.child, args.timed_steps, args.budget)
        print(MARK + json.dumps(result), flush=True)
        return
    if args.profile:
        profile(checkouts, args.profile)
        return
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")  # fmt: skip
    everything: dict[str, Any] = {}
    models = [m for m in args.models if m in SCRIPTS]
    if not args.no_parity:
        rows = {name: parity(checkouts, name, args.steps) for name in models}
        micro = micrograd_tests(checkouts) if "micrograd" in args.models else None
        print_parity(rows, args.steps, micro)
        everything["parity"] = {
            n: {m: {k: v for k, v in r.items() if k not in ("grads", "state")}
                for m, r in row.items()} for n, row in rows.items()}  # fmt: skip
        everything["micrograd"] = micro
    blas = None
    if not args.no_timing:
        timing = {}
        for name in models:
            run = partial(measure, checkouts, name, args.timed_steps, args.budget)
            timing[name] = run_rounds(run, ("torch", "tg-traced"), args.rounds, warm=())
            blas = blas or next((r["blas"] for r in timing[name][0].values() if r.get("blas")),
                                None)  # fmt: skip
        print_timing(timing, args.rounds)
        everything["timing"] = timing
    print_host(blas)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(everything, f, indent=1, default=str)


def profile(checkouts: Path, name: str) -> None:
    """zoo.py's report of the traced step of `name` at its timing sizes."""
    from zoo import profile_run

    script = SCRIPTS[name]
    c = {**script.timing, "dtype": "float32", "dropout_off": False}
    batch, carried = script.data(c, np.random.default_rng(0))
    batch = tuple(a.astype(np.float32) if a.dtype.kind == "f" else a for a in batch)
    with library("tracegrad") as lib:
        built = build(checkouts, name, "tracegrad", lib, c)
        run = make_run(name, lib, built, c, traced=True)
        state = [lib.tensor(a.astype(np.float32)) for a in carried]

        def one() -> float:
            loss, state[:] = run(batch, tuple(state))
            return loss

        one.traced, one.wait_for_kernels = run.traced, run.traced.wait_for_kernels
        profile_run(name, one, "float32")


if __name__ == "__main__":
    main()
