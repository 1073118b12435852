"""One settings object for the whole service, built once and passed explicitly.

Values come from (highest first): command-line flags (``recrawl worker --budget-per-s 20``),
the environment (``RECRAWL_`` prefix, e.g. ``RECRAWL_KAFKA_BOOTSTRAP``), a TOML file named by
``RECRAWL_CONFIG`` (keys are the settings' names: ``budget_per_s = 20``), the state file of
a stack started with ``recrawl infra up`` (its Kafka and Redis addresses), defaults.

:func:`load_settings` is the way the commands build them: a missing or unreadable config
file, a key of it that is no setting, or a value out of range is a :class:`SettingsError`
whose message is one line naming the setting; an environment name ``RECRAWL_*`` that is no
setting is warned about (the environment is shared with other programs).  The table of
every setting in ``docs/operating.md`` is generated from this model (:func:`settings_table`).
"""

from __future__ import annotations

import logging
import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from infra.kafka import MESSAGE_MAX_BYTES
from streams.errors import RecrawlError

__all__ = ["ALL_TOPICS", "INPUT_TOPICS", "KAFKA_MAX_MESSAGE_BYTES", "NOT_SETTINGS",
           "OUTPUT_TOPICS", "UNUSED_SETTINGS", "Settings", "SettingsError", "env_name",
           "load_settings", "read_config", "settings_table"]

#: Settings still accepted but no longer used (:func:`load_settings` warns when one is set).
UNUSED_SETTINGS = frozenset({"ping_dedup_window_s", "ping_dedup_max_per_host"})

#: ``RECRAWL_*`` environment names that are not settings but read elsewhere: the config
#: file, the stack's home and cache folders (:mod:`infra.stack`), Kafka's heap
#: (:mod:`infra.kafka`), and the test suite's knobs.
NOT_SETTINGS = frozenset({
    "RECRAWL_CONFIG", "RECRAWL_HOME", "RECRAWL_CACHE", "RECRAWL_KAFKA_HEAP",
    "RECRAWL_FUZZ_EVENTS", "RECRAWL_FUZZ_SEED", "RECRAWL_FUZZ_REPORT", "RECRAWL_FAULTS_JSON",
    "RECRAWL_GRACEFUL_JSON",
})

#: Logical topic names; the real name is ``f"{topic_prefix}.{name}"``.
INPUT_TOPICS = ("pages", "pings", "outcomes", "hosts", "control")
#: ``deadletter``: where an input goes (a pointer: topic, partition, offset, digests) when
#: even its reject could not be written (streams/worker/agents.py)
OUTPUT_TOPICS = ("orders", "rejects", "deadletter")
ALL_TOPICS = INPUT_TOPICS + OUTPUT_TOPICS
#: Kafka's ``message.max.bytes`` (its default): the largest record batch the broker takes;
#: infra's broker is configured with it and the worker's producers may send that much
#: (Faust's producer alone would stop at 1,000,000 bytes, below what it consumes)
KAFKA_MAX_MESSAGE_BYTES = MESSAGE_MAX_BYTES

log = logging.getLogger(__name__)


class SettingsError(RecrawlError, ValueError):
    """The settings cannot be built; the message (one line) names the setting or the file
    and says what is wrong.  Fix the flag, the environment variable or the config file."""


def env_name(name: str) -> str:
    """The environment variable of the setting ``name``."""
    return f"RECRAWL_{name.upper()}"


def _default_data_dir() -> Path:
    from infra.stack import default_home

    return default_home() / "worker"


def read_config(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The settings of the TOML config file ``path`` (default: ``$RECRAWL_CONFIG``; none:
    ``{}``).  A missing or unreadable file, one that is not TOML, or a key that is no
    setting is a :class:`SettingsError`."""
    if path is None:
        path = os.environ.get("RECRAWL_CONFIG") or None
        if path is None:
            return {}
    where = f"config file {os.fspath(path)} (RECRAWL_CONFIG)"
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise SettingsError(f"{where} does not exist") from None
    except OSError as exc:
        raise SettingsError(f"{where} cannot be read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{where} is not TOML ({exc}); write `name = value` lines, "
                            f"e.g. budget_per_s = 20") from None
    unknown = sorted(set(data) - set(Settings.model_fields))
    if unknown:
        raise SettingsError(f"{where}: unknown setting{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(unknown)} (the settings: docs/operating.md)")
    return data


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RECRAWL_", extra="ignore",
                                      use_attribute_docstrings=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """``RECRAWL_CONFIG`` (TOML) is read when settings are built, not when this module
        is imported; it ranks below the environment."""
        config = InitSettingsSource(settings_cls, init_kwargs=read_config())
        return init_settings, env_settings, config

    kafka_bootstrap: str = "127.0.0.1:9092"
    """Kafka's bootstrap address ``host:port`` (a stack of ``recrawl infra up`` is found
    without it)."""
    redis_url: str = "redis://127.0.0.1:6379/0"
    """Redis's address: ``redis://host:port/db``, or ``redis+cluster://host:port,...`` for a
    Redis Cluster."""
    connect_timeout_s: float = Field(default=10.0, gt=0.0, le=600.0)
    """How long a command, or a worker starting, tries to reach Kafka or Redis before it
    gives up with one line naming the address (exit status 3)."""
    outage_report_s: float = Field(default=10.0, gt=0.0, le=3600.0)
    """A running worker that cannot reach Redis or Kafka retries; it logs one line naming
    the address and how long it has failed every this many seconds."""
    stop_timeout_s: float = Field(default=30.0, gt=0.0, le=3600.0)
    """A worker asked to stop (SIGTERM, SIGINT) that has not stopped after this many
    seconds (Kafka unreachable: its consumer's stop waits for the broker) logs so and exits
    at once with status 1; the events it had not committed are read again by the worker that
    takes its partitions, and applying them again changes nothing."""
    topic_prefix: str = "recrawl"
    """Topics are ``<topic_prefix>.pages`` etc.; tests use a unique prefix per test."""
    partitions: int = Field(default=4, ge=1, le=1024)
    """One partition count for every topic (all keyed by host)."""
    app_id: str = "recrawl"
    """Faust application id = Kafka consumer group."""
    key_prefix: str = "rc"
    """Prefix of every Redis key (keys look like ``<key_prefix>:{host}:...``)."""
    web_enabled: bool = True
    """Serve the worker's HTTP endpoints (dashboard, probes, metrics, explain)."""
    web_host: str = "127.0.0.1"
    """Address the worker's HTTP server binds to."""
    web_port: int = Field(default=6066, ge=0, le=65535)
    """Port of the worker's HTTP server (0: none)."""
    web_allowed_hosts: str = ""
    """Comma-separated host names the HTTP endpoints answer besides the loopback names
    (``localhost``, ``127.0.0.1``, ``::1``) and ``web_host``; any other ``Host`` header gets
    421 (against DNS rebinding)."""
    data_dir: Path = Field(default_factory=_default_data_dir)
    """Where a worker keeps Faust's local data (tables are not used; state is in Redis);
    default ``<home>/worker`` (home: ``$RECRAWL_HOME`` or the per-user state folder);
    created when missing."""
    log_level: str = "info"
    """The worker's log level (debug, info, warning, error)."""

    # -- scheduler ---------------------------------------------------------------------
    budget_per_s: float = Field(default=10.0, ge=0.0)
    """Global crawl budget R (orders per second over all shards) until ``recrawl.control``
    sets one (the value in Redis wins)."""
    tick_s: float = Field(default=0.05, gt=0.0, le=1.0)
    """The scheduler's tick: orders leave in even ticks of this length (no spikes: at most
    ``R * (L + tick) + 1`` in any window ``L``).  50 ms: at R = 1000/s a 10 ms tick spent
    the worker's core on per-tick work and lost 8-11% of R (docs/benchmarks.md)."""
    order_timeout_s: float = Field(default=600.0, gt=0.0)
    """An order with no outcome after this long makes its page eligible again."""
    max_interval_s: float = Field(default=30 * 86400.0, ge=0.0)
    """The floor (paper 004 Sec. A, ``xi_i > epsilon``): a page is ordered at least this
    often whatever its crawl value (0 = no floor)."""
    t_delay_s: float = Field(default=60.0, ge=0.0)
    """App. C of paper 004: pings arriving within ``t_delay_s`` after a crawl are dropped."""
    session_timeout_s: float = Field(default=10.0, ge=6.0, le=300.0)
    """Kafka consumer-group session timeout: a killed worker's partitions move to the others
    after at most this long (Faust's default is 60 s); heartbeats every third of it."""
    ping_dedup_window_s: float = Field(default=7 * 86400.0, gt=0.0)
    """Not used since the binary page records (a duplicate is a ping whose fingerprint is
    among the last 8 in its page's record, streams/store/page_record.py); still accepted so that
    existing configurations load.  Was: the window in which a ping id counted once ..."""
    ping_dedup_max_per_host: int = Field(default=10_000, ge=1, le=10_000_000)
    """... and the most fingerprints remembered per host.  Not used either (above)."""
    max_future_s: float = Field(default=300.0, ge=0.0)
    """Timestamps more than this far in the future (worker clock) are rejected."""
    default_host_crawls_per_s: float = Field(default=1.0, gt=0.0)
    """Host capacity until ``recrawl.hosts`` says otherwise."""
    host_burst: float = Field(default=1.0, ge=1.0)
    """Largest burst of a host's token bucket (tokens)."""
    default_host_max_in_flight: int = Field(default=0, ge=0)
    """Default max in flight per host (0 = unlimited)."""
    default_change_rate_per_s: float = Field(default=1.0 / 86400.0, gt=0.0)
    """Change rate of a page without a prior or an estimate (1/day)."""
    default_source_precision: float = Field(default=0.5, gt=0.0, lt=1.0)
    """Default precision of each ping source until estimated (``beta_s = -ln(1-p)/alpha``)."""
    estimate_quantile: float = Field(default=0.5, gt=0.0, lt=1.0)
    """Crawl value uses ``alpha`` at this posterior quantile (0.5 = the estimate; higher =
    shorter, more conservative intervals while estimates converge; paper 003 Sec. 5.3)."""
    estimator_half_life_s: float = Field(default=0.0, ge=0.0)
    """Estimators forget: an interval's weight halves every this many seconds (0 = never)."""
    host_prior_min_pages: int = Field(default=20, ge=1)
    """Crawled pages a host needs before its empirical-Bayes prior sets the change rate
    ``alpha`` of its pages without their own prior rate (their posterior mean under it:
    docs/streaming.md, "Host prior"; the trace replay's default,
    ``models.estimators.host_prior.MIN_PAGES``)."""
    resplit_gain: float = Field(default=0.5, ge=0.0)
    """Gain of the budget re-split controller on log-thresholds, per turnover of the books
    (``pages / R``): a log-weight moves by ``gain`` times its log-threshold gap per turnover
    (models/decision/budget.py)."""
    forward_discoveries: bool = False
    """Forward pings for unknown pages (discoveries) to ``recrawl.pages`` as new pages."""
    decisions_per_page: int = Field(default=4, ge=0, le=32)
    """Decisions kept per page for explain."""
    batch_size: int = Field(default=5000, ge=1)
    """Batch size of the agents: the most records of one fetch handed to a handler at once
    (Faust's ``broker_max_poll_records``; ``stream.take_events`` without the batch
    consumer).  5000, not 500: the handlers' costs per batch (each group's pipeline,
    estimator and book updates on arrays) spread over more events, 1.2-1.4x the pings
    and outcomes per second end to end (docs/benchmarks.md, "Design decisions"); a small
    fetch is handed over as it is, so this only matters with a backlog."""
    fetch_partition_bytes: int = Field(default=8 * 1024**2, ge=64 * 1024, le=1024**3)
    """The most bytes of one input partition a fetch from Kafka returns (Faust's
    ``consumer_max_fetch_size``, aiokafka's ``max_partition_fetch_bytes``; theirs is 1 MiB).
    A partition is fetched again only once its buffer is drained, and with 1 MiB the worker
    waited for its next records about as long as it worked on them under a backlog: 8 MiB
    took the pings end to end from 11.6-14.2k to 24k/s at 10^5 pages, 20.7-26k/s at 10^6
    (docs/benchmarks.md, "Design decisions").  Memory: up to this much per partition with
    a backlog is held."""
    kafka_max_message_bytes: int = Field(default=KAFKA_MAX_MESSAGE_BYTES, ge=64 * 1024,
                                         le=1024**3)
    """The broker's ``message.max.bytes`` (``recrawl infra up`` sets Kafka's default,
    :data:`KAFKA_MAX_MESSAGE_BYTES`): the worker's producers send records up to it, so an
    input the broker took can be moved to its host's partition as it is."""
    orders_request_timeout_s: float = Field(default=40.0, gt=0.0, le=3600.0)
    """The orders producer's request time-out (aiokafka's ``request_timeout_ms``; its
    default, 40 s): a batch of orders the broker has not acknowledged by then is given up,
    and its orders' in-flight marks are ended so that their pages are ordered again
    (``streams/scheduler/issuing.py``, ``OrderIssuer._undelivered``)."""
    batch_wait_s: float = Field(default=0.02, gt=0.0, le=10.0)
    """How long an agent waits for its batch to fill (``take_events``' ``within``)."""
    batch_consumer: bool = True
    """The input topics' records go to the agents' handlers a fetch at a time
    (:class:`streams.worker.consumer.BatchConsumer`); off: through Faust's streams, one
    message at a time, in batches of ``batch_size`` (``take_events``)."""
    gc_freeze: bool = True
    """Keep the book out of the garbage collector's walks (freeze it after the loads and
    when a full collection is long, refreeze every 10 min: ``GcPauses`` in
    ``streams/telemetry/metrics.py``); off: the interpreter's default collector."""
    gc_gen0_threshold: int = Field(default=20_000, ge=1)
    """The collector's first threshold (``gc.set_threshold``, with ``gc_freeze``; the
    interpreter's default is 700): container allocations between two collections of the
    youngest generation.  At 700, a collection of everything not frozen came every ~100
    young ones: ~410 full collections (~11 s) while 10^6 pages were crawled once
    (``gc_full`` of ``bench_e2e.py throughput``); at 20,000, 12 (0.3-0.5 s), the RSS the
    same (docs/benchmarks.md, "Design decisions").  The worker's garbage is acyclic but for
    a few objects (reference counts free it), so collecting less often holds little."""
    malloc_mmap_threshold: int = Field(default=1024**2, ge=0, le=32 * 1024**2)
    """glibc malloc's mmap threshold for the worker (``mallopt(M_MMAP_THRESHOLD)``, and
    twice it as ``M_TRIM_THRESHOLD``, as glibc pairs them); 0: glibc's own, which rises to
    the largest block freed (up to 32 MiB) so that the fetches' buffers (up to
    ``fetch_partition_bytes`` per partition) then come from the heap and stay held.  Fixed
    at 1 MiB the worker's peak RSS at 10^6 pages was ~80 MiB lower (docs/benchmarks.md,
    "Design decisions").  Not glibc (musl, macOS): ignored."""

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


def _one_line(exc: ValidationError, flags: set[str]) -> str:
    """A pydantic error as one line per setting: ``RECRAWL_BUDGET_PER_S=abc: Input should
    be a valid number`` (``--budget-per-s`` when the value came from a flag)."""
    parts = []
    for err in exc.errors():
        name = str(err["loc"][0]) if err["loc"] else "?"
        where = (f"--{name.replace('_', '-')}" if name in flags
                 else env_name(name) if env_name(name) in os.environ else name)
        value = err.get("input")
        shown = "" if isinstance(value, dict) else f"={value!r}"
        parts.append(f"{where}{shown}: {err['msg']}")
    return "bad setting " + "; ".join(parts)


def load_settings(**overrides: Any) -> Settings:
    """Build the settings (``overrides``: the flags'); addresses of a running
    ``recrawl infra up`` stack fill the gaps.  :class:`SettingsError` names what is wrong."""
    from infra.stack import default_home, read_state

    config = read_config()
    unknown = sorted(k for k in os.environ
                     if k.startswith("RECRAWL_") and k not in NOT_SETTINGS
                     and k[len("RECRAWL_"):].lower() not in Settings.model_fields)
    if unknown:
        log.warning("ignored: %s %s no recrawl setting (the settings: docs/operating.md, "
                    "`recrawl worker --help`)", ", ".join(unknown),
                    "is" if len(unknown) == 1 else "are")
    stack = read_state(default_home())
    defaults: dict[str, Any] = {}
    if stack is not None:
        for name, value in (("kafka_bootstrap", stack.kafka_bootstrap),
                            ("redis_url", stack.redis_url), ("partitions", stack.partitions)):
            if env_name(name) not in os.environ and name not in config:
                defaults[name] = value
    try:
        settings = Settings(**{**defaults, **overrides})
    except ValidationError as exc:
        raise SettingsError(_one_line(exc, set(overrides))) from None
    unused = sorted(UNUSED_SETTINGS & settings.model_fields_set)
    if unused:  # accepted so that old configurations load, but said plainly
        log.warning(
            "%s no longer used (ping dedup keeps each page's last 8 ping fingerprints in its "
            "record since the binary page records: streams/store/page_record.py)",
            ", ".join(env_name(name) for name in unused))
    return settings


def _default_text(name: str) -> str:
    field = Settings.model_fields[name]
    if field.default_factory is not None:
        return "<home>/worker" if name == "data_dir" else "(computed)"
    v = field.default
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    return str(v) if v != "" else '""'


def settings_table() -> str:
    """The Markdown table of every setting (name in TOML, environment variable, flag of
    ``recrawl worker``, default, what it does), from the model: ``docs/operating.md``
    holds a copy that a test keeps equal."""
    rows = ["| setting (TOML key) | environment | flag | default | what it does |",
            "|---|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        doc = " ".join((field.description or "").split()).replace("|", "\\|")
        if name in UNUSED_SETTINGS:
            doc = "Not used (still accepted)."
        rows.append(f"| `{name}` | `{env_name(name)}` | `--{name.replace('_', '-')}` | "
                    f"`{_default_text(name)}` | {doc} |")
    return "\n".join(rows) + "\n"
