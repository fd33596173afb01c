"""The ``partition.metadata`` file that pins a partition directory to its topic id.

Kafka writes it in every partition directory as two lines::

    version: 0
    topic_id: <topic uuid>

where the uuid is rendered like Kafka's ``Uuid.toString``: the 16 bytes in URL-safe base64
without padding (22 characters). The broker uses it to keep topic ids stable across restarts.
This module owns only that file's format and its atomic replacement (temp file, fsync, rename,
directory fsync).
"""

from __future__ import annotations

import base64
import binascii
import uuid
from pathlib import Path

from kcoord.storage.files import write_file

PARTITION_METADATA_FILE = "partition.metadata"
VERSION = 0


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka's textual form of a topic id (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def topic_id_from_str(text: str) -> uuid.UUID:
    """Inverse of :func:`topic_id_to_str`; raises ValueError on anything but 16 encoded bytes."""
    text = text.strip()
    if len(text) != 22:
        raise ValueError(f"malformed topic id {text!r}")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"malformed topic id {text!r}") from exc
    if len(raw) != 16:
        raise ValueError(f"malformed topic id {text!r}")
    return uuid.UUID(bytes=raw)


def read_partition_metadata(directory: Path) -> uuid.UUID | None:
    """The topic id stored in ``directory``, or None if the file does not exist.

    Raises ValueError if the file exists but is not a version 0 file with a topic id.
    """
    path = Path(directory) / PARTITION_METADATA_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return parse_partition_metadata(text, str(path))


def parse_partition_metadata(text: str, where: str) -> uuid.UUID:
    """The topic id of a ``partition.metadata`` file's contents (``where`` names the file in
    errors); raises ValueError unless it is a version 0 file with a topic id."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"{where}: malformed line {line!r}")
        fields[key.strip()] = value.strip()
    if fields.get("version") != str(VERSION):
        raise ValueError(f"{where}: unsupported version {fields.get('version')!r}")
    if "topic_id" not in fields:
        raise ValueError(f"{where}: no topic_id")
    return topic_id_from_str(fields["topic_id"])


def write_partition_metadata(
    directory: Path, topic_id: uuid.UUID, *, fsync: bool = True, atomic: bool = True
) -> None:
    """(Re)write ``partition.metadata`` in ``directory``.

    ``atomic``: through a temporary file renamed into place, the directory fsynced. Without it
    the file is written directly (fsynced, the directory not): for a new directory that is
    discarded whole if anything in it is incomplete (``storage.creation``).
    """
    data = f"version: {VERSION}\ntopic_id: {topic_id_to_str(topic_id)}\n".encode("ascii")
    write_file(Path(directory) / PARTITION_METADATA_FILE, data, fsync=fsync, atomic=atomic)
