"""The provenance table of the committed results files (experiments.results_provenance)."""

import json

from deepnet_jax.experiments import results_provenance


def test_a_row_counts_the_runs_that_record_their_commit_and_device():
    payload = {
        "header": {"commit": "0123456789abcdef", "date": "2026-11-30T06:58:19Z"},
        "runs": [
            {"commit": "0123456789abcdef", "device": "cpu", "cpu": "AMD EPYC"},
            {"commit": None, "device": None},
            {"device": "cuda"},
        ],
    }
    row = results_provenance.row("f.json", payload)
    assert row == "| `f.json` | 0123456, 2026-11-30 | 3 | 1 | 2 | 1 |"


def test_a_file_without_a_header_says_none_and_a_record_without_runs_says_dashes():
    old = results_provenance.row("old.json", {"runs": [{}]})
    assert old == "| `old.json` | none | 1 | 0 | 0 | 0 |"
    head = {"header": {"commit": "abcdef0123", "date": "2026-11-29T00:00:00Z"}}
    one = results_provenance.row("one.json", head)
    assert one == "| `one.json` | abcdef0, 2026-11-29 | – | – | – | – |"


def test_the_table_has_a_row_per_results_file_in_name_order(tmp_path):
    folder = tmp_path / "docs" / "reproduction"
    folder.mkdir(parents=True)
    for name in ("b.json", "a.json"):
        (folder / name).write_text(json.dumps({"runs": []}))
    (folder / "notes.md").write_text("not a results file")
    paths = results_provenance.results_files(str(tmp_path))
    assert paths == ("docs/reproduction/a.json", "docs/reproduction/b.json")
    lines = results_provenance.docs_table(paths[::-1], {"runs": [{}]}, {"runs": []}).splitlines()
    assert lines[2:] == [
        "| `a.json` | none | 0 | 0 | 0 | 0 |",
        "| `b.json` | none | 1 | 0 | 0 | 0 |",
    ]
