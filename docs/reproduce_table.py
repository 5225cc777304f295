"""Write the table of docs/reproducing.rst: paper table or figure → command → recorded compute → results file.

Read at build time (docs/conf.py calls ``write``) from the pages the benchmark report generates,
docs/results/<paper>.md: each "## " section there names a table or figure, holds the command lines
(indented ``python``/``bash`` lines) and names its ``results/<experiment>.jsonl`` files. The compute column is
the sum of the per-fit times those files record (``time_s``, ``fit_seconds``, ``fit_time``, ...; for a run
that records a timeline, its last time): what the runs took here, one thread unless the command says
otherwise, without data loading and process start-up. Scripts in benchmarks/paper/ that no page runs are
listed after the table.
"""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["scalable-ep", "alpha", "additive", "bsvm", "rmgpc", "scale"]
SUMMED = ("time_s", "fit_seconds", "fit_time", "rmgpc_time", "smgpc_time", "seconds", "wall_s")
RESULT_FILE = re.compile(r"results/([A-Za-z0-9_]+\.jsonl(?:\.gz)?)")


def _line_seconds(d: dict) -> float:
    """Seconds one results line records: summed per-fit times, plus the last time of each timeline."""
    total = 0.0
    for key, value in d.items():
        if key in SUMMED and isinstance(value, (int, float)):
            total += value
        elif key == "time" and isinstance(value, (int, float)):
            total += value
        elif key == "time" and isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
            total += max(value)                       # a timeline: the run took its last time
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            times = [v["time"] for v in value if isinstance(v.get("time"), (int, float))]
            total += max(times) if times else sum(_line_seconds(v) for v in value)
    return total


def _records(name: str):
    path = ROOT / "results" / name
    candidates = [path] if path.exists() else []
    if name.endswith(".jsonl") and (ROOT / "results" / (name + ".gz")).exists():
        candidates.insert(0, ROOT / "results" / (name + ".gz"))
    for p in candidates:
        opener = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rt", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)


def recorded_seconds(names) -> float:
    return sum(_line_seconds(r) for n in names for r in _records(n))


def _duration(seconds: float) -> str:
    if seconds <= 0:
        return "not recorded"
    if seconds < 90:
        return f"≈ {seconds:.0f} s"
    if seconds < 5400:
        return f"≈ {seconds / 60:.0f} min"
    return f"≈ {seconds / 3600:.1f} h"


def sections(page: str):
    """(paper title, section title, [command lines], [results files]) of one results page."""
    text = (ROOT / "docs" / "results" / f"{page}.md").read_text(encoding="utf-8")
    title = text.splitlines()[0].lstrip("# ").split(" — ")[0]
    for block in re.split(r"^## ", text, flags=re.M)[1:]:
        heading, _, body = block.partition("\n")
        commands = [ln.strip() for ln in body.splitlines() if re.match(r"^ {4}(python|bash) ", ln)]
        files = list(dict.fromkeys(RESULT_FILE.findall(body)))
        if commands:
            yield title, heading.strip(), commands, files


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("*", "\\*")


def table() -> str:
    """One section per paper, each with a table: table/figure, command, recorded compute, results."""
    out, used_scripts = [], set()
    for page in PAGES:
        rows = list(sections(page))
        if not rows:
            continue
        title = rows[0][0]
        out += [title, "-" * len(title), "", ".. list-table::", "   :header-rows: 1", "   :widths: 22 48 12 18",
                "   :class: sgpc-reproduce", "", "   * - Table / figure", "     - Command", "     - Recorded compute",
                "     - Results"]
        for _, heading, commands, files in rows:
            used_scripts.update(re.findall(r"benchmarks/paper/(\w+\.py)", " ".join(commands)))
            out.append(f"   * - {_cell(heading)}")
            out.append("     - .. code-block:: bash")
            out.append("")
            out.extend(f"          {c}" for c in commands)
            out.append("")
            out.append(f"     - {_duration(recorded_seconds(files))}")
            links = ", ".join(f"``{f}``" for f in files) or "—"
            out.append(f"     - :doc:`{page} <results/{page}>`; {links}")
        out.append("")
    unused = sorted(p.name for p in (ROOT / "benchmarks" / "paper").glob("*.py") if p.name not in used_scripts)
    if unused:
        out += ["", "Scripts in ``benchmarks/paper/`` that no results page runs yet: "
                + ", ".join(f"``{u}``" for u in unused) + "."]
    return "\n".join(out) + "\n"


def write(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = table()
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    print(table())
