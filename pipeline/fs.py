"""File access for the pipeline: plain local paths, or any filesystem pyarrow can open.

Spark writes the Parquet tables itself (through Hadoop's filesystems), but the log segments are
read by Python code on the executors and the report is written by the driver, so both go
through this module. A path without a scheme (or ``file://``) uses the ``os`` module directly;
``s3://``, ``gs://``, ``hdfs://``, ... go through ``pyarrow.fs`` (``s3a://``/``s3n://``, the
Hadoop spellings, are mapped to ``s3://``). HDFS through pyarrow needs libhdfs (``HADOOP_HOME``,
``CLASSPATH``) on every executor, as pyarrow documents.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlparse

__all__ = ["Entry", "RandomAccess", "is_local", "join", "list_dir", "open_read", "write_bytes"]


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    is_dir: bool
    size: int


class RandomAccess(Protocol):
    def read_at(self, position: int, size: int) -> bytes: ...

    def size(self) -> int: ...

    def close(self) -> None: ...


def is_local(uri: str) -> bool:
    scheme = urlparse(uri).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def _local_path(uri: str) -> str:
    return urlparse(uri).path if uri.startswith("file:") else uri


def join(base: str, *names: str) -> str:
    if is_local(base) and not base.startswith("file:"):
        return os.path.join(base, *names)
    return posixpath.join(base, *names)


def _arrow_fs(uri: str) -> tuple[Any, str]:
    from pyarrow import fs as pafs

    parsed = urlparse(uri)
    if parsed.scheme in ("s3a", "s3n"):
        uri = "s3" + uri[len(parsed.scheme) :]
    filesystem, path = pafs.FileSystem.from_uri(uri)
    return filesystem, path


def list_dir(uri: str) -> list[Entry]:
    """The entries of a directory (FileNotFoundError if it does not exist)."""
    if is_local(uri):
        out = []
        with os.scandir(_local_path(uri)) as it:
            for e in it:
                is_dir = e.is_dir()
                out.append(Entry(e.name, is_dir, 0 if is_dir else e.stat().st_size))
        return out
    from pyarrow import fs as pafs

    filesystem, path = _arrow_fs(uri)
    infos = filesystem.get_file_info(pafs.FileSelector(path, allow_not_found=False))
    return [
        Entry(posixpath.basename(i.path), i.type == pafs.FileType.Directory, int(i.size or 0))
        for i in infos
    ]


class _LocalFile:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDONLY)

    def read_at(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        os.close(self._fd)


class _ArrowFile:
    def __init__(self, uri: str) -> None:
        filesystem, path = _arrow_fs(uri)
        self._f = filesystem.open_input_file(path)

    def read_at(self, position: int, size: int) -> bytes:
        remaining = max(0, min(size, self._f.size() - position))
        return bytes(self._f.read_at(remaining, position)) if remaining else b""

    def size(self) -> int:
        return int(self._f.size())

    def close(self) -> None:
        self._f.close()


def open_read(uri: str) -> RandomAccess:
    """Open a file for positional reads (FileNotFoundError if it is missing)."""
    if is_local(uri):
        return _LocalFile(_local_path(uri))
    try:
        return _ArrowFile(uri)
    except OSError as e:
        if "not found" in str(e).lower() or "no such file" in str(e).lower():
            raise FileNotFoundError(uri) from e
        raise


def read_all(uri: str) -> bytes:
    f = open_read(uri)
    try:
        return f.read_at(0, f.size())
    finally:
        f.close()


def write_bytes(uri: str, data: bytes) -> None:
    """Create or replace a file (creating its parent directories)."""
    if is_local(uri):
        path = _local_path(uri)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return
    filesystem, path = _arrow_fs(uri)
    filesystem.create_dir(posixpath.dirname(path), recursive=True)
    with filesystem.open_output_stream(path) as out:
        out.write(data)
