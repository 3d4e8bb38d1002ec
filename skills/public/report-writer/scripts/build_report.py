#!/usr/bin/env python3
"""Validate a report outline (JSON) and render it as Markdown.

Usage: build_report.py OUTLINE.json --out PATH [--date YYYY-MM-DD]
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path


class OutlineError(ValueError):
    pass


def _text(value: object, where: str, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise OutlineError(f"{where} must be a non-empty string")
    return value.strip()


def validate(outline: object) -> dict:
    if not isinstance(outline, dict):
        raise OutlineError("the outline must be a JSON object")
    result: dict = {
        "title": _text(outline.get("title"), "title"),
        "summary": _text(outline.get("summary"), "summary"),
        "author": _text(outline.get("author"), "author", required=False),
        "sections": [],
        "sources": [],
    }
    sections = outline.get("sections")
    if not isinstance(sections, list) or not sections:
        raise OutlineError("sections must be a non-empty list")
    for index, section in enumerate(sections, 1):
        where = f"sections[{index}]"
        if not isinstance(section, dict):
            raise OutlineError(f"{where} must be an object")
        body = _text(section.get("body"), f"{where}.body", required=False)
        bullets = section.get("bullets") or []
        if not isinstance(bullets, list) or not all(isinstance(b, str) for b in bullets):
            raise OutlineError(f"{where}.bullets must be a list of strings")
        if not body and not bullets:
            raise OutlineError(f"{where} needs a body or bullets")
        result["sections"].append(
            {
                "heading": _text(section.get("heading"), f"{where}.heading"),
                "body": body,
                "bullets": bullets,
            }
        )
    sources = outline.get("sources") or []
    if not isinstance(sources, list) or not all(isinstance(s, str) and s.strip() for s in sources):
        raise OutlineError("sources must be a list of strings")
    result["sources"] = [s.strip() for s in sources]
    return result


def anchor(heading: str) -> str:
    return re.sub(r"[^a-z0-9 -]", "", heading.lower()).strip().replace(" ", "-")


def render(report: dict, date: str) -> str:
    lines = [f"# {report['title']}", ""]
    byline = f"*{date}*" + (f" · {report['author']}" if report["author"] else "")
    lines += [byline, "", "## Executive summary", "", report["summary"], "", "## Contents", ""]
    for number, section in enumerate(report["sections"], 1):
        heading = f"{number}. {section['heading']}"
        lines.append(f"- [{heading}](#{anchor(heading)})")
    if report["sources"]:
        lines.append("- [Sources](#sources)")
    for number, section in enumerate(report["sections"], 1):
        lines += ["", f"## {number}. {section['heading']}", ""]
        if section["body"]:
            lines += [section["body"], ""]
        lines += [f"- {bullet}" for bullet in section["bullets"]]
    if report["sources"]:
        lines += ["", "## Sources", ""]
        lines += [f"{i}. {source}" for i, source in enumerate(report["sources"], 1)]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("outline", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    args = parser.parse_args(argv)
    try:
        report = validate(json.loads(args.outline.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError, OutlineError) as exc:
        print(f"build_report: invalid outline {args.outline}: {exc}", file=sys.stderr)
        return 2
    text = render(report, args.date)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(text.split())} words, {len(report['sections'])} sections)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
