#!/usr/bin/env python3
# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
"""Summarizes a CTest JUnit report (ctest --output-junit FILE) honestly.

  python3 scripts/ctest-summary.py FILE.xml [--list]

CTest's own "100% tests passed out of 32" counts skipped tests as passed. This prints
"N passed, M failed, K skipped", then every skipped test with the reason its output gave (the
WS_SKIP / "SKIPPED:" message), and every failed one. --list prints every test with its result.
Exit code: 1 when a test failed or the report has no tests, else 0.
"""
import sys
import xml.etree.ElementTree as ET


def skip_reason(out: str) -> str:
    lines = [l.strip() for l in out.splitlines()]
    for i, l in enumerate(lines):
        if "SKIPPED" in l:
            # Catch2 v3: "file:line: SKIPPED:" / "explicitly with message:" / "  <reason>";
            # our GPU main: "SKIPPED: no CUDA device (...)".
            tail = l.split("SKIPPED", 1)[1].lstrip(":").strip()
            if tail:
                return tail
            for nxt in lines[i + 1:i + 6]:
                if nxt and not nxt.startswith("explicitly with message"):
                    return nxt
    for l in lines:  # Catch2 v2's WS_SKIP is a WARN: "warning:" then the message
        if l.startswith("needs ") or "not available" in l:
            return l
    return "(no reason in the test's output)"


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    root = ET.parse(sys.argv[1]).getroot()
    cases = root.iter("testcase")
    passed, failed, skipped = [], [], []
    for c in cases:
        name = c.get("name", "?")
        out = "".join(e.text or "" for e in c.iter("system-out"))
        if c.find("skipped") is not None or c.get("status") == "notrun":
            skipped.append((name, skip_reason(out)))
        elif c.find("failure") is not None or c.find("error") is not None or c.get("status") == "fail":
            failed.append(name)
        else:
            passed.append(name)
    if "--list" in sys.argv:
        for n in passed:
            print(f"  passed   {n}")
        for n in failed:
            print(f"  FAILED   {n}")
        for n, _ in skipped:
            print(f"  skipped  {n}")
    for n, why in skipped:
        print(f"skipped: {n}: {why}")
    for n in failed:
        print(f"FAILED: {n}")
    total = len(passed) + len(failed) + len(skipped)
    print(f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped")
    return 1 if failed or total == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
