"""docs/schemas/*.json are the pydantic models' schemas (regenerate: python -m
streams.events.schemas)."""

from __future__ import annotations

import json
from pathlib import Path

from streams.events.schemas import schemas

DOCS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def test_published_schemas_match_the_models() -> None:
    for name, schema in schemas().items():
        assert json.loads((DOCS / f"{name}.json").read_text()) == schema, name


def test_schemas_name_the_agreed_fields() -> None:
    s = schemas()
    assert set(s["pings"]["required"]) == {"url", "source", "received_at"}
    assert set(s["pings"]["properties"]["source"]["enum"]) == {
        "sitemap", "indexnow", "websub", "cdn", "other"}
    assert set(s["outcomes"]["required"]) == {"url", "fetched_at", "changed"}
    assert "host" in s["pages"]["properties"]
    assert set(s["orders"]["required"]) == {"order_id", "url", "host", "issued_at",
                                            "crawl_value", "threshold", "tau_eff", "policy"}
