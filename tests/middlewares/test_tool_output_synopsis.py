"""Table recognition and logical-record counting (spec 000, "Table synopses")."""

from __future__ import annotations

from middlewares.tool_output_synopsis import (
    TableShape,
    count_table_records,
    describe_output,
    head_tail,
    recognize_table,
)

CSV = TableShape("csv", ",", ("a", "b"))


def test_quoted_newlines_and_blank_lines_are_not_records() -> None:
    text = 'a,b\n1,"two\nlines"\n\n2,x\n ,  \n3,"a,b"\n'
    assert count_table_records(text, CSV).records == 3


def test_header_only_and_crlf() -> None:
    assert count_table_records("a,b\n", CSV).records == 0
    assert count_table_records("a,b\r\n1,2\r\n3,4\r\n", CSV).records == 2


def test_guard_is_measured_in_utf8_bytes_incrementally() -> None:
    row = "é,é\n"  # 4 characters, 6 UTF-8 bytes
    text = "a,b\n" + row * 1000
    assert len(text) < 5_000 < len(text.encode())
    counted = count_table_records(text, CSV, byte_guard=5_000)
    assert counted.records is None
    assert "5,000-byte counting guard" in (counted.reason or "")
    assert count_table_records(text, CSV, byte_guard=10_000).records == 1000


def test_parse_errors_are_undetermined() -> None:
    bad = count_table_records('a,b\n1,"x"y\n2,3\n', CSV)
    assert bad.records is None and "could not be parsed" in (bad.reason or "")


def test_recognition_rejects_prose_and_listings() -> None:
    assert recognize_table("Hello, world. This is prose, with commas.\nAnd more, lines.\n") is None
    listing = "".join(f"-rw-r--r--\t1 root\t{i}\tfile{i}\n" for i in range(20))
    assert recognize_table(listing) is None
    assert recognize_table("a,b\n1,2\n") is None  # too few records to call it a table
    shape = recognize_table("name,value\n" + "".join(f"n{i},{i}\n" for i in range(10)))
    assert shape is not None and shape.columns == ("name", "value")


def test_recognition_uses_a_bounded_sample() -> None:
    clean = "x,y\n" + "".join(f"{i},{i}\n" for i in range(20_000))
    assert len(clean) > 64 * 1024
    text = clean + '1,"broken"quote\n'
    shape = recognize_table(text)
    assert shape is not None and shape.columns == ("x", "y")
    described = describe_output(text)
    assert described.count is not None and described.count.records is None
    assert "undetermined" in described.description


def test_json_and_text_descriptions() -> None:
    assert describe_output('{"a": 1, "b": [1, 2]}').description.startswith(
        "JSON object with 2 top-level keys"
    )
    assert describe_output("[1, 2, 3]").description == "JSON array with 3 items"
    assert describe_output("one\ntwo\n").description == "text, 2 lines"


def test_head_tail_snaps_to_lines() -> None:
    text = "".join(f"line {i}\n" for i in range(1000))
    head, tail = head_tail(text, 100, 100)
    assert head.endswith("\n") and head.startswith("line 0\n")
    assert tail.endswith("line 999\n") and tail.startswith("line ")
    assert head_tail("short", 100, 100) == ("short", "")
