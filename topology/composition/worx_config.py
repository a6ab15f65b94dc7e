"""worx.toml + WORX_* environment overrides, loaded into typed per-stage dataclasses.

(One file of ~500 lines on purpose: the file, the environment, sub-tables, moved keys,
secret masking and the source of each value go through one reading path, so that every
section is refused, masked and reported by the same rules.)

File layout::

    [kafka]
    bootstrap_servers = ""          # empty: start the embedded broker
    topic_prefix = "worx"
    [kafka.client]                  # passed untouched to librdkafka
    "security.protocol" = "SASL_SSL"
    [ingest]
    max_doc_chars = 20000

Environment: ``WORX_<SECTION>__<FIELD>=value`` overrides a field (``WORX_INGEST__STRICT=true``),
``WORX_<SECTION>__<TABLE>__<FIELD>`` one of a sub-table (``WORX_TRAINER__EXPERT__RANK=64``:
``rank`` in ``[trainer.expert]``); a setting that moved (a section's ``MOVED``) is refused,
naming its new key;
``WORX_KAFKA_CLIENT__SASL_MECHANISM=PLAIN`` sets the librdkafka key ``sasl.mechanism``
(underscores become dots); ``WORX_INGEST_SOURCE_CLIENT__SASL_PASSWORD=...`` sets
``sasl.password`` of the source cluster (``ingest.source_client``, `worx connect`) the same
way. ``WORX_CONFIG`` names the file (default ``./worx.toml``).

A refused setting is named, never echoed when its name looks secret (password, secret,
sasl, credential, or ending in token or key) or it holds client settings; a value from
the environment is named by its variable.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from experts.config import ExpertsConfig
from ingest.config import IngestConfig
from monitor.config import MonitorConfig
from router.config import RouterConfig
from trainer.config import TrainerConfig
from worx.errors import UserError, nearest
from worx.settings import setting

if typing.TYPE_CHECKING:
    from worx.web import HttpLimits


class ConfigError(UserError, ValueError):
    """A setting (file or environment) that cannot be used; the message says which."""


# librdkafka settings from the environment: variable prefix -> (section, field)
CLIENT_ROUTES = {
    "KAFKA_CLIENT__": ("kafka", "client"),
    "INGEST_SOURCE_CLIENT__": ("ingest", "source_client"),
}
# a setting whose name says it holds a secret (not ``max_tokens``: a count of tokens)
_SECRET = re.compile(r"passw|secret|sasl|credential|(^|[._])(api_)?(token|key)$", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: str = setting(
        "", help="the Kafka cluster; empty: start the embedded Tansu broker on loopback"
    )
    topic_prefix: str = setting(
        "worx", help="topics are <prefix>.docs, <prefix>.dlq, ...", range="no space, / or \\"
    )
    partitions: int = setting(
        4, help="partitions of the partitioned topics (docs, routed)", range=">= 1"
    )
    train_partitions: int = setting(
        1,
        help="partitions of <prefix>.train: at most this many trainers in one group get jobs "
        "(a trainer without a partition waits idle); made at topic creation, not changed after",
        range=">= 1",
    )
    replication_factor: int = setting(1, help="replicas of each topic made", range=">= 1")
    session_timeout_ms: int = setting(
        10_000, help="group joins take ~half of this on the embedded broker", unit="ms"
    )
    connect_timeout_s: float = setting(
        10.0,
        help="a cluster not answering by then: a one-line error",
        unit="s",
        range="> 0",
    )
    client: dict[str, str] = setting(
        default_factory=dict,
        help="raw librdkafka settings, passed untouched: the sub-table [kafka.client], or "
        "WORX_KAFKA_CLIENT__<NAME> (underscores become dots)",
    )

    def validate(self) -> None:
        if self.partitions < 1 or self.train_partitions < 1 or self.replication_factor < 1:
            raise ValueError(
                "kafka.partitions, kafka.train_partitions and kafka.replication_factor must be >= 1"
            )
        if self.connect_timeout_s <= 0:
            raise ValueError("kafka.connect_timeout_s must be > 0")
        if not self.topic_prefix or any(c in self.topic_prefix for c in " /\\"):
            raise ValueError(
                f"kafka.topic_prefix {self.topic_prefix!r} is not a valid topic prefix"
            )


@dataclasses.dataclass(frozen=True)
class ServeConfig:
    """`worx serve`'s HTTP API (section ``[serve]``; its address: ``experts.serve_host/port``)."""

    api_token: str = setting(
        "",
        help='non-empty: every request but /health needs "Authorization: Bearer <token>"; set '
        "it from the environment (WORX_SERVE__API_TOKEN), not in a file others can read",
    )
    max_body_bytes: int = setting(
        4 << 20,
        help="a larger request body is refused (413) before it is read",
        unit="bytes",
        range=">= 1024",
    )
    read_timeout_s: float = setting(
        10.0,
        help="a body not received within this: 408, connection closed",
        unit="s",
        range="> 0",
    )
    idle_timeout_s: float = setting(
        15.0,
        help="a connection without a complete request by then is closed",
        unit="s",
        range="> 0",
    )
    workers: int = setting(
        2, help="requests scored at once (torch work runs off the event loop)", range=">= 1"
    )
    queue: int = setting(
        16,
        help="requests waiting for a worker; beyond it: 503 with Retry-After",
        unit="requests",
        range=">= 0",
    )
    chars_per_token: int = setting(
        32,
        help="text past max_tokens x this is cut before it is tokenised",
        unit="chars",
        range=">= 1",
    )
    batching: bool = setting(
        True,
        help="concurrent requests share forwards: scoring texts are gathered into one padded "
        "forward, generations run as one batch that requests join and leave between decode "
        "steps (each row with its own experts); false: one request per forward, the path "
        "before batching",
    )
    batch_window_ms: float = setting(
        2.0,
        help="how long a scoring forward waits for more texts after the first arrives",
        unit="ms",
        range=">= 0",
    )
    batch_max_rows: int = setting(
        16,
        help="most texts in one scoring forward and most generations in the running batch; "
        "with batching the worker pool admits max(workers, this) requests at once",
        unit="rows",
        range=">= 1",
    )
    batch_forward_threads: int = setting(
        0,
        help="scoring forwards that run at once with batching, each on the process's torch "
        "threads / this (a forward's Python steps leave cores idle that another forward "
        "fills); 0: one per torch thread on a CPU trunk, 1 on a GPU",
        unit="threads",
        range=">= 0",
    )
    batch_max_tokens: int = setting(
        0,
        help="most padded tokens (texts x the longest) in one scoring forward with batching: "
        "past a few hundred tokens a CPU core's cost per token stops falling, so larger "
        "forwards only make requests wait; 0: 256 per core of a forward on a CPU trunk, "
        "no limit on a GPU",
        unit="tokens",
        range=">= 0",
    )
    replicas: int = setting(
        1,
        help="serve processes `worx up` starts, each on its own port, behind one front on the "
        "serve address that sends each request to a replica that answers its health check: "
        "while one restarts (it loads the trunk and every expert again) the others answer",
        range=">= 1",
    )
    allowed_hosts: tuple[str, ...] = setting(
        (),
        help="names the API is reached by besides loopback and experts.serve_host (a Host "
        'header naming anything else is refused: DNS rebinding), e.g. "serve" for other '
        "containers",
    )

    def http_limits(self) -> HttpLimits:
        from worx.web import HttpLimits  # aiohttp: only where a server is made

        return HttpLimits(
            max_body_bytes=self.max_body_bytes,
            read_timeout_s=self.read_timeout_s,
            idle_timeout_s=self.idle_timeout_s,
        )

    def validate(self) -> None:
        if self.max_body_bytes < 1024:
            raise ValueError("serve.max_body_bytes must be >= 1024")
        if min(self.read_timeout_s, self.idle_timeout_s) <= 0:
            raise ValueError("serve.read_timeout_s and serve.idle_timeout_s must be > 0")
        if self.workers < 1 or self.queue < 0:
            raise ValueError("serve.workers must be >= 1 and serve.queue >= 0")
        if self.chars_per_token < 1:
            raise ValueError("serve.chars_per_token must be >= 1")
        if self.batch_window_ms < 0 or self.batch_max_rows < 1:
            raise ValueError("serve.batch_window_ms must be >= 0 and serve.batch_max_rows >= 1")
        if self.batch_forward_threads < 0:
            raise ValueError("serve.batch_forward_threads must be >= 0")
        if self.batch_max_tokens < 0:
            raise ValueError("serve.batch_max_tokens must be >= 0")
        if self.replicas < 1:
            raise ValueError("serve.replicas must be >= 1")


@dataclasses.dataclass(frozen=True)
class WorxConfig:
    kafka: KafkaConfig = setting(default_factory=KafkaConfig, help="the cluster and its topics")
    ingest: IngestConfig = setting(
        default_factory=IngestConfig, help="ingest: files and company topics into worx.docs"
    )
    router: RouterConfig = setting(
        default_factory=RouterConfig, help="route and discover: embedding, domains, drift, jobs"
    )
    experts: ExpertsConfig = setting(
        default_factory=ExpertsConfig, help="the trunk, the expert store, the gate, serving"
    )
    serve: ServeConfig = setting(default_factory=ServeConfig, help="`worx serve`'s HTTP API")
    trainer: TrainerConfig = setting(
        default_factory=TrainerConfig, help="the training node and its recipe"
    )
    monitor: MonitorConfig = setting(
        default_factory=MonitorConfig, help="the forgetting monitor and its dashboard"
    )
    data_dir: str = setting("worx-data", help="expert store, snapshots, held-out sets, reports")


def load_config(
    path: str | os.PathLike[str] | None = None, env: typing.Mapping[str, str] | None = None
) -> WorxConfig:
    """Read ``path`` (or $WORX_CONFIG, or ./worx.toml if it exists) and apply env overrides."""
    return load_config_with_sources(path, env)[0]


@dataclasses.dataclass(frozen=True)
class Sources:
    """Where :func:`load_config_with_sources` found each setting it did not leave at default."""

    file: str | None  # the file read; None: none
    file_keys: frozenset[str]  # dotted settings the file gives (``kafka.client.sasl.mechanism``)
    variables: typing.Mapping[str, str]  # dotted setting -> the environment variable that set it

    def of(self, dotted: str) -> tuple[str, str | None]:
        """``("env", variable)``, ``("file", path)`` or ``("default", None)``: the last wins."""
        if dotted in self.variables:
            return "env", self.variables[dotted]
        if dotted in self.file_keys:
            return "file", self.file
        return "default", None


def load_config_with_sources(
    path: str | os.PathLike[str] | None = None, env: typing.Mapping[str, str] | None = None
) -> tuple[WorxConfig, Sources]:
    """:func:`load_config`, and where each setting came from (`worx config show`)."""
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    chosen = path or env.get("WORX_CONFIG")
    if chosen is None and Path("worx.toml").exists():
        chosen = "worx.toml"
    if chosen is not None:
        file = Path(chosen)
        if not file.exists():
            raise ConfigError(f"config file {file} does not exist; create it or unset WORX_CONFIG")
        try:
            raw = tomllib.loads(file.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{file} is not valid TOML: {exc}") from exc
    file_keys = frozenset(dotted_leaves(raw))
    _check_variable_names(env)
    origins = _apply_env(raw, env)
    try:
        config = build(WorxConfig, raw, "", origins)
    except ConfigError as exc:  # a validate() message quoting a secret: name its variable
        message = str(exc)
        for dotted, variable in origins.items():
            secret = env.get(variable, "")
            if _SECRET.search(dotted) and len(secret) >= 4 and secret in message:
                message = message.replace(secret, f"<the value of {variable}>")
        if message == str(exc):
            raise
        raise ConfigError(message) from None
    chosen_name = None if chosen is None else str(chosen)
    return config, Sources(file=chosen_name, file_keys=file_keys, variables=origins)


def dotted_leaves(raw: typing.Mapping[str, Any], where: str = "") -> list[str]:
    """The dotted name of every value of a parsed file that is not itself a table."""
    found = []
    for key, value in raw.items():
        dotted = f"{where}.{key}" if where else key
        found += dotted_leaves(value, dotted) if isinstance(value, dict) else [dotted]
    return found


def variable_name(dotted: str) -> str:
    """The environment variable of a dotted setting: ``trainer.expert.rank`` ->
    ``WORX_TRAINER__EXPERT__RANK``."""
    return "WORX_" + dotted.replace(".", "__").upper()


def is_secret(dotted: str, hint: Any = None) -> bool:
    """Whether a setting's value is never shown: its name looks secret, or it holds client
    settings (a librdkafka key such as ``ssl.key.pem`` holds a private key under any name)."""
    return bool(_SECRET.search(dotted)) or typing.get_origin(hint) is dict or hint is dict


# WORX_* variables that are not settings (read elsewhere; see the module docstring)
OTHER_VARIABLES = ("WORX_CONFIG", "WORX_DEBUG", "WORX_BUNDLED_DATA")


def setting_variables() -> list[str]:
    """The name of every environment variable that sets a field of :class:`WorxConfig`."""
    names = ["WORX_DATA_DIR"]
    for section in dataclasses.fields(WorxConfig):
        hint = typing.get_type_hints(WorxConfig)[section.name]
        if dataclasses.is_dataclass(hint):
            names += [variable_name(".".join(path)) for path in _leaves(hint, (section.name,))]
    return names


def _leaves(cls: type, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The path of every field of dataclass ``cls`` below ``path``, sub-tables' fields too."""
    found = []
    for f in dataclasses.fields(cls):
        hint = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(hint):
            found += _leaves(hint, (*path, f.name))
        else:
            found.append((*path, f.name))
    return found


def moved_settings() -> dict[str, str]:
    """``{old dotted setting: new dotted setting}`` of every section's ``MOVED``."""
    moved = {}
    for section in dataclasses.fields(WorxConfig):
        hint = typing.get_type_hints(WorxConfig)[section.name]
        for old, new in getattr(hint, "MOVED", {}).items():
            moved[f"{section.name}.{old}"] = f"{section.name}.{new}"
    return moved


def _moved(old: str, new: str, variable: str | None = None) -> ConfigError:
    """``trainer.expert_kind moved: use [trainer.expert] kind`` (and the new variable)."""
    table, _, key = new.rpartition(".")
    if variable is None:
        return ConfigError(f"{old} moved: use [{table}] {key}")
    renamed = variable_name(new)
    return ConfigError(f"{old} moved: use {renamed} ([{table}] {key}) instead of {variable}")


def _check_variable_names(env: typing.Mapping[str, str]) -> None:
    """Refuse a WORX_ variable that names no setting but looks like one (a typo), naming
    it and the nearest valid variable; unrelated WORX_ variables are left alone."""
    valid = setting_variables()
    known = set(valid) | set(OTHER_VARIABLES)
    moved = moved_settings()
    moved_variables = {variable_name(old): old for old in moved}
    for key in sorted(env):
        if key in moved_variables:
            old = moved_variables[key]
            raise _moved(old, moved[old], key)
        if not key.startswith("WORX_") or key in known:
            continue
        if any(key[len("WORX_") :].startswith(route) for route in CLIENT_ROUTES):
            continue
        close = nearest(key, [*valid, *OTHER_VARIABLES], cutoff=0.85 if "__" not in key else 0.75)
        client = {
            "WORX_KAFKA__": "WORX_KAFKA_CLIENT__",
            "WORX_INGEST__": "WORX_INGEST_SOURCE_CLIENT__",
        }
        section = next((s for s in client if key.startswith(s)), None)
        if close is None and section is not None:  # most likely a librdkafka setting
            close = f"{client[section]}{key[len(section) :]} (a librdkafka setting)"
        if close is not None:
            hint = f"did you mean {close}? (rename or unset {key})"
        elif "__" in key:
            sections = sorted({n.split("__")[0][5:].lower() for n in valid if "__" in n})
            hint = f"settings are WORX_<SECTION>__<FIELD>, sections {', '.join(sections)}"
        else:
            continue  # not meant as a setting (another tool's variable)
        raise ConfigError(f"environment variable {key} names no worx setting", hint)


def _apply_env(raw: dict[str, Any], env: typing.Mapping[str, str]) -> dict[str, str]:
    """Apply the WORX_* overrides to ``raw``; return ``{dotted setting: variable name}``."""
    origins: dict[str, str] = {}
    for key, value in env.items():
        if not key.startswith("WORX_") or key == "WORX_CONFIG":
            continue
        rest = key[len("WORX_") :]
        route = next((r for r in CLIENT_ROUTES if rest.startswith(r)), None)
        if route is not None:
            section, field = CLIENT_ROUTES[route]
            setting = rest[len(route) :].lower().replace("_", ".")
            raw.setdefault(section, {}).setdefault(field, {})[setting] = value
            origins[f"{section}.{field}.{setting}"] = key
        elif "__" in rest:
            *tables, field = rest.lower().split("__")
            table = raw
            for depth, name in enumerate(tables):
                table = table.setdefault(name, {})
                if not isinstance(table, dict):
                    where = ".".join(tables[: depth + 1])
                    raise ConfigError(
                        f"{key} sets a field of [{where}], which the file gives as a "
                        f"{type(table).__name__}, not a table"
                    )
            table[field] = value
            origins[".".join([*tables, field])] = key
        elif rest.lower() == "data_dir":
            raw["data_dir"] = value
            origins["data_dir"] = key
    return origins


def _origin(dotted: str, origins: typing.Mapping[str, str]) -> str:
    return f" (from {origins[dotted]} in the environment)" if dotted in origins else ""


def _shown(value: Any, dotted: str, hint: Any, origins: typing.Mapping[str, str]) -> str:
    """How a refused value appears in an error: never itself where it may be a secret."""
    if is_secret(dotted, hint):
        where = f"in {origins[dotted]} in the environment" if dotted in origins else "given"
        return f"a {type(value).__name__} {where} (value not shown: it may be a secret)"
    return f"{value!r}{_origin(dotted, origins)}"


def build(cls: type, raw: Any, where: str, origins: typing.Mapping[str, str] | None = None) -> Any:
    """Instantiate dataclass ``cls`` from ``raw``, checking names and types, then ``validate()``.

    ``origins`` maps a dotted setting to the environment variable it came from (errors
    name the variable).
    """
    origins = origins or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"[{where or 'root'}] should be a table, got {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    moved = getattr(cls, "MOVED", {})
    for name in sorted(set(raw) & set(moved)):
        dotted = f"{where}.{name}" if where else name
        new = f"{where}.{moved[name]}" if where else moved[name]
        raise _moved(dotted, new, origins.get(dotted))
    unknown = set(raw) - set(fields)
    if unknown:
        dotted = [f"{where}.{name}" if where else name for name in sorted(unknown)]
        variables = sorted(origins[d] for d in dotted if d in origins)
        hint = f" (from {', '.join(variables)} in the environment)" if variables else ""
        if where in ("kafka", "ingest") and variables:
            hint += (
                "; librdkafka settings go through WORX_KAFKA_CLIENT__<NAME> "
                "or WORX_INGEST_SOURCE_CLIENT__<NAME>"
            )
        raise ConfigError(
            f"unknown setting(s) {sorted(unknown)} in [{where or 'root'}]{hint}; "
            f"known: {sorted(fields)}"
        )
    hints = typing.get_type_hints(cls)
    values = {}
    for name, value in raw.items():
        dotted = f"{where}.{name}" if where else name
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            values[name] = build(hint, value, dotted, origins)
        else:
            values[name] = _coerce(value, hint, dotted, origins)
    try:
        obj = cls(**values)  # a dataclass may check itself as it is made (ExpertConfig)
    except ValueError as exc:
        raise ConfigError(f"invalid configuration: [{where or 'root'}] {exc}") from exc
    validate = getattr(obj, "validate", None)
    if validate is not None:
        try:
            validate()
        except ValueError as exc:
            raise ConfigError(f"invalid configuration: {exc}") from exc
    return obj


def _coerce(
    value: Any, hint: Any, where: str, origins: typing.Mapping[str, str] | None = None
) -> Any:
    """Convert TOML or environment-string values to ``hint``; raise ConfigError if impossible."""
    origins = origins or {}
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        errors = []
        for arg in typing.get_args(hint):
            if arg is type(None) and value in (None, "", "none", "None"):
                return None
            try:
                return _coerce(value, arg, where, origins)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError("; ".join(errors))
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in (
            "1",
            "true",
            "yes",
            "on",
            "0",
            "false",
            "no",
            "off",
        ):
            return value.lower() in ("1", "true", "yes", "on")
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif hint is str:
        if isinstance(value, str):
            return value
    elif origin is tuple:
        items = value.split(",") if isinstance(value, str) else value
        if isinstance(items, list | tuple):
            (item_hint, *_rest) = typing.get_args(hint) or (Any,)
            return tuple(
                _coerce(item.strip() if isinstance(item, str) else item, item_hint, where, origins)
                for item in items
                if not (isinstance(item, str) and not item.strip())
            )
    elif origin is dict:
        if isinstance(value, dict):
            return {str(k): str(v) if not isinstance(v, str) else v for k, v in value.items()}
    elif hint is Any:
        return value
    shown = _shown(value, where, hint, origins)
    raise ConfigError(f"{where} should be {getattr(hint, '__name__', hint)}, got {shown}")
