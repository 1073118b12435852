"""What the client commands send, checked the way the worker checks it.

:func:`worker_reason` runs the worker's own validation (:mod:`streams.events.records`, the
model of the topic, ``model_validate_json`` on the very bytes to be sent, with the worker's
``now_s`` and ``max_future_s`` context) so that a command refuses what the worker would
reject, with the reason the worker would put in ``recrawl.rejects``.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ValidationError

__all__ = ["worker_reason"]


def worker_reason(model: type[BaseModel], value: bytes, settings: Any,
                  now_s: float | None = None) -> str | None:
    """None when the worker would accept ``value`` on ``model``'s topic, else its reason."""
    from streams.events.records import validation_reason

    ctx = {"now_s": time.time() if now_s is None else now_s,
           "max_future_s": settings.max_future_s}
    try:
        model.model_validate_json(value, context=ctx)
    except ValidationError as exc:
        return validation_reason(exc)
    return None
