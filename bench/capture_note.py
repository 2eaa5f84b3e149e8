"""What capture kept from the labelled samples, as it is (issue 19's closing note).

Runs one preset as bench/capture_quality.py does and prints, per session, every entry promoted
from the transcript (full text, with its category, status and rule) and the SessionStart payload
a next-day session gets (after a daemon restart). Nothing is scored here.

    /tmp/venv/bin/python bench/capture_note.py [--preset balanced|aggressive] [--project NAME]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.capture_labels import load_all
from bench.capture_quality import PRESETS, SAMPLES, run_preset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=PRESETS, default="balanced")
    parser.add_argument("--project", action="append", help="only these projects")
    parser.add_argument("--samples", type=Path, default=SAMPLES)
    args = parser.parse_args()
    sessions = [s for s in load_all() if not args.project or s.project in args.project]
    captured, _floors = run_preset(args.preset, sessions, args.samples)
    for one in captured:
        print(f"== {one.placed.labels.project} ({args.preset})\n-- promoted entries")
        for entry in one.entries:
            source = entry.get("source", {})
            if source.get("kind") == "transcript":
                rule = source.get("rule_id")
                print(f"[{entry['category']}, {entry['status']}, {rule}] {entry['content']}")
        print(f"-- SessionStart payload after a restart\n{one.payload_later}\n")


if __name__ == "__main__":
    main()
