"""db.encodings asks the database's encoding once per backend (a backend serves one database,
whose encoding is fixed): later runs of the same process, and the reader's and the class
writer's questions, send no query for it."""
from __future__ import annotations

import pytest

from plpy_anon.db import encodings, reader, stored_classes


class CountingPlpy:
    """What ``sqltext.run`` calls of plpy, answering the encoding query, counting executions."""

    def __init__(self, encoding: str):
        self.encoding = encoding
        self.executed = 0

    def prepare(self, query, types):
        assert "server_encoding" in query
        return query

    def execute(self, plan, args):
        self.executed += 1
        return [{"e": self.encoding}]


@pytest.mark.parametrize("encoding", ["SQL_ASCII", "UTF8", "LATIN1"])
def test_the_encoding_is_asked_once_per_backend(monkeypatch, encoding):
    monkeypatch.setattr(encodings, "_server_encoding", None)
    backend = CountingPlpy(encoding)
    for _ in range(3):
        assert encodings.sql_ascii(backend) == (encoding == "SQL_ASCII")
        assert reader.server_is_utf8(backend) == (encoding == "UTF8")
        assert stored_classes.reads_exactly(backend, []) == (encoding != "SQL_ASCII")
    assert backend.executed == 1
