"""Apache Kafka 3.9 in KRaft mode (one node, broker and controller) as a plain JVM process.

The jars come from Maven Central: ``infra/kafka/pom.xml`` depends on
``org.apache.kafka:kafka_2.13``; ``mvn dependency:copy-dependencies`` copies it with its
runtime dependencies into a git-ignored cache, once.  The launcher formats the log
directory, starts ``kafka.Kafka`` on 127.0.0.1, waits until a metadata request succeeds
and creates the project's topics.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from infra.errors import MissingToolError, ServiceStartError
from infra.proc import free_port, port_open, spawn, tail

POM = Path(__file__).with_name("kafka") / "pom.xml"
KAFKA_VERSION = "3.9.1"
HEAP = os.environ.get("RECRAWL_KAFKA_HEAP", "-Xms256m -Xmx768m")


def _require(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise MissingToolError(
            f"'{tool}' is not on PATH; install it (Debian: apt-get install -y {package})"
        )
    return path


def ensure_jars(cache_dir: Path) -> Path:
    """Return a folder holding Kafka's broker jars, fetching them with Maven if needed.

    The folder is ``cache_dir/kafka-<version>/lib``; a ``.complete`` marker is written only
    after Maven succeeded, so an interrupted fetch is redone, never half-used.
    """
    lib = cache_dir / f"kafka-{KAFKA_VERSION}" / "lib"
    if (lib / ".complete").exists():
        return lib
    mvn = _require("mvn", "maven")
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="kafka-lib-", dir=cache_dir))
    cmd = [
        mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
        "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
        f"-Dkafka.version={KAFKA_VERSION}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not list(staging.glob("kafka_2.13-*.jar")):
        shutil.rmtree(staging, ignore_errors=True)
        raise MissingToolError(
            "Maven could not fetch Kafka's jars from Maven Central:\n"
            + (proc.stdout + proc.stderr)[-3000:]
        )
    (staging / ".complete").write_text(KAFKA_VERSION + "\n")
    if lib.exists() and not (lib / ".complete").exists():
        shutil.rmtree(lib)  # an interrupted fetch of an older launcher
    lib.parent.mkdir(parents=True, exist_ok=True)
    try:
        staging.rename(lib)
    except OSError:  # another process (the cache is per user) finished first: use its copy
        shutil.rmtree(staging, ignore_errors=True)
        if not (lib / ".complete").exists():
            raise
    return lib


#: ``message.max.bytes``: the largest record batch the broker takes (Kafka's default, set
#: explicitly; the worker's producers are allowed as much: ``Settings.kafka_max_message_bytes``)
MESSAGE_MAX_BYTES = 1_048_588


LOG4J = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File={log}
log4j.appender.file.MaxFileSize=20MB
log4j.appender.file.MaxBackupIndex=2
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=INFO
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
"""


@dataclass(frozen=True)
class KafkaConfig:
    data_dir: Path
    port: int
    controller_port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def properties(self) -> str:
        return "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
                f"CONTROLLER://127.0.0.1:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={self.data_dir / 'kraft-logs'}",
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=8",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                # a topic exists only once created with recrawl's partition count
                # (``create_topics``): one deleted under a running client is not created
                # again by a fetch or a send with the broker's default of 1 partition
                "auto.create.topics.enable=false",
                f"message.max.bytes={MESSAGE_MAX_BYTES}",
                "num.partitions=1",
                "log.retention.hours=24",
                "log.segment.bytes=67108864",
                "",
            ]
        )


def new_cluster_id() -> str:
    """A random KRaft cluster id: 16 random bytes, URL-safe base64 without padding (the
    form ``kafka-storage random-uuid`` prints), never starting with ``-``: the format
    command's parser reads such an id as an option, so one CI run in 64 failed with
    "expected one argument" (Kafka's own ``Uuid.randomUuid`` redraws those since
    KAFKA-13741, apache/kafka#11901; we also pass ``--cluster-id=ID``)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def start(
    cache_dir: Path,
    data_dir: Path,
    *,
    port: int | None = None,
    controller_port: int | None = None,
    tie_to_parent: bool = False,
) -> tuple[subprocess.Popen[bytes], KafkaConfig]:
    """Format ``data_dir`` (if new) and start the broker; returns once the JVM is spawned.

    Call :func:`wait_ready` next.
    """
    java = _require("java", "openjdk-17-jre-headless")
    lib = ensure_jars(cache_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    cfg = KafkaConfig(data_dir, port or free_port(), controller_port or free_port())
    props = data_dir / "server.properties"
    props.write_text(cfg.properties())
    log_dir = data_dir / "logs"
    log_dir.mkdir(exist_ok=True)
    (data_dir / "log4j.properties").write_text(LOG4J.format(log=log_dir / "server.log"))
    classpath = f"{lib}/*"
    jvm = [
        java, *HEAP.split(), "-XX:+UseG1GC", "-Djava.awt.headless=true",
        f"-Dlog4j.configuration=file:{data_dir / 'log4j.properties'}",
        f"-Dkafka.logs.dir={log_dir}", "-cp", classpath,
    ]  # fmt: skip
    if not (data_dir / "kraft-logs" / "meta.properties").exists():
        cluster_id = new_cluster_id()
        fmt = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
             "-c", str(props)],
            capture_output=True,
            text=True,
            check=False,
        )
        if fmt.returncode != 0:
            raise ServiceStartError(f"kafka storage format failed:\n{fmt.stdout}{fmt.stderr}")
    proc = spawn(
        [*jvm, "kafka.Kafka", str(props)],
        log_dir / "stdout.log",
        tie_to_parent=tie_to_parent,
    )
    return proc, cfg


async def _metadata_ok(bootstrap: str) -> bool:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
    try:
        await admin.start()
        await admin.list_topics()
        return True
    except Exception:
        return False
    finally:
        await admin.close()


def wait_ready(proc: subprocess.Popen[bytes], cfg: KafkaConfig, timeout_s: float = 90.0) -> None:
    """Block until a metadata request to the broker succeeds."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServiceStartError(
                f"kafka exited with {proc.returncode}; log {cfg.data_dir / 'logs'}:\n"
                + tail(cfg.data_dir / "logs" / "server.log")
            )
        if port_open("127.0.0.1", cfg.port) and asyncio.run(_metadata_ok(cfg.bootstrap)):
            return
        time.sleep(0.5)
    raise ServiceStartError(
        f"kafka at {cfg.bootstrap} did not answer a metadata request within {timeout_s:.0f}s; "
        f"see {cfg.data_dir / 'logs' / 'server.log'}"
    )


#: the topics whose records are the catalogue (``.pages``, ``.hosts``, ``.control``): kept
#: forever, so that a worker can rebuild a lost Redis from them (streams/worker/recovery.py);
#: the others keep the broker's retention (docs/reliability.md, "What is durable where")
CATALOGUE_TOPICS = ("pages", "hosts", "control")


def topic_config(name: str) -> dict[str, str]:
    """The configuration a recrawl topic is created with."""
    return {"retention.ms": "-1"} if name.rsplit(".", 1)[-1] in CATALOGUE_TOPICS else {}


async def create_topics(bootstrap: str, names: Iterable[str], partitions: int) -> list[str]:
    """Create the topics that do not exist yet (all with ``partitions`` partitions).

    Returns the names created.  An existing topic with another partition count is an error:
    every recrawl topic is keyed by host and must have the same partition count.
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    wanted = list(dict.fromkeys(names))
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        new = [n for n in wanted if n not in existing]
        if new:
            await admin.create_topics([NewTopic(n, partitions, 1, topic_configs=topic_config(n))
                                       for n in new])
        for desc in await admin.describe_topics([n for n in wanted if n in existing]):
            count = len(desc.get("partitions", []))
            if count and count != partitions:
                raise ServiceStartError(
                    f"topic {desc['topic']} has {count} partitions, expected {partitions}; "
                    "all recrawl topics must share one partition count (delete and recreate it)"
                )
        return new
    finally:
        await admin.close()
