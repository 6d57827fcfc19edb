#!/usr/bin/env python3
"""The golden models of make_fixtures.py, exported by PyTorch 2.x with its defaults.

`torch.onnx.export(model, (x,), path)` in PyTorch 2.9 and later goes through the dynamo exporter:
opset 20 (18 before 2.9), IR version 10, weights in an external data file beside the model
(`model.onnx.data`), names taken from the module's parameters and forward's arguments, and
dynamic dimensions from `dynamic_shapes` as symbols. Those are the models users have today, so
kiln's importer is tested on them as on the TorchScript exports of Debian's torch 1.13.

Needs a venv with PyTorch 2.x and onnxscript (PyPI; large, not part of make test), e.g.

    /usr/bin/python3 -m venv /work/venv-peers
    /work/venv-peers/bin/pip install torch onnx onnxscript onnxruntime
    /work/venv-peers/bin/python tests/onnx/make_torch2_fixtures.py [--ort]

Writes tests/onnx/models_torch2/<name>/model.onnx, model.onnx.data and test_data_set_0 (inputs
and PyTorch's outputs, onnx.numpy_helper), with the models, seeds and inputs of make_fixtures.py.
With --ort every model is also run by onnxruntime and compared with PyTorch (printed).
"""
import os
import shutil
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_fixtures as mf  # noqa: E402  (the model classes and randomize_bn)

ROOT = os.path.join(HERE, "models_torch2")


def save(name, model, inputs, dynamic_shapes=None):
    folder = os.path.join(ROOT, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.join(folder, "test_data_set_0"))
    model.eval()
    with torch.no_grad():
        outputs = model(*inputs)
    if isinstance(outputs, torch.Tensor):
        outputs = (outputs,)
    path = os.path.join(folder, "model.onnx")
    # The defaults, as a user calls it (only dynamic_shapes where the model has a dynamic batch).
    torch.onnx.export(model, tuple(inputs), path, dynamic_shapes=dynamic_shapes)
    proto = onnx.load(path, load_external_data=False)
    onnx.checker.check_model(path)
    in_names = [i.name for i in proto.graph.input]
    out_names = [o.name for o in proto.graph.output]
    for i, t in enumerate(inputs):
        with open(os.path.join(folder, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(t.numpy(), in_names[i]).SerializeToString())
    for i, t in enumerate(outputs):
        with open(os.path.join(folder, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(t.numpy(), out_names[i]).SerializeToString())
    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    external = sum(1 for t in proto.graph.initializer
                   if t.data_location == onnx.TensorProto.EXTERNAL)
    ops = sorted({n.op_type for n in proto.graph.node})
    print(f"{name}: torch {torch.__version__}, opset {opset}, IR {proto.ir_version}, "
          f"{external} of {len(proto.graph.initializer)} initializers external, ops {' '.join(ops)}")
    return path, inputs, outputs


def main():
    use_ort = "--ort" in sys.argv
    gen = torch.Generator().manual_seed(7)
    torch.manual_seed(7)
    models = []
    models.append(save("mlp", mf.MLP(), [torch.randn(4, 12, generator=gen)]))

    cnn = mf.CNN()
    mf.randomize_bn(cnn, gen)
    models.append(save("cnn", cnn, [torch.randn(2, 3, 16, 16, generator=gen)],
                       dynamic_shapes=({0: torch.export.Dim("batch")},)))

    models.append(save("transformer", mf.Transformer(), [torch.randn(2, 5, 16, generator=gen)]))

    rb = mf.ResBlock()
    mf.randomize_bn(rb, gen)
    models.append(save("resblock", rb, [torch.randn(2, 8, 10, 10, generator=gen)]))

    dw = mf.DWSep()
    mf.randomize_bn(dw, gen)
    models.append(save("dwsep", dw, [torch.randn(2, 8, 9, 9, generator=gen) * 2]))

    models.append(save("upsample", mf.Upsample(), [torch.randn(1, 4, 5, 5, generator=gen)]))

    if use_ort:
        for path, inputs, outputs in models:
            print(path)
            mf.check_ort(path, inputs, outputs)


if __name__ == "__main__":
    main()
