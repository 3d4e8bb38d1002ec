#!/usr/bin/env python3
"""Profile a CSV file with the standard library only (no pandas needed).

Usage: analyze_csv.py FILE [--delimiter D] [--group-by COL --metric COL] [--out PATH] [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

MISSING = {"", "na", "n/a", "nan", "null", "none", "-"}


def parse_number(value: str) -> float | None:
    text = value.strip().replace(",", "") if value.count(",") and "." in value else value.strip()
    if text.lower() in MISSING:
        return None
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def sniff_delimiter(sample: str) -> str:
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
    except csv.Error:
        return ","


def load(path: Path, delimiter: str | None) -> tuple[list[str], list[list[str]]]:
    text = path.read_text(encoding="utf-8-sig", errors="replace")
    if not text.strip():
        raise ValueError("the file is empty")
    delimiter = delimiter or sniff_delimiter(text[:65536])
    rows = list(csv.reader(text.splitlines(), delimiter=delimiter))
    header = [h.strip() or f"column_{i + 1}" for i, h in enumerate(rows[0])]
    body = [row for row in rows[1:] if any(cell.strip() for cell in row)]
    width = len(header)
    return header, [(row + [""] * width)[:width] for row in body]


def profile(header: list[str], rows: list[list[str]]) -> dict:
    columns = []
    for index, name in enumerate(header):
        values = [row[index] for row in rows]
        present = [v for v in values if v.strip().lower() not in MISSING]
        numbers = [n for n in (parse_number(v) for v in present) if n is not None]
        numeric = bool(present) and len(numbers) >= 0.9 * len(present)
        column: dict = {
            "name": name,
            "type": "numeric" if numeric else "text",
            "missing": len(values) - len(present),
            "distinct": len(set(present)),
        }
        if numeric and numbers:
            column.update(
                min=min(numbers),
                max=max(numbers),
                mean=statistics.fmean(numbers),
                median=statistics.median(numbers),
                stdev=statistics.stdev(numbers) if len(numbers) > 1 else 0.0,
                sum=math.fsum(numbers),
            )
        else:
            column["top"] = Counter(present).most_common(5)
        columns.append(column)
    return {"rows": len(rows), "columns": columns}


def grouped(header: list[str], rows: list[list[str]], by: str, metric: str) -> list[dict]:
    for name in (by, metric):
        if name not in header:
            raise ValueError(f"no column named {name!r}; columns: {', '.join(header)}")
    by_index, metric_index = header.index(by), header.index(metric)
    groups: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        value = parse_number(row[metric_index])
        if value is not None:
            groups[row[by_index].strip() or "(blank)"].append(value)
    result = [
        {
            by: key,
            "count": len(values),
            "sum": math.fsum(values),
            "mean": statistics.fmean(values),
        }
        for key, values in groups.items()
    ]
    return sorted(result, key=lambda item: -item["sum"])


def fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    return str(value)


def render(
    path: Path, data: dict, groups: list[dict] | None, by: str | None, metric: str | None
) -> str:
    lines = [
        f"# Profile of {path.name}",
        "",
        f"- Rows: {data['rows']}",
        f"- Columns: {len(data['columns'])}",
        "",
    ]
    lines += [
        "| column | type | missing | distinct | min | max | mean | median | stdev |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in data["columns"]:
        stats = [fmt(c.get(k, "")) for k in ("min", "max", "mean", "median", "stdev")]
        lines.append(
            f"| {c['name']} | {c['type']} | {c['missing']} | {c['distinct']} | "
            + " | ".join(stats)
            + " |"
        )
    text_columns = [c for c in data["columns"] if c["type"] == "text" and c.get("top")]
    if text_columns:
        lines += ["", "## Most common values", ""]
        for c in text_columns:
            top = ", ".join(f"{value} ({count})" for value, count in c["top"])
            lines.append(f"- **{c['name']}**: {top}")
    if groups is not None:
        lines += [
            "",
            f"## {metric} by {by}",
            "",
            f"| {by} | count | sum | mean |",
            "|---|---|---|---|",
        ]
        for g in groups:
            lines.append(f"| {g[by]} | {g['count']} | {fmt(g['sum'])} | {fmt(g['mean'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("file", type=Path)
    parser.add_argument("--delimiter")
    parser.add_argument("--group-by")
    parser.add_argument("--metric")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if bool(args.group_by) != bool(args.metric):
        parser.error("--group-by and --metric go together")
    try:
        header, rows = load(args.file, args.delimiter)
        data = profile(header, rows)
        groups = grouped(header, rows, args.group_by, args.metric) if args.group_by else None
    except (OSError, ValueError, csv.Error) as exc:
        print(f"analyze_csv: cannot analyse {args.file}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        output = json.dumps({**data, "groups": groups}, indent=2, default=str)
    else:
        output = render(args.file, data, groups, args.group_by, args.metric)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(output, encoding="utf-8")
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
