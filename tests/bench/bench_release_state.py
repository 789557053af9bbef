"""What a stable release keeps to say which groups of each stored version still have someone in
the table (db.republication: each person's entry, the version that first held them and their
group then, and each version's step), at 1,000,000 people: the state's size per person and the
time to write the entries (:func:`~plpy_anon.db.republication.entries`) and to derive, for
every stored version, the groups holding someone (:func:`~plpy_anon.db.republication.alive_groups`).

A synthetic history without the grouping: 1,000,000 people in groups of 10, 12 refreshes each
with 2 % of the people leaving and as many joining (half into existing groups, half into new
groups of 10), 0.5 % of the groups merged into a near one; 7 % of the people held back. The
sizes are PostgreSQL's (pg_column_size of the columns as anon.release_state stores them, in a
throwaway cluster)."""
from __future__ import annotations

import hashlib
import time

import numpy as np

from plpy_anon.db.republication import State, alive_groups, entries, packed
from tests.bench.common import extension_db, markdown_table, results_dir

PEOPLE, GROUP, REFRESHES, CHURN, MERGED, HELD = 1_000_000, 10, 12, 0.02, 0.005, 0.07


def hashes(ids: np.ndarray) -> list[bytes]:
    return [hashlib.sha256(int(i).to_bytes(8, "little")).digest() for i in ids.tolist()]


def main() -> None:
    rng = np.random.default_rng(1)
    person = np.arange(PEOPLE)
    group = person // GROUP
    next_person, next_group = PEOPLE, int(group.max()) + 1
    digest = dict(zip(person.tolist(), hashes(person)))
    rows, state = [], State(np.empty(0, dtype="S32"), *(np.empty(0, dtype=np.int64),) * 3, [],
                            np.empty(0, dtype=np.int64), version=-1, entries_since=0)
    timings = []
    for version in range(REFRESHES + 1):
        if version:
            stay = rng.random(person.size) >= CHURN
            person, group = person[stay], group[stay]
            ids = np.unique(group)
            # merges: a group into its neighbour in id order (the smaller id kept)
            into = dict(zip(ids[1:][rng.random(ids.size - 1) < MERGED].tolist(), ids[:-1].tolist()))
            step = np.array([into.get(g, g) for g in ids.tolist()])
            while True:
                again = np.array([into.get(g, g) for g in step.tolist()])
                if (again == step).all():
                    break
                step = again
            group = step[np.searchsorted(ids, group)]
            rows[-1]["next_groups"] = step[np.searchsorted(ids, rows[-1]["group_ids"]).clip(0, ids.size - 1)]
            joiners = int(PEOPLE * CHURN)
            new = np.arange(next_person, next_person + joiners)
            next_person += joiners
            half = joiners // 2
            joined = np.concatenate([rng.choice(np.unique(group), half),
                                     next_group + np.arange(joiners - half) // GROUP])
            next_group += (joiners - half) // GROUP + 1
            digest.update(zip(new.tolist(), hashes(new)))
            person, group = np.concatenate([person, new]), np.concatenate([group, joined])
            present = packed([digest[p] for p in person.tolist()])
            t0 = time.perf_counter()
            alive = alive_groups(rows, state, present)
            derive = time.perf_counter() - t0
            assert all(a is not None for a in alive)
        held = rng.random(person.size) < HELD
        everyone = np.concatenate([person[~held], person[held]])
        groups = np.concatenate([group[~held], group[held]])
        t0 = time.perf_counter()
        found = entries(state, packed([digest[p] for p in everyone.tolist()]), groups)
        write = time.perf_counter() - t0
        n = int((~held).sum())
        order = np.argsort(packed([digest[p] for p in everyone[:n].tolist()]), kind="stable")
        waiting = packed([digest[p] for p in everyone[n:].tolist()])
        w_order = np.argsort(waiting, kind="stable")
        state = State(packed([digest[p] for p in everyone[:n].tolist()])[order], groups[:n][order],
                      np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), [],
                      found[2][:n][order], found[3], found[4], waiting[w_order], found[2][n:][w_order],
                      found[0], found[1])
        rows.append({"version": version, "group_ids": np.unique(group), "next_groups": None})
        if version:
            timings.append((version, derive, write))
            print(f"refresh {version}: {person.size:,} people, alive_groups {derive:.2f} s over "
                  f"{len(rows) - 1} versions, entries {write:.2f} s", flush=True)

    def text(values) -> str:
        return "{" + ",".join(map(str, np.asarray(values).tolist())) + "}"
    with extension_db() as conn:
        conn.execute("CREATE TABLE s (member_groups int4[], entries int4[], entry_versions int4[], "
                     "entry_groups int4[], waiting_persons bytea, waiting_entries int4[], "
                     "next_groups int4[])")
        conn.execute("INSERT INTO s VALUES (%s::int4[], %s::int4[], %s::int4[], %s::int4[], %s, "
                     "%s::int4[], %s::int4[])",
                     (text(state.groups), text(state.entries), text(state.entry_versions),
                      text(state.entry_groups), state.waiting.tobytes(), text(state.waiting_entries),
                      text(rows[-2]["next_groups"])))
        sizes = conn.execute("SELECT pg_column_size(member_groups), pg_column_size(entries), "
                             "pg_column_size(entry_versions) + pg_column_size(entry_groups), "
                             "pg_column_size(waiting_persons) + pg_column_size(waiting_entries), "
                             "pg_column_size(next_groups) FROM s").fetchone()
    people = state.persons.size + state.waiting.size
    names = ["member_groups (for scale)", "entries", "entry_versions + entry_groups",
             "waiting_persons + waiting_entries", "next_groups (one version)"]
    table = [[name, size, size / people] for name, size in zip(names, sizes)]
    added = sum(sizes[1:4]) + sizes[4] * REFRESHES
    print(f"state of {people:,} people ({state.entry_versions.size:,} distinct entries): "
          + "; ".join(f"{name} {size:,} B ({size / people:.2f} B/person)" for name, size in zip(names, sizes)),
          flush=True)
    print(f"added by the entries and {REFRESHES} steps: {added:,} B, {added / people:.2f} B/person; "
          f"median per refresh: alive_groups {np.median([t[1] for t in timings]):.2f} s, "
          f"entries {np.median([t[2] for t in timings]):.2f} s", flush=True)
    out = results_dir() / "release_state.md"
    out.write_text("# The stable mode's entries at 1,000,000 people\n\n"
                   + markdown_table(["column", "bytes", "bytes per person"], table) + "\n")
    print(f"wrote {out}")
