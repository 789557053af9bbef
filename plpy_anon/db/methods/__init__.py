"""The release methods, one module each, and their registry (registry.py). What several methods
share lives below them (mondrian_family.py here; generalization, publish, verify in
plpy_anon.db): no method module imports another."""
