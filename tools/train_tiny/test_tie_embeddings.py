"""Tests of tie_embeddings.py (run by scripts/test): a small fake checkpoint tied, checked name by
name and byte by byte, and the command's refusals."""

import json
import os
import random
import subprocess
import sys

import pytest

from average_models import load, save
from test_grow_depth import TYPES, fake_model
from tie_embeddings import EMBED, HEAD, tie

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("keep", ["lm_head", "embed"])
def test_one_matrix_serves_both_and_the_rest_is_kept(keep):
    tensors = fake_model(random.Random(11), TYPES)
    assert tensors[EMBED] != tensors[HEAD]
    out, tied = tie(tensors, {"num_hidden_layers": 3}, keep)
    assert tied == {"num_hidden_layers": 3, "tie_word_embeddings": True}
    assert HEAD not in out
    assert out[EMBED] == tensors[HEAD if keep == "lm_head" else EMBED]
    assert {k: v for k, v in out.items() if k != EMBED} == {
        k: v for k, v in tensors.items() if k not in (EMBED, HEAD)}


def test_a_tied_model_or_unequal_matrices_are_refused():
    tensors = fake_model(random.Random(12), TYPES)
    with pytest.raises(ValueError, match="tied already"):
        tie(tensors, {"tie_word_embeddings": True}, "lm_head")
    with pytest.raises(ValueError, match="tied already"):
        tie({k: v for k, v in tensors.items() if k != HEAD}, {}, "lm_head")
    wide = dict(tensors)
    wide[HEAD] = ("BF16", [16, 9], bytes(2 * 16 * 9))
    with pytest.raises(ValueError, match="not one matrix"):
        tie(wide, {}, "embed")


def test_the_command_writes_a_tied_model_directory(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    tensors = fake_model(random.Random(13), TYPES)
    save(str(src / "model.safetensors"), tensors, {"format": "pt"})
    (src / "config.json").write_text(json.dumps({"num_hidden_layers": 3, "tie_word_embeddings": False}))
    (src / "tokenizer.json").write_text("{}")
    tool = os.path.join(HERE, "tie_embeddings.py")
    run = subprocess.run([sys.executable, tool, str(src), str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    written, _ = load(str(out / "model.safetensors"))
    assert HEAD not in written and written[EMBED] == tensors[HEAD]
    assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is True
    assert (out / "tokenizer.json").read_text() == "{}"
    again = subprocess.run([sys.executable, tool, str(out), str(tmp_path / "again")], capture_output=True, text=True)
    assert again.returncode != 0 and "tied already" in again.stderr
