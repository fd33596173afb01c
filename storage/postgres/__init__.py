"""The PostgreSQL engine: the storage interface (``storage.engine``) over one database."""
