"""Every local data format reads, and every format's errors name the file and the line (the
row for Parquet and saved datasets)."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from trainer_core.formats import DataFileError, read_local

ROWS = [{"text": "a fine film", "label": 1}, {"text": "dull", "label": 0}]


def _jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_jsonl_reads_and_skips_blank_lines(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [json.dumps(ROWS[0]), "", json.dumps(ROWS[1])])
    ds = read_local(path, "jsonl", fields=["text", "label"])
    assert ds.to_list() == ROWS


@pytest.mark.parametrize(
    ("lines", "where", "what"),
    [
        (['{"text": "ok", "label": 1}', '{"text": "broken", "label": }'], ":2:", "not valid JSON"),
        (['{"text": "ok", "label": 1}', '["not", "an", "object"]'], ":2:", "must be an object"),
        (
            ['{"text": "ok", "label": 1}', '{"text": "x", "label": "one"}'],
            ":2:",
            "on line 1 it is a number",
        ),
        (['{"text": "ok", "label": 1}', "", '{"label": 0}'], ":3:", "'text' is missing"),
    ],
)
def test_jsonl_errors_name_file_and_line(
    tmp_path: Path, lines: list[str], where: str, what: str
) -> None:
    path = _jsonl(tmp_path / "bad.jsonl", lines)
    with pytest.raises(DataFileError) as err:
        read_local(path, "jsonl", fields=["text", "label"])
    assert f"{path}{where}" in str(err.value) and what in str(err.value)


def test_json_list_document(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps(ROWS, indent=1))
    assert read_local(path, "json", fields=["text"]).to_list() == ROWS
    path.write_text('[\n {"text": "a"},\n {"text": }\n]')
    with pytest.raises(DataFileError, match=rf"{path}:3: not valid JSON"):
        read_local(path, "json")


def test_csv_and_tsv(tmp_path: Path) -> None:
    csv_path = tmp_path / "d.csv"
    csv_path.write_text('text,label\n"a fine, long film",1\ndull,0\n')
    assert read_local(csv_path, "csv", fields=["text", "label"]).to_list() == [
        {"text": "a fine, long film", "label": 1},
        {"text": "dull", "label": 0},
    ]
    tsv = tmp_path / "d.tsv"
    tsv.write_text("sentence\tlabel\nit's \"great\t1\nbad\t0\n")  # a bare quote, as in SST-2
    assert read_local(tsv, "csv", delimiter="\t")["sentence"] == ["it's \"great", "bad"]


def test_csv_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text("sentence\tlabel\ngood\t1\ntoo\tmany\tfields\n")
    with pytest.raises(DataFileError, match=rf"{path}:3: 3 fields, the header has 2"):
        read_local(path, "csv", delimiter="\t")
    quoted = tmp_path / "bad.csv"  # a blank line and a quoted two-line field before the bad row
    quoted.write_text('sentence,label\ngood,1\n\n"two\nlines",1\n,0\n')
    with pytest.raises(DataFileError, match=rf"{quoted}:6: 'sentence' is missing or empty"):
        read_local(quoted, "csv", fields=["sentence", "label"])
    path.write_text("sentence\tlabel\ngood\t1\n")
    with pytest.raises(DataFileError, match=rf"{path}: no column 'text'"):
        read_local(path, "csv", delimiter="\t", fields=["text"])


def test_text_reads_lines_and_rejects_bad_utf8(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("first line\nsecond line\n")
    assert read_local(path, "text")["text"] == ["first line", "second line"]
    path.write_bytes(b"fine\nalso fine\nbad \xff byte\n")
    with pytest.raises(DataFileError, match=rf"{path}:3: not UTF-8"):
        read_local(path, "text")


def test_parquet_reads_and_names_the_null_row(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    datasets.Dataset.from_list(ROWS).to_parquet(str(path))
    assert read_local(path, "parquet", fields=["text", "label"]).to_list() == ROWS
    datasets.Dataset.from_list([*ROWS, {"text": None, "label": 1}]).to_parquet(str(path))
    with pytest.raises(DataFileError, match=rf"{path}: row 2 \(from 0\): 'text' is null"):
        read_local(path, "parquet", fields=["text", "label"])
    path.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(DataFileError, match=rf"{path}: cannot read as parquet"):
        read_local(path, "parquet")


def test_save_to_disk_folders(tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    datasets.Dataset.from_list(ROWS).save_to_disk(str(folder))
    assert read_local(folder, "save_to_disk", fields=["text"]).to_list() == ROWS
    dd = tmp_path / "dict"
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(ROWS), "test": datasets.Dataset.from_list(ROWS[:1])}
    ).save_to_disk(str(dd))
    assert read_local(dd, "save_to_disk").num_rows == 2
    datasets.Dataset.from_list([{"text": None, "label": 0}]).save_to_disk(str(tmp_path / "n"))
    with pytest.raises(DataFileError, match=r"row 0 \(from 0\): 'text' is null"):
        read_local(tmp_path / "n", "save_to_disk", fields=["text"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataFileError, match=r"empty: not a datasets save_to_disk folder"):
        read_local(tmp_path / "empty", "save_to_disk")


def test_a_folder_of_files_reads_in_sorted_order_without_the_manifest(tmp_path: Path) -> None:
    folder = tmp_path / "obj"
    (folder / "b").mkdir(parents=True)
    (folder / "b" / "2.jsonl").write_text('{"text": "three"}\n')
    (folder / "a.jsonl").write_text('{"text": "one"}\n{"text": "two"}\n')
    (folder / "manifest.json").write_text('{"files": {}}')
    assert read_local(folder, "jsonl", fields=["text"])["text"] == ["one", "two", "three"]
    (folder / "c.jsonl").write_text('{"other": 1}\n')
    with pytest.raises(DataFileError, match=r"c\.jsonl"):
        read_local(folder, "jsonl", fields=["text"])
