"""The storage engine a broker runs on: the one ``storage.url`` names (the files engine in the
data directory when it names none)."""

from __future__ import annotations

from kcoord.storage.engine import StorageEngine
from kcoord.storage.file_engine import FileEngine
from kcoord.storage.files import FilePool

from ..config import Config


def open_engine(config: Config, fsync: bool) -> StorageEngine:
    """The storage engine ``storage.url`` names."""
    url = config.storage_url
    if url is not None:
        # Imported here: psycopg takes a quarter of a second to import, for brokers on files too.
        from kcoord.storage.postgres.engine import PostgresEngine

        return PostgresEngine(
            url,
            producer_expiration_ms=config["producer.id.expiration.ms"],
            recent_bytes=config["storage.recent.batches.bytes"],
        )
    return FileEngine(
        config.data_dir,
        fsync=fsync,
        index_interval_bytes=config["log.index.interval.bytes"],
        producer_expiration_ms=config["producer.id.expiration.ms"],
        # Every segment and index file of this broker shares one bounded pool of descriptors.
        pool=FilePool(config["log.max.open.files"]),
    )
