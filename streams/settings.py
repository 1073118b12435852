"""One settings object for the whole service, built once and passed explicitly.

Values come from (highest first): keyword arguments, the environment (``RECRAWL_`` prefix,
e.g. ``RECRAWL_KAFKA_BOOTSTRAP``), an env-style file named by ``RECRAWL_CONFIG``, the state
file of a stack started with ``recrawl infra up`` (its Kafka and Redis addresses), defaults.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

#: Logical topic names; the real name is ``f"{topic_prefix}.{name}"``.
INPUT_TOPICS = ("pages", "pings", "outcomes", "hosts", "control")
OUTPUT_TOPICS = ("orders", "rejects")
ALL_TOPICS = INPUT_TOPICS + OUTPUT_TOPICS


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="RECRAWL_", env_file=os.environ.get("RECRAWL_CONFIG"), extra="ignore"
    )

    kafka_bootstrap: str = "127.0.0.1:9092"
    redis_url: str = "redis://127.0.0.1:6379/0"
    #: Topics are ``<topic_prefix>.pages`` etc.; tests use a unique prefix per test.
    topic_prefix: str = "recrawl"
    #: One partition count for every topic (all keyed by host).
    partitions: int = Field(default=4, ge=1, le=1024)
    #: Faust application id = Kafka consumer group.
    app_id: str = "recrawl"
    #: Prefix of every Redis key (keys look like ``<key_prefix>:{host}:...``).
    key_prefix: str = "rc"
    web_enabled: bool = True
    web_host: str = "127.0.0.1"
    web_port: int = Field(default=6066, ge=0, le=65535)
    #: Where a worker keeps Faust's local data (tables are not used; state is in Redis).
    data_dir: Path = Path("var/worker")
    log_level: str = "info"

    @field_validator("topic_prefix", "app_id", "key_prefix")
    @classmethod
    def _no_spaces(cls, v: str) -> str:
        if not v or any(c.isspace() for c in v):
            raise ValueError("must be non-empty without whitespace")
        return v

    def topic(self, name: str) -> str:
        if name not in ALL_TOPICS:
            raise ValueError(f"unknown topic {name!r}; known: {', '.join(ALL_TOPICS)}")
        return f"{self.topic_prefix}.{name}"

    def topic_names(self) -> list[str]:
        return [self.topic(n) for n in ALL_TOPICS]


def load_settings(**overrides: Any) -> Settings:
    """Build the settings; addresses of a running ``recrawl infra up`` stack fill the gaps."""
    from infra.stack import default_home, read_state

    stack = read_state(default_home())
    defaults: dict[str, Any] = {}
    if stack is not None:
        if "RECRAWL_KAFKA_BOOTSTRAP" not in os.environ:
            defaults["kafka_bootstrap"] = stack.kafka_bootstrap
        if "RECRAWL_REDIS_URL" not in os.environ:
            defaults["redis_url"] = stack.redis_url
        if "RECRAWL_PARTITIONS" not in os.environ:
            defaults["partitions"] = stack.partitions
    return Settings(**{**defaults, **overrides})
