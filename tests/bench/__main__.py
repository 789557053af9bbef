"""``make bench``: runs every benchmark module ``tests/bench/bench_*.py`` (its ``main()``), or the
ones named: ``python -m tests.bench partition mondrian``. Benchmarks print figures and write
Markdown/PNG into bench-results/; they are not tests and assert nothing about speed."""
import importlib
import pkgutil
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    wanted = [a if a.startswith("bench_") else f"bench_{a}" for a in argv]
    unknown = set(wanted) - set(names)
    if unknown:
        print(f"unknown benchmark(s): {', '.join(sorted(unknown))}; available: {', '.join(names)}",
              file=sys.stderr)
        return 2
    for name in wanted or names:
        print(f"\n######## {name}", flush=True)
        t0 = time.perf_counter()
        importlib.import_module(f"tests.bench.{name}").main()
        print(f"######## {name} done in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
