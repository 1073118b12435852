"""models/ is pure: numpy, scipy, the standard library; no streaming stack, no clock."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

MODELS = Path(__file__).resolve().parents[1] / "models"


def test_importing_models_pulls_in_no_streaming_stack() -> None:
    code = (
        "import json, sys; import models, models.values, models.policies, models.cost, "
        "models.decision.core, models.decision.pings, models.decision.pooling; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=MODELS.parent,
    )
    loaded = json.loads(out.stdout)
    for banned in ("faust", "redis", "aiokafka", "mode", "streams", "pydantic", "httpx"):
        assert not [m for m in loaded if m == banned or m.startswith(banned + ".")], banned


def test_models_source_reads_no_clock_or_environment() -> None:
    pattern = re.compile(
        r"^\s*(import time\b|from time import|import datetime|from datetime import|"
        r"import os\b|from os import)|time\.time\(|datetime\.now|os\.environ",
        re.MULTILINE,
    )
    offenders = [str(p.relative_to(MODELS)) for p in MODELS.rglob("*.py")
                 if pattern.search(p.read_text())]
    assert offenders == []
