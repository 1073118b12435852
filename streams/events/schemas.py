"""JSON Schemas of every topic, generated from the pydantic models (``docs/schemas/``).

``python -m streams.events.schemas`` rewrites ``docs/schemas/*.json``; a test checks they match.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from streams.events.records import (
    ControlEvent,
    HostEvent,
    Order,
    OutcomeEvent,
    PageEvent,
    PingEvent,
)

__all__ = ["MODELS", "REJECT_SCHEMA", "schemas", "write"]

MODELS: dict[str, type[BaseModel]] = {
    "pages": PageEvent,
    "pings": PingEvent,
    "outcomes": OutcomeEvent,
    "hosts": HostEvent,
    "control": ControlEvent,
    "orders": Order,
}

REJECT_SCHEMA: dict[str, Any] = {
    "title": "Reject",
    "type": "object",
    "description": "recrawl.rejects: an input event that was not applied, and why.",
    "properties": {
        "raw": {"type": ["string", "null"], "description": "the value as UTF-8 text"},
        "raw_base64": {"type": "string", "description": "the value, when not UTF-8"},
        "topic": {"type": "string"},
        "partition": {"type": "integer"},
        "offset": {"type": "integer"},
        "reason": {"type": "string"},
        "raw_truncated": {"type": "boolean",
                          "description": "raw holds only the value's first 64 KiB"},
        "raw_bytes": {"type": "integer", "description": "the value's length when cut"},
        "raw_sha256": {"type": "string", "description": "the whole value's SHA-256 when cut"},
        "key": {"type": "string", "description": "the key as UTF-8 text (absent: no key)"},
        "key_base64": {"type": "string", "description": "the key, when not UTF-8"},
        "key_truncated": {"type": "boolean",
                          "description": "key holds only the key's first 1 KiB"},
        "key_bytes": {"type": "integer", "description": "the key's length when cut"},
        "key_sha256": {"type": "string", "description": "the whole key's SHA-256 when cut"},
    },
    "required": ["raw", "topic", "partition", "offset", "reason"],
}


def schemas() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, model in MODELS.items():
        schema = model.model_json_schema(by_alias=True, mode="validation")
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["description"] = f"recrawl.{name}: " + (model.__doc__ or "").strip().split(
            "\n")[0].split(": ", 1)[-1]
        out[name] = schema
    out["rejects"] = {"$schema": "https://json-schema.org/draft/2020-12/schema", **REJECT_SCHEMA}
    return out


def write(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, schema in schemas().items():
        path = folder / f"{name}.json"
        path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
        paths.append(path)
    return paths


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/schemas")
    for p in write(root):
        print(p)
