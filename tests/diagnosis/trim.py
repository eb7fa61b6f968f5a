"""Keep what diagnosis reads of a recorded run dir as a test fixture (tests/diagnosis/data/NAME/):
python tests/diagnosis/trim.py reports/<run-id> NAME. Drops etcd data, the HTML, service logs."""
import json
import shutil
import sys
from pathlib import Path

KEEP = ("result.json", "harness.json", "scenario.yaml", "faults.jsonl", "checkpoints.json", "exits.json",
        "inventories/*.json", "logs/node-*.log", "events/*.jsonl")


def trim(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    for pattern in KEEP:
        for f in src.glob(pattern):
            out = dst / f.relative_to(src)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, out)
    result = dst / "result.json"
    if result.is_file():   # the step timeline is re-derived from events/ by the report; diagnosis does not read it
        r = json.loads(result.read_text())
        r.pop("timeline", None)
        result.write_text(json.dumps(r, indent=1))


if __name__ == "__main__":
    trim(Path(sys.argv[1]), Path(__file__).parent / "data" / sys.argv[2])
