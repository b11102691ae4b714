"""Tests of grow_depth.py (run by scripts/test: `python -m pytest tools/train_tiny`): a small
fake checkpoint grown by a layer, checked name by name and byte by byte."""

import json
import os
import random
import subprocess
import sys

import pytest

from average_models import load, save
from grow_depth import grow

HERE = os.path.dirname(os.path.abspath(__file__))


def fake_model(rng, layer_types, mlp_only=()):
    """Tensors of a Qwen3-Next-like checkpoint ({name: (dtype, shape, bytes)}, random bytes)."""
    t = {}

    def add(name, shape):
        n = 1
        for d in shape:
            n *= d
        t[name] = ("BF16", shape, bytes(rng.randrange(256) for _ in range(2 * n)))

    add("model.embed_tokens.weight", [16, 8])
    add("model.norm.weight", [8])
    add("lm_head.weight", [16, 8])
    add("mtp.fc.weight", [8, 16])
    for i, kind in enumerate(layer_types):
        p = f"model.layers.{i}."
        add(p + "input_layernorm.weight", [8])
        add(p + "post_attention_layernorm.weight", [8])
        if kind == "linear_attention":
            add(p + "linear_attn.in_proj_qkvz.weight", [12, 8])
            add(p + "linear_attn.out_proj.weight", [8, 4])
        else:
            add(p + "self_attn.q_proj.weight", [8, 8])
            add(p + "self_attn.o_proj.weight", [8, 4])
        if i in mlp_only:
            add(p + "mlp.down_proj.weight", [8, 6])
            add(p + "mlp.up_proj.weight", [6, 8])
        else:
            for e in range(2):
                add(p + f"mlp.experts.{e}.down_proj.weight", [8, 3])
                add(p + f"mlp.experts.{e}.gate_proj.weight", [3, 8])
            add(p + "mlp.shared_expert.down_proj.weight", [8, 4])
            add(p + "mlp.gate.weight", [2, 8])
    return t


TYPES = ["linear_attention", "linear_attention", "full_attention"]


def test_the_new_layer_is_a_copy_with_its_residual_outputs_zeroed_and_the_rest_moved_up():
    rng = random.Random(5)
    tensors = fake_model(rng, TYPES)
    config = {"num_hidden_layers": 3, "layer_types": TYPES, "mlp_only_layers": []}
    out, grown, zeroed = grow(tensors, config, copy=1, at=2)
    assert grown["num_hidden_layers"] == 4
    assert grown["layer_types"] == ["linear_attention", "linear_attention", "linear_attention", "full_attention"]
    assert len(out) == len(tensors) + sum(1 for k in tensors if k.startswith("model.layers.1."))
    for name, tensor in tensors.items():
        if name.startswith("model.layers.2."):
            assert out[name.replace("layers.2.", "layers.3.")] == tensor, name
        elif name.startswith(("model.layers.0.", "model.layers.1.")) or not name.startswith("model.layers."):
            assert out[name] == tensor, name
    for name, (dtype, shape, data) in tensors.items():
        if not name.startswith("model.layers.1."):
            continue
        new = out[name.replace("layers.1.", "layers.2.")]
        rest = name[len("model.layers.1."):]
        assert new[:2] == (dtype, shape), name
        if rest in zeroed:
            assert new[2] == bytes(len(data)), name
        else:
            assert new[2] == data, name
    assert zeroed == sorted(["linear_attn.out_proj.weight", "mlp.experts.0.down_proj.weight",
                             "mlp.experts.1.down_proj.weight", "mlp.shared_expert.down_proj.weight"])


def test_a_dense_layer_s_down_projection_and_mlp_only_indices_follow():
    rng = random.Random(6)
    tensors = fake_model(rng, TYPES, mlp_only=(0, 2))
    config = {"num_hidden_layers": 3, "layer_types": TYPES, "mlp_only_layers": [0, 2]}
    out, grown, zeroed = grow(tensors, config, copy=0, at=0)
    assert grown["mlp_only_layers"] == [0, 1, 3]
    assert "mlp.down_proj.weight" in zeroed
    assert out["model.layers.0.mlp.down_proj.weight"][2] == bytes(2 * 8 * 6)
    assert out["model.layers.1.mlp.down_proj.weight"] == tensors["model.layers.0.mlp.down_proj.weight"]
    assert out["model.layers.3.self_attn.o_proj.weight"] == tensors["model.layers.2.self_attn.o_proj.weight"]


def test_layers_that_do_not_exist_are_refused():
    tensors = fake_model(random.Random(7), TYPES)
    config = {"num_hidden_layers": 3, "layer_types": TYPES}
    with pytest.raises(ValueError, match="--copy 3"):
        grow(tensors, config, copy=3, at=3)
    with pytest.raises(ValueError, match="--at 4"):
        grow(tensors, config, copy=0, at=4)


def test_the_command_writes_a_model_directory(tmp_path):
    rng = random.Random(8)
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    tensors = fake_model(rng, TYPES)
    save(str(src / "model.safetensors"), tensors, {"format": "pt"})
    (src / "config.json").write_text(json.dumps({"num_hidden_layers": 3, "layer_types": TYPES}))
    (src / "tokenizer.json").write_text("{}")
    run = subprocess.run([sys.executable, os.path.join(HERE, "grow_depth.py"), str(src), str(out), "--copy", "2"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    written, metadata = load(str(out / "model.safetensors"))
    assert metadata == {"format": "pt"}
    assert written["model.layers.3.self_attn.o_proj.weight"][2] == bytes(2 * 8 * 4)
    assert json.loads((out / "config.json").read_text())["layer_types"] == TYPES + ["full_attention"]
    assert (out / "tokenizer.json").read_text() == "{}"
    again = subprocess.run([sys.executable, os.path.join(HERE, "grow_depth.py"), str(src), str(src), "--copy", "0"],
                           capture_output=True, text=True)
    assert again.returncode != 0 and "is SRC" in again.stderr
