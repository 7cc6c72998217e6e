"""``meta.properties``: which cluster and node a log directory belongs to (Kafka's ``MetaProperties``).

Written as Kafka's KRaft version 1 file (``version=1``, ``node.id``, ``cluster.id``); a version-0 file
(``broker.id``) is read too. Invariants: a directory belongs to one cluster and one node for its whole
life; :func:`ensure_meta_properties` refuses a directory of another cluster or node rather than mixing
data. The file is replaced atomically. No timestamp comment is written (no wall clock below the server).
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from pathlib import Path

from tidelog.storage.checkpoint import atomic_write
from tidelog.storage.errors import InconsistentClusterIdError, InconsistentNodeIdError, LogDirError
from tidelog.storage.layout import META_PROPERTIES_FILE

__all__ = [
    "MetaProperties",
    "ensure_meta_properties",
    "new_cluster_id",
    "read_meta_properties",
    "write_meta_properties",
]


@dataclass(frozen=True, slots=True)
class MetaProperties:
    version: int
    node_id: int
    cluster_id: str | None
    directory_id: str | None = None


def new_cluster_id() -> str:
    """A fresh cluster id in Kafka's form: a random UUID, base64url without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


def _parse_properties(text: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, _, value = line.partition(":")
        props[key.strip()] = value.strip()
    return props


def read_meta_properties(log_dir: Path) -> MetaProperties | None:
    """The directory's meta.properties, None if it has none; :class:`LogDirError` if unreadable."""
    path = log_dir / META_PROPERTIES_FILE
    try:
        props = _parse_properties(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise LogDirError(f"cannot read {path}: {exc}") from exc
    try:
        version = int(props["version"])
        node = props.get("node.id", props.get("broker.id"))
        if node is None:
            raise KeyError("node.id")
        return MetaProperties(version, int(node), props.get("cluster.id"), props.get("directory.id"))
    except (KeyError, ValueError) as exc:
        raise LogDirError(f"malformed {path}: {exc}") from None


def write_meta_properties(log_dir: Path, meta: MetaProperties) -> None:
    lines = ["#", "#Written by tidelog", f"version={meta.version}", f"node.id={meta.node_id}"]
    if meta.cluster_id is not None:
        lines.append(f"cluster.id={meta.cluster_id}")
    if meta.directory_id is not None:
        lines.append(f"directory.id={meta.directory_id}")
    atomic_write(log_dir / META_PROPERTIES_FILE, ("\n".join(lines) + "\n").encode("utf-8"))


def ensure_meta_properties(log_dir: Path, *, node_id: int, cluster_id: str) -> MetaProperties:
    """Check the directory's meta.properties against this node and cluster, writing it if absent."""
    existing = read_meta_properties(log_dir)
    if existing is None:
        meta = MetaProperties(1, node_id, cluster_id)
        write_meta_properties(log_dir, meta)
        return meta
    path = log_dir / META_PROPERTIES_FILE
    if existing.cluster_id is not None and existing.cluster_id != cluster_id:
        raise InconsistentClusterIdError(
            f"{path}: the log dir belongs to cluster {existing.cluster_id}, this broker to cluster {cluster_id}"
        )
    if existing.node_id != node_id:
        raise InconsistentNodeIdError(
            f"{path}: the log dir belongs to node {existing.node_id}, this broker is node {node_id}"
        )
    if existing.cluster_id is None or existing.version != 1:
        upgraded = MetaProperties(1, node_id, cluster_id, existing.directory_id)
        write_meta_properties(log_dir, upgraded)
        return upgraded
    return existing
