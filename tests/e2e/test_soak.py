"""A one-minute soak of the real binary (tests/soak/soak.py): good and bad requests from 24
clients against sessions that replies outgrow, through the chat API, Anthropic's Messages API
and OpenAI's Responses API; every good reply equal to its solo reply, every bad one answered
with its status, nothing leaked, memory back within bounds. The ten-minute,
200-client run is recorded in docs/reliability.md."""

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import BIN

SOAK = Path(__file__).resolve().parents[1] / "soak" / "soak.py"


def test_a_one_minute_soak_loses_nothing(tmp_path):
    out = tmp_path / "soak.json"
    seconds = os.environ.get("FLASHLANE_SOAK_SECONDS", "60")
    result = subprocess.run(
        [sys.executable, str(SOAK), "--bin", BIN, "--clients", "24", "--seconds", seconds, "--json", str(out)],
        capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    figures = json.loads(out.read_text())
    assert figures["problems"] == 0 and figures["leaked_sessions"] == 0
    # The mix reached every kind, and the engine moved or paused streams under it.
    assert len(figures["by_kind"]) == 12, figures["by_kind"]
    assert figures["engine"]["moves_total"] + figures["engine"]["pauses_total"] > 0, figures["engine"]
