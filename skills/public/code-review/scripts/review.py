#!/usr/bin/env python3
"""A quick static scan of a source tree: candidates for a human-quality review.

Usage: review.py PATH [--out FILE.json] [--max-function-lines N]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
from pathlib import Path

SKIP_DIRS = {
    ".git",
    "node_modules",
    ".venv",
    "venv",
    "__pycache__",
    ".mypy_cache",
    ".tox",
    "dist",
    "build",
}
TEXT_SUFFIXES = {
    ".py",
    ".js",
    ".ts",
    ".tsx",
    ".jsx",
    ".go",
    ".rb",
    ".java",
    ".sh",
    ".yaml",
    ".yml",
    ".json",
    ".toml",
    ".cfg",
    ".ini",
    ".env",
}
MAX_FILE_BYTES = 1024 * 1024
SECRET = re.compile(
    r"""(?i)(api[_-]?key|secret|token|passw(or)?d)\s*[:=]\s*['"][^'"\s]{8,}['"]|AKIA[0-9A-Z]{16}|-----BEGIN [A-Z ]*PRIVATE KEY-----"""
)
DEBUG = re.compile(r"^\s*(print\(|console\.log\(|debugger;|breakpoint\(\)|import pdb)")
TODO = re.compile(r"\b(TODO|FIXME|XXX|HACK)\b")


def finding(path: str, line: int, severity: str, rule: str, message: str) -> dict:
    return {"path": path, "line": line, "severity": severity, "rule": rule, "message": message}


def scan_python(path: str, source: str, max_lines: int) -> list[dict]:
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        return [
            finding(path, exc.lineno or 1, "high", "syntax-error", f"does not parse: {exc.msg}")
        ]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is None:
            found.append(
                finding(
                    path,
                    node.lineno,
                    "medium",
                    "bare-except",
                    "bare `except:` also catches KeyboardInterrupt/SystemExit and hides bugs",
                )
            )
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                if isinstance(default, (ast.List, ast.Dict, ast.Set)):
                    found.append(
                        finding(
                            path,
                            node.lineno,
                            "medium",
                            "mutable-default",
                            f"`{node.name}` has a mutable default argument shared between calls",
                        )
                    )
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > max_lines:
                found.append(
                    finding(
                        path,
                        node.lineno,
                        "low",
                        "long-function",
                        f"`{node.name}` is {length} lines long; consider splitting it",
                    )
                )
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"eval", "exec"}
        ):
            found.append(
                finding(
                    path,
                    node.lineno,
                    "high",
                    "eval",
                    f"`{node.func.id}` runs arbitrary code; make sure its input is trusted",
                )
            )
        elif isinstance(node, ast.Assert):
            found.append(
                finding(
                    path,
                    node.lineno,
                    "low",
                    "assert",
                    "`assert` is removed under `python -O`; do not use it to validate input",
                )
            )
    return found


def scan_text(path: str, source: str) -> list[dict]:
    found = []
    for number, line in enumerate(source.splitlines(), 1):
        if SECRET.search(line):
            found.append(
                finding(
                    path,
                    number,
                    "high",
                    "secret",
                    "looks like a hard-coded credential; load it from the environment",
                )
            )
        if DEBUG.search(line) and not path.endswith((".sh",)):
            found.append(finding(path, number, "low", "debug-output", "leftover debugging output"))
        if TODO.search(line):
            found.append(finding(path, number, "info", "todo", line.strip()[:120]))
    return found


def scan(root: Path, max_lines: int) -> tuple[list[dict], int]:
    findings: list[dict] = []
    files = 0
    targets = [root] if root.is_file() else []
    if root.is_dir():
        for current, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            targets += [Path(current) / n for n in sorted(names)]
    for file in targets:
        if (
            file.suffix not in TEXT_SUFFIXES
            or file.is_symlink()
            or file.stat().st_size > MAX_FILE_BYTES
        ):
            continue
        shown = str(file)
        source = file.read_text(encoding="utf-8", errors="replace")
        files += 1
        if file.suffix == ".py":
            findings += scan_python(shown, source, max_lines)
        findings += scan_text(shown, source)
    order = {"high": 0, "medium": 1, "low": 2, "info": 3}
    findings.sort(key=lambda f: (order[f["severity"]], f["path"], f["line"]))
    return findings, files


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--max-function-lines", type=int, default=80)
    args = parser.parse_args(argv)
    if not args.path.exists():
        print(f"review: {args.path} does not exist", file=sys.stderr)
        return 2
    findings, files = scan(args.path, args.max_function_lines)
    counts = {
        s: sum(1 for f in findings if f["severity"] == s) for s in ("high", "medium", "low", "info")
    }
    print(f"Scanned {files} files: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    for f in findings:
        print(f"{f['severity']:6} {f['path']}:{f['line']}  [{f['rule']}] {f['message']}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"files": files, "counts": counts, "findings": findings}, indent=2),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
