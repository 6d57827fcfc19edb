#!/usr/bin/python3
"""Golden ONNX models for tests/onnx/onnx_import_test.cc, exported by PyTorch.

Run with Debian's python3 (python3-torch 1.13, python3-onnx 1.12) from the repository root:

    /usr/bin/python3 tests/onnx/make_fixtures.py [--ort]

Each model goes to tests/onnx/models/<name>/model.onnx with its inputs and PyTorch's outputs in
the ONNX test-data layout (test_data_set_0/input_0.pb, output_0.pb; onnx.numpy_helper). The
oracle is PyTorch (eval mode, float32). With --ort (run from a venv that has onnxruntime, e.g.
/work/venv-onnx/bin/python), every model is also run by onnxruntime and its outputs compared with
PyTorch's; the comparison is printed (it is not needed by `make test`).

Models (kept small: all fixtures together stay well under 1 MB):
  mlp            opset 13  Linear-ReLU-Linear-Softmax (Gemm, Relu, Softmax)
  cnn            opset 14  Conv-BN-ReLU-MaxPool-Conv-ReLU-BN-GlobalAvgPool-Linear, dynamic batch
                           (the benchmark model: benchmarks/peers/onnx_peers.py)
  transformer    opset 17  2-layer nn.TransformerEncoder (batch_first, eval): LayerNormalization
  transformer13  opset 13  the same at opset 13: LayerNorm as ReduceMean/Sub/Pow/Sqrt/Div
  resblock       opset 15  ResNet basic block (stride 2, 1x1 projection shortcut)
  dwsep          opset 16  depthwise-separable block (groups = channels), ReLU6 (Clip), HardSwish
  upsample       opset 13  nearest Resize x2, AvgPool (count_include_pad, ceil_mode), ConvTranspose
"""
import os
import shutil
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 32)
        self.fc2 = nn.Linear(32, 5)

    def forward(self, x):
        return torch.softmax(self.fc2(torch.relu(self.fc1(x))), dim=-1)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        # BN after the ReLU: the exporter cannot merge it into the Conv, so the model keeps a
        # BatchNormalization node (conv1's BN is merged into conv1 by the exporter).
        x = self.bn2(F.relu(self.conv2(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.1,
                                           batch_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.encoder(x))


class ResBlock(nn.Module):
    def __init__(self, cin=8, cout=16, stride=2):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.short(x))


class DWSep(nn.Module):
    def __init__(self, c=8, cout=12):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, 1, 1, groups=c, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.pw = nn.Conv2d(c, cout, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)

    def forward(self, x):
        x = F.relu6(self.bn1(self.dw(x)))
        return F.hardswish(self.bn2(self.pw(x)))


class Upsample(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
        self.conv = nn.Conv2d(6, 4, 3, dilation=2, padding=2)

    def forward(self, x):
        y = F.interpolate(x, scale_factor=2, mode="nearest")
        y = F.avg_pool2d(y, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=True)
        y = self.up(y)
        return torch.sigmoid(self.conv(y))


def randomize_bn(model, gen):
    """Non-trivial running statistics and affine parameters (fresh BN layers are identities)."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.5)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=gen) * 0.2)


def save(name, model, inputs, opset, dynamic_axes=None, fold=True):
    folder = os.path.join(ROOT, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.join(folder, "test_data_set_0"))
    model.eval()
    with torch.no_grad():
        outputs = model(*inputs)
    if isinstance(outputs, torch.Tensor):
        outputs = (outputs,)
    input_names = [f"input_{i}" for i in range(len(inputs))]
    output_names = [f"output_{i}" for i in range(len(outputs))]
    path = os.path.join(folder, "model.onnx")
    torch.onnx.export(model, tuple(inputs), path, opset_version=opset, input_names=input_names,
                      output_names=output_names, dynamic_axes=dynamic_axes,
                      do_constant_folding=fold)
    onnx.checker.check_model(onnx.load(path))
    for i, t in enumerate(inputs):
        tp = numpy_helper.from_array(t.numpy(), input_names[i])
        with open(os.path.join(folder, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(tp.SerializeToString())
    for i, t in enumerate(outputs):
        tp = numpy_helper.from_array(t.numpy(), output_names[i])
        with open(os.path.join(folder, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(tp.SerializeToString())
    ops = sorted({n.op_type for n in onnx.load(path).graph.node})
    print(f"{name}: opset {opset}, {os.path.getsize(path)} bytes, ops {' '.join(ops)}")
    return path, inputs, outputs


def check_ort(path, inputs, outputs):
    import onnxruntime as ort

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {i.name: t.numpy() for i, t in zip(sess.get_inputs(), inputs)}
    got = sess.run(None, feed)
    worst = 0.0
    for g, want in zip(got, outputs):
        want = want.numpy()
        worst = max(worst, float(np.max(np.abs(g - want) / (np.abs(want) + 1e-3))))
    print(f"  onnxruntime {ort.__version__} vs PyTorch: max relative difference {worst:.2e}")
    assert worst < 1e-4, path


def main():
    use_ort = "--ort" in sys.argv
    gen = torch.Generator().manual_seed(7)
    torch.manual_seed(7)
    models = []

    models.append(save("mlp", MLP(), [torch.randn(4, 12, generator=gen)], 13))

    cnn = CNN()
    randomize_bn(cnn, gen)
    models.append(save("cnn", cnn, [torch.randn(2, 3, 16, 16, generator=gen)], 14,
                       dynamic_axes={"input_0": {0: "batch"}, "output_0": {0: "batch"}},
                       ))

    tr = Transformer()
    models.append(save("transformer", tr, [torch.randn(2, 5, 16, generator=gen)], 17))
    models.append(save("transformer13", tr, [torch.randn(2, 5, 16, generator=gen)], 13))

    rb = ResBlock()
    randomize_bn(rb, gen)
    models.append(save("resblock", rb, [torch.randn(2, 8, 10, 10, generator=gen)], 15))

    dw = DWSep()
    randomize_bn(dw, gen)
    models.append(save("dwsep", dw, [torch.randn(2, 8, 9, 9, generator=gen) * 2], 16))

    models.append(save("upsample", Upsample(), [torch.randn(1, 4, 5, 5, generator=gen)], 13))

    if use_ort:
        for path, inputs, outputs in models:
            print(path)
            check_ort(path, inputs, outputs)


if __name__ == "__main__":
    main()
