"""Re-runs the session shown in docs/trust.md on a throwaway cluster and prints psql's output.

    PLPY_ANON_DATA=../shared/data /opt/plpy_anon/venv/bin/python docs/examples/trust_session.py

Loads ARX's Adult (adult.csv, 30,162 rows) with its hierarchies, then runs SESSION through psql
with echoed statements, so the block in docs/trust.md is this script's output verbatim.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psycopg

from plpy_anon.cluster import PG_BIN, ThrowawayCluster

DATA = Path(os.environ.get("PLPY_ANON_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))

SETUP = """
CREATE TABLE adult (sex text, age int, race text, "marital-status" text, education text,
                    "native-country" text, workclass text, occupation text, "salary-class" text);
CREATE ROLE uni_role NOLOGIN;
CREATE ROLE other_analyst NOLOGIN;
SELECT anon.grant_analyst('other_analyst');
SELECT anon.add_requester('uni_research', role => 'uni_role');
"""

SESSION = """\
SELECT anon.record_interaction('uni_research', outcome => 'good') IS NOT NULL AS recorded;
SELECT anon.record_interaction('uni_research', outcome => 'good') IS NOT NULL AS recorded;
SELECT anon.record_interaction('uni_research', outcome => 'bad', recorded_at => now() - interval '1 year') IS NOT NULL AS recorded;
SELECT anon.add_recommendation('uni_research', by => 'partner_a', rating => 0.9);
SELECT * FROM anon.trust('uni_research');
SELECT anon.define_purpose('demographics', priorities => '{"age": 1, "sex": 0.9, "race": 0.8}'::jsonb);
SELECT anon.trust_view('adult', requester => 'uni_research', purpose => 'demographics', k => 5,
                       quasi_identifiers => ARRAY['sex', 'age', 'race', 'education', 'occupation'],
                       sensitive => ARRAY['salary-class']);
SELECT metrics -> 'levels' AS levels, round((metrics -> 'view_degree')::numeric, 3) AS view_degree,
       metrics -> 'cost' -> 'rows_suppressed' AS suppressed, metrics -> 'cost' -> 'rows_recoded' AS recoded,
       achieved_k, row_count
FROM anon.releases WHERE release_name = 'adult_uni_research_demographics';
SELECT age, count(*) AS rows FROM release.adult_uni_research_demographics GROUP BY age ORDER BY lower(age) LIMIT 6;
SELECT * FROM release.adult_uni_research_demographics LIMIT 3;
SELECT r AS role, has_table_privilege(r, 'release.adult_uni_research_demographics', 'SELECT') AS can_read
FROM unnest(ARRAY['uni_role', 'other_analyst']) AS r;
"""


def main() -> None:
    with ThrowawayCluster() as cluster:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION plpy_anon CASCADE")
            conn.execute(SETUP)
            lines = (DATA / "adult" / "adult.csv").read_text().splitlines()[1:]
            with conn.cursor().copy("COPY adult FROM STDIN") as copy:
                for line in lines:
                    copy.write_row(line.split(";"))
            for name in ("sex", "race", "education", "occupation"):
                csv = (DATA / "adult" / "hierarchies" / f"adult_hierarchy_{name}.csv").read_text()
                conn.execute("SELECT anon.set_hierarchy_csv('adult', %s, %s, sep => ';')", (name, csv))
        out = subprocess.run([str(PG_BIN / "psql"), dsn, "-X", "-e", "-v", "ON_ERROR_STOP=1"],
                             input=SESSION, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, check=True)
        print(out.stdout, end="")


if __name__ == "__main__":
    main()
