#!/usr/bin/env python3
"""The compilers users would pick instead of kiln, on kiln_bench's rows (same names), for
run_peers.py (issue #18): JAX/XLA (`jax.jit`), PyTorch 2.x (`torch.compile`) and onnxruntime.

Run with the venv of make_peers_venv.sh, one peer per process (their thread pools stay apart):

    benchmarks/peers/make_peers_venv.sh build/peers-venv
    build/peers-venv/bin/python benchmarks/peers/compiler_peers.py --peer jax|torch|ort \\
        [--threads 2] [--repetitions 3] [--min-time 0.5] [--filter NAME_PART]

Rows (the shapes, hyperparameters and data distributions of kiln_bench's rows):
  train/mlp_step/784-512-256-10/b128  Linear 784-512, ReLU, Linear 512-256, ReLU, Linear 256-10,
      mean cross-entropy on integer labels, backward, SGD (lr 0.01, momentum 0.9); one call is
      one whole step returning the loss and logits, and the loss is read on the host (kiln's
      loss.item()). jax: jax.jit of value_and_grad + the update, parameters and velocities
      donated. torch: torch.compile of zero_grad + forward + backward + optimizer.step().
  train/cnn_step/mnist/b64  the same for examples/fashion_mnist/cnn.cc's CNN: conv 1->32 3x3,
      ReLU, max-pool 2, conv 32->64 3x3, ReLU, max-pool 2, Linear 1600-128, ReLU, Linear 128-10.
  infer/mlp/784-512-256-10/b1, .../b256  the MLP's forward to logits (jax.jit; torch.compile
      under no_grad; onnxruntime on torch.onnx.export of the same model, one export per batch).
  eltwise/gelu_affine/16777216  gelu_tanh(x * 0.75 + 0.25) on f32[16M] (jax, torch).
  softmax/rows/4096x4096  softmax over dim 1 (jax, torch).
  dispatch/cache_hit  kiln_bench's 10 elementwise ops on two f32[16] (jax, torch): the fixed cost
      of one call of a compiled function.

Every peer starts from the same numpy-made parameters (PyTorch's default init: uniform
+-1/sqrt(fan_in)) and inputs (images and samples uniform in [-0.81, 2.02), labels 0..9,
elementwise inputs uniform in [-3, 3), as benchmarks/frontend_workloads.h draws kiln's; the
same distributions, not the same bits). Correctness before timing: the first call (which
compiles) is compared with a float64 numpy reference (for a step: the loss, the new velocities,
i.e. the gradients, and the new parameters), and a mismatch is an error, not a time. Then the
timing of torch_bench.py after 3 more warm-up calls: --repetitions batches of calls, each at
least --min-time seconds, and "seconds" is the best batch's mean per call; "first_call_seconds"
is the compiling first call.

torch.compile of the whole step gives three graphs by default: Dynamo breaks the graph at
optimizer.zero_grad() (skipped by design) and at loss.backward() (AOTAutograd's compiled backward
runs there), and compiles the optimizer step again on the second call. Its opt-in
torch._dynamo.config.trace_autograd_ops = True, which traces the backward into the graph, made
this step about 15 times slower here, so the default is what is timed.

Threads (each pinned before the framework is imported):
  all     the process's CPU affinity is cut to --threads CPUs when it has more.
  jax     XLA:CPU sizes its intra-op pool from the CPUs the process may run on and has no flag
          for its size, so the affinity is what pins it; XLA_FLAGS gains
          --xla_cpu_multi_thread_eigen=true (the default, stated).
  torch   torch.set_num_threads(--threads) and OMP_NUM_THREADS; the C++ that torch.compile
          generates runs `#pragma omp parallel num_threads(torch.get_num_threads())`.
  ort     SessionOptions.intra_op_num_threads = --threads, inter_op_num_threads = 1,
          ORT_ENABLE_ALL.

Prints JSON: {"peer", "version", "threads", "results": {name: {"seconds", "first_call_seconds",
"check"}}}.
"""

import argparse
import json
import math
import os
import sys
import tempfile
import time

# numpy's float64 references run before the timing: one thread, so that no OpenBLAS pool of
# numpy's own is left spinning beside the peer being timed.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402 (after the variable above)

from peer_common import (CNN_STEP, DISPATCH, GELU, INFER_B1, INFER_B256, MLP_STEP, SOFTMAX,
                         best_mean_seconds)

ELTWISE = 16777216
AFFINE_SCALE, AFFINE_SHIFT = 0.75, 0.25
LR, MOMENTUM = 0.01, 0.9
MLP_SIZES = (784, 512, 256, 10)
IMAGE_LOW, IMAGE_HIGH = -0.81, 2.02
WARMUP_CALLS = 3



# ---- Inputs and parameters (numpy, shared by every peer) ----------------------------------------

def linear_params(rng, fan_in, fan_out):
    """PyTorch's nn.Linear / nn.Conv2d default init: W and b uniform in +-1/sqrt(fan_in)."""
    bound = 1.0 / math.sqrt(fan_in)
    return (rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32),
            rng.uniform(-bound, bound, fan_out).astype(np.float32))


def mlp_params(seed=0):
    """[W1, b1, W2, b2, W3, b3], W as [out, in] (nn.Linear's layout)."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(MLP_SIZES[:-1], MLP_SIZES[1:]):
        params += linear_params(rng, fan_in, fan_out)
    return params


def cnn_params(seed=0):
    """[conv1 W [32,1,3,3], b, conv2 W [64,32,3,3], b, fc1 W [128,1600], b, fc2 W [10,128], b]."""
    rng = np.random.default_rng(seed)
    w1, b1 = linear_params(rng, 1 * 9, 32)
    w2, b2 = linear_params(rng, 32 * 9, 64)
    return [w1.reshape(32, 1, 3, 3), b1, w2.reshape(64, 32, 3, 3), b2,
            *linear_params(rng, 1600, 128), *linear_params(rng, 128, 10)]


def image_batch(n, seed=11):
    """Images [n, 28, 28] uniform in [-0.81, 2.02) and labels [n] in 0..9 (MakeHostBatch's)."""
    rng = np.random.default_rng(seed)
    return (rng.uniform(IMAGE_LOW, IMAGE_HIGH, (n, 28, 28)).astype(np.float32),
            rng.integers(0, 10, n).astype(np.int64))


def mlp_batch(params, n, margin=3e-6):
    """image_batch(n, seed) for the first seed from 11 on whose float64 forward has no ReLU input
    within `margin` of 0: float32 peers compute those inputs to about 1e-6, and one that lands
    on the other side of 0 than the reference's changes a whole row of a weight gradient."""
    for seed in range(11, 1000):
        images, labels = image_batch(n, seed)
        h = images.reshape(n, -1).astype(np.float64)
        clear = True
        for i in range(0, len(params) - 2, 2):
            z = h @ np.asarray(params[i], np.float64).T + params[i + 1]
            clear = clear and float(np.abs(z).min()) >= margin
            h = relu(z)
        if clear:
            return images, labels
    raise RuntimeError("no batch without ReLU inputs near 0")


def uniform(shape, seed, low=-3.0, high=3.0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


# ---- float64 numpy references --------------------------------------------------------------------

def relu(x):
    return np.maximum(x, 0.0)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def softmax_rows(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def dispatch_ops(x, y, tanh=np.tanh, exp=np.exp, absolute=np.abs):
    """kiln_bench's dispatch/cache_hit: 10 elementwise ops on x and y."""
    a = x * y
    b = tanh(a - y)
    c = b * a + exp(y)
    return c / (absolute(y) + absolute(x))


def cross_entropy(logits, labels):
    """Mean cross-entropy and its gradient with respect to the logits."""
    p = softmax_rows(logits)
    n = logits.shape[0]
    loss = -np.mean(np.log(p[np.arange(n), labels]))
    d = p.copy()
    d[np.arange(n), labels] -= 1.0
    return loss, d / n


def mlp_forward(params, x):
    h = np.asarray(x, np.float64).reshape(x.shape[0], -1)
    for i in range(0, len(params), 2):
        h = h @ np.asarray(params[i], np.float64).T + params[i + 1]
        if i + 2 < len(params):
            h = relu(h)
    return h


def mlp_grads(params, x, labels):
    p = [np.asarray(t, np.float64) for t in params]
    acts = [np.asarray(x, np.float64).reshape(x.shape[0], -1)]
    for i in range(0, len(p), 2):
        z = acts[-1] @ p[i].T + p[i + 1]
        acts.append(relu(z) if i + 2 < len(p) else z)
    loss, g = cross_entropy(acts[-1], labels)
    grads = [None] * len(p)
    for i in range(len(p) - 2, -1, -2):
        x_in = acts[i // 2]
        grads[i], grads[i + 1] = g.T @ x_in, g.sum(axis=0)
        if i > 0:
            g = (g @ p[i]) * (x_in > 0)
    return loss, acts[-1], grads


def windows3(x):
    """[N, C, H, W] -> [N, C, H-2, W-2, 3, 3] (3x3 valid windows)."""
    return np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))


def conv3(x, w, b):
    return np.einsum("nchwij,ocij->nohw", windows3(x), w, optimize=True) + b[None, :, None, None]


def conv3_backward(x, w, g, need_input_grad):
    dw = np.einsum("nchwij,nohw->ocij", windows3(x), g, optimize=True)
    db = g.sum(axis=(0, 2, 3))
    dx = None
    if need_input_grad:  # the full convolution of g with the flipped kernel
        padded = np.pad(g, ((0, 0), (0, 0), (2, 2), (2, 2)))
        dx = np.einsum("nohwij,ocij->nchw", windows3(padded), w[:, :, ::-1, ::-1], optimize=True)
    return dx, dw, db


def max_pool2(x):
    n, c, h, w = x.shape
    blocks = x[:, :, :h // 2 * 2, :w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2)
    return blocks.max(axis=(3, 5))


def max_pool2_backward(x, g):
    """The gradient goes to every element equal to its window's max: ties are only zeros of a
    ReLU here, whose own gradient is 0, so the choice among them does not matter."""
    n, c, h, w = x.shape
    blocks = x[:, :, :h // 2 * 2, :w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2)
    mask = blocks == blocks.max(axis=(3, 5))[:, :, :, None, :, None]
    dx = np.zeros_like(x)
    dx[:, :, :h // 2 * 2, :w // 2 * 2] = (mask * g[:, :, :, None, :, None]).reshape(
        n, c, h // 2 * 2, w // 2 * 2)
    return dx


def cnn_grads(params, images, labels):
    w1, b1, w2, b2, w3, b3, w4, b4 = [np.asarray(t, np.float64) for t in params]
    x0 = np.asarray(images, np.float64)[:, None]
    z1 = conv3(x0, w1, b1)
    a1 = relu(z1)
    p1 = max_pool2(a1)
    z2 = conv3(p1, w2, b2)
    a2 = relu(z2)
    p2 = max_pool2(a2)
    f = p2.reshape(p2.shape[0], -1)
    z3 = f @ w3.T + b3
    a3 = relu(z3)
    logits = a3 @ w4.T + b4
    loss, g = cross_entropy(logits, labels)
    dw4, db4 = g.T @ a3, g.sum(axis=0)
    g = (g @ w4) * (z3 > 0)
    dw3, db3 = g.T @ f, g.sum(axis=0)
    g = (g @ w3).reshape(p2.shape)
    g = max_pool2_backward(a2, g) * (z2 > 0)
    g, dw2, db2 = conv3_backward(p1, w2, g, need_input_grad=True)
    g = max_pool2_backward(a1, g) * (z1 > 0)
    _, dw1, db1 = conv3_backward(x0, w1, g, need_input_grad=False)
    return loss, logits, [dw1, db1, dw2, db2, dw3, db3, dw4, db4]


def sgd_reference(grads_fn, params, inputs):
    """One SGD momentum step from zero velocities: (loss, new velocities, new parameters)."""
    loss, _, grads = grads_fn(params, *inputs)
    velocities = [np.asarray(g) for g in grads]  # 0.9 * 0 + g
    new_params = [np.asarray(p, np.float64) - LR * v for p, v in zip(params, velocities)]
    return loss, velocities, new_params


# ---- Checks --------------------------------------------------------------------------------------

class Mismatch(Exception):
    pass


def worst_relative(got, want):
    """max |got - want| / max |want| (0 when both are 0)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        raise Mismatch(f"shape {got.shape}, expected {want.shape}")
    scale = max(float(np.abs(want).max()), 1e-30)
    return float(np.abs(got - want).max()) / scale


def check_close(what, got, want, tolerance):
    error = worst_relative(got, want)
    if not error <= tolerance:
        raise Mismatch(f"{what}: max |diff| / max |reference| = {error:.3g} > {tolerance:g}")
    return error


def check_step(got, want):
    """got, want: (loss, velocities, parameters); velocities after one step are the gradients."""
    loss, velocities, params = got
    want_loss, want_velocities, want_params = want
    if not abs(float(loss) - want_loss) <= 1e-4 * (1.0 + abs(want_loss)):
        raise Mismatch(f"loss {float(loss):.7g}, reference {want_loss:.7g}")
    worst = 0.0
    for k, (v, w) in enumerate(zip(velocities, want_velocities)):
        worst = max(worst, check_close(f"gradient of parameter {k}", v, w, 1e-4))
    for k, (p, w) in enumerate(zip(params, want_params)):
        check_close(f"parameter {k}", p, w, 1e-5)
    return f"loss {float(loss):.6f} (reference {want_loss:.6f}); gradients within {worst:.1e}"


def check_values(got, want, tolerance=1e-5):
    return f"max |diff| / max |ref| {check_close('output', got, want, tolerance):.1e}"


def eltwise_reference(x):
    # Every 4099th element, as kiln_bench samples its check.
    return gelu_tanh(np.asarray(x[::4099], np.float64) * AFFINE_SCALE + AFFINE_SHIFT)


# ---- Timing --------------------------------------------------------------------------------------

def run_row(name, build, options, results):
    """build() -> (first, steady): first() runs the first (compiling) call and returns its check
    text (raising Mismatch when wrong); steady() is one timed call."""
    if options.filter and options.filter not in name:
        return
    try:
        first, steady = build()
        start = time.perf_counter()
        check = first()
        first_call = time.perf_counter() - start
        # Past the compiles that later calls trigger: torch.compile compiles the optimizer step
        # again on the second call, once the momentum buffers exist.
        for _ in range(WARMUP_CALLS):
            steady()
        seconds = best_mean_seconds(steady, options.repetitions, options.min_time)
        results[name] = {"seconds": seconds, "first_call_seconds": first_call, "check": check}
        print(f"compiler_peers {options.peer}: {name}: {seconds:.6g} s (first call "
              f"{first_call:.3g} s; {check})", file=sys.stderr, flush=True)
    except Mismatch as error:
        results[name] = {"error": f"wrong result: {error}"}
        print(f"compiler_peers {options.peer}: {name}: WRONG RESULT: {error}", file=sys.stderr)
    except Exception as error:  # one failing row must not lose the others
        results[name] = {"error": f"{type(error).__name__}: {error}"}
        print(f"compiler_peers {options.peer}: {name}: FAILED: {type(error).__name__}: {error}",
              file=sys.stderr)


def elementwise_rows(function_row, gelu_tanh_fn, softmax_fn, tanh_exp_abs, options, results):
    """The rows jax and torch share, from one framework's function_row(fn, args, check) and
    ops: gelu_tanh(x * a + b), softmax over rows, and dispatch/cache_hit's 10 ops."""
    x = uniform(ELTWISE, 1)
    run_row(GELU, function_row(
        lambda x: gelu_tanh_fn(x * AFFINE_SCALE + AFFINE_SHIFT), [x],
        lambda y: check_values(y[::4099], eltwise_reference(x))), options, results)
    rows = uniform((4096, 4096), 3)
    run_row(SOFTMAX, function_row(
        softmax_fn, [rows],
        lambda y: check_values(y[::97], softmax_rows(np.asarray(rows[::97], np.float64)))),
        options, results)
    a, b = uniform(16, 21, -1.0, 1.0), uniform(16, 22)
    run_row(DISPATCH, function_row(
        lambda a, b: dispatch_ops(a, b, *tanh_exp_abs), [a, b],
        lambda out: check_values(out, dispatch_ops(np.asarray(a, np.float64),
                                                    np.asarray(b, np.float64)))),
        options, results)


# ---- JAX -----------------------------------------------------------------------------------------

def jax_rows(options, results):
    import jax
    import jax.numpy as jnp

    # Linear weights in JAX's own layout, [in, out] (flax.linen.Dense's kernel), so that a layer
    # is x @ W: as nn.Linear's [out, in] they cost XLA a transposing copy of W per call when W is
    # an argument (batch-1 inference took about 3 times as long here).
    def to_jax(params):
        return [jnp.asarray(p.T if p.ndim == 2 else p) for p in params]

    def from_jax(params):
        return [np.asarray(p).T if p.ndim == 2 else np.asarray(p) for p in params]

    def mlp_apply(params, x):
        h = x.reshape(x.shape[0], -1)
        for i in range(0, len(params), 2):
            h = h @ params[i] + params[i + 1]
            if i + 2 < len(params):
                h = jax.nn.relu(h)
        return h

    def conv(x, w, b):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), "VALID",
                                         dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return y + b[None, :, None, None]

    def pool(x):
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                     "VALID")

    def cnn_apply(params, images):
        w1, b1, w2, b2, w3, b3, w4, b4 = params
        h = pool(jax.nn.relu(conv(images[:, None], w1, b1)))
        h = pool(jax.nn.relu(conv(h, w2, b2)))
        h = jax.nn.relu(h.reshape(h.shape[0], -1) @ w3 + b3)
        return h @ w4 + b4

    def train_row(apply, params0, inputs, grads_fn):
        def loss_fn(params, x, labels):
            logits = apply(params, x)
            log_p = jax.nn.log_softmax(logits)
            return -jnp.mean(jnp.take_along_axis(log_p, labels[:, None], axis=1)), logits

        def _step(params, velocities, x, labels):
            (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, labels)
            velocities = [MOMENTUM * v + g for v, g in zip(velocities, grads)]
            params = [p - LR * v for p, v in zip(params, velocities)]
            return params, velocities, loss, logits

        step = jax.jit(_step, donate_argnums=(0, 1))
        want = sgd_reference(grads_fn, params0, inputs)

        def build():
            state = {"params": to_jax(params0),
                     "velocities": [jnp.zeros_like(p) for p in to_jax(params0)]}
            x, labels = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])

            def call():
                state["params"], state["velocities"], loss, logits = step(
                    state["params"], state["velocities"], x, labels)
                logits.block_until_ready()
                return float(loss)  # the host reads the loss, as kiln's loss.item()

            def first():
                loss = call()
                return check_step((loss, from_jax(state["velocities"]),
                                   from_jax(state["params"])), want)

            return first, call

        return build

    def function_row(fn, args, check):
        jitted = jax.jit(fn)
        device_args = jax.tree.map(jnp.asarray, args)

        def build():
            def call():
                return jitted(*device_args).block_until_ready()

            return (lambda: check(np.asarray(call()))), call

        return build

    mlp = mlp_params()
    images, labels = mlp_batch(mlp, 128)
    run_row(MLP_STEP, train_row(mlp_apply, mlp, (images, labels), mlp_grads), options, results)
    for batch, name in ((1, INFER_B1), (256, INFER_B256)):
        x = uniform((batch, 784), 12, IMAGE_LOW, IMAGE_HIGH)
        # The parameters are arguments (as jax.jit(model.apply)(params, x)), not constants.
        run_row(name, function_row(mlp_apply, [to_jax(mlp), x],
                                   lambda y, x=x: check_values(y, mlp_forward(mlp, x))),
                options, results)
    elementwise_rows(function_row, lambda x: jax.nn.gelu(x, approximate=True),
                     lambda x: jax.nn.softmax(x, axis=1), (jnp.tanh, jnp.exp, jnp.abs), options,
                     results)
    images, labels = image_batch(64)
    run_row(CNN_STEP, train_row(cnn_apply, cnn_params(), (images, labels), cnn_grads), options,
            results)
    return jax.__version__


# ---- PyTorch (torch.compile) ---------------------------------------------------------------------

def torch_modules():
    import torch.nn as nn

    def mlp():
        return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                             nn.Linear(256, 10))

    def cnn():
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))

    return mlp, cnn


def load_params(model, params):
    import torch
    with torch.no_grad():
        for p, value in zip(model.parameters(), params):
            p.copy_(torch.from_numpy(value))
    return model


def torch_rows(options, results):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(options.threads)
    make_mlp, make_cnn = torch_modules()

    def train_row(model, params0, inputs, grads_fn):
        want = sgd_reference(grads_fn, params0, inputs)

        def build():
            torch._dynamo.reset()  # each row compiles afresh (no shared guards or dynamic dims)
            load_params(model, params0)
            optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
            x, labels = torch.from_numpy(inputs[0]), torch.from_numpy(inputs[1])
            if x.dim() == 3 and isinstance(model[0], torch.nn.Conv2d):
                x = x.unsqueeze(1)

            @torch.compile
            def step():
                optimizer.zero_grad(set_to_none=True)
                logits = model(x)
                loss = F.cross_entropy(logits, labels)
                loss.backward()
                optimizer.step()
                return loss, logits

            def call():
                loss, _ = step()
                return loss.item()  # kiln's loss.item()

            def first():
                loss = call()
                velocities = [optimizer.state[p]["momentum_buffer"].numpy()
                              for p in model.parameters()]
                params = [p.detach().numpy() for p in model.parameters()]
                return check_step((loss, velocities, params), want)

            return first, call

        return build

    def function_row(fn, args, check):
        tensors = [torch.from_numpy(a) for a in args]

        def build():
            torch._dynamo.reset()
            compiled = torch.compile(fn)

            def call():
                with torch.no_grad():
                    return compiled(*tensors)

            return (lambda: check(call().numpy())), call

        return build

    mlp = mlp_params()
    images, labels = mlp_batch(mlp, 128)
    run_row(MLP_STEP, train_row(make_mlp(), mlp, (images.reshape(128, 784), labels), mlp_grads),
            options, results)
    model = load_params(make_mlp(), mlp).eval()
    for batch, name in ((1, INFER_B1), (256, INFER_B256)):
        x = uniform((batch, 784), 12, IMAGE_LOW, IMAGE_HIGH)
        run_row(name, function_row(lambda x, m=model: m(x), [x],
                                   lambda y, x=x: check_values(y, mlp_forward(mlp, x))),
                options, results)
    elementwise_rows(function_row, lambda x: F.gelu(x, approximate="tanh"),
                     lambda x: torch.softmax(x, dim=1), (torch.tanh, torch.exp, torch.abs),
                     options, results)
    images, labels = image_batch(64)
    run_row(CNN_STEP, train_row(make_cnn(), cnn_params(), (images, labels), cnn_grads), options,
            results)
    return torch.__version__


# ---- onnxruntime ---------------------------------------------------------------------------------

def ort_rows(options, results):
    import onnxruntime as ort
    import torch

    torch.set_num_threads(options.threads)
    make_mlp, _ = torch_modules()
    mlp = mlp_params()
    model = load_params(make_mlp(), mlp).eval()
    session_options = ort.SessionOptions()
    session_options.intra_op_num_threads = options.threads
    session_options.inter_op_num_threads = 1
    session_options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    with tempfile.TemporaryDirectory(prefix="compiler_peers_") as scratch:
        for batch, name in ((1, INFER_B1), (256, INFER_B256)):
            if options.filter and options.filter not in name:
                continue
            x = uniform((batch, 784), 12, IMAGE_LOW, IMAGE_HIGH)
            path = os.path.join(scratch, f"mlp_b{batch}.onnx")
            # What a user writes (PyTorch 2.x's exporter, static shapes: the best case for ORT).
            torch.onnx.export(model, (torch.from_numpy(x),), path, input_names=["x"],
                              output_names=["logits"])
            session = ort.InferenceSession(path, session_options,
                                           providers=["CPUExecutionProvider"])
            feed = {"x": x}

            def build(session=session, feed=feed, x=x):
                def call():
                    return session.run(None, feed)[0]

                return (lambda: check_values(call(), mlp_forward(mlp, x))), call

            run_row(name, build, options, results)
    return ort.__version__


def pin_threads(threads):
    """Cuts the CPU affinity to `threads` CPUs (XLA sizes its pool from it) and sets the
    thread-count variables the frameworks read at start-up."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > threads:
        os.sched_setaffinity(0, cpus[:threads])
    os.environ["OMP_NUM_THREADS"] = str(threads)
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=true").strip()
    return len(os.sched_getaffinity(0))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer", choices=("jax", "torch", "ort"), required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--min-time", type=float, default=0.5)
    parser.add_argument("--filter", default="", help="run only names containing this")
    options = parser.parse_args()

    # The JSON is the only thing on stdout: what the frameworks print there (torch.onnx.export's
    # progress, at the file-descriptor level too) goes to stderr.
    json_out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    cpus = pin_threads(options.threads)
    if options.peer == "torch" and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        # A fresh cache: every run compiles cold (first_call_seconds means one thing), and no
        # stale kernel of another torch build is loaded (one such failed with "undefined symbol:
        # Sleef_logf8_u10").
        scratch = tempfile.TemporaryDirectory(prefix="compiler_peers_inductor_")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = scratch.name
    results = {}
    version = {"jax": jax_rows, "torch": torch_rows, "ort": ort_rows}[options.peer](options,
                                                                                     results)
    sys.stdout.flush()
    json.dump({"peer": options.peer, "version": version, "threads": options.threads,
               "cpus": cpus, "results": results}, json_out, indent=1)
    print(file=json_out)
    json_out.flush()
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
