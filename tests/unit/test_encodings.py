"""db.encodings asks the database's encoding once per backend (a backend serves one database,
whose encoding is fixed): a second run of the same process sends no query for it."""
from __future__ import annotations

import pytest

from plpy_anon.db import encodings


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
        return [{"a": self.encoding == "SQL_ASCII"}]


@pytest.mark.parametrize("encoding", ["SQL_ASCII", "UTF8"])
def test_the_encoding_is_asked_once_per_backend(monkeypatch, encoding):
    monkeypatch.setattr(encodings, "_sql_ascii", None)
    backend = CountingPlpy(encoding)
    answers = [encodings.sql_ascii(backend) for _ in range(3)]
    assert answers == [encoding == "SQL_ASCII"] * 3
    assert backend.executed == 1
