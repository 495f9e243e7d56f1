"""The smaller defects of issue 28 (item 7), one test each: files an items folder holds besides its items
are named; ..."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from webapp.cli import main

PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS"
       b"\xde\x00\x00\x00\x0cIDATx\x9cc\xf8\xcf\xc0\x00\x00\x03\x01\x01\x00\xc9\xfe\x92\xef\x00\x00\x00\x00"
       b"IEND\xaeB`\x82")


@pytest.fixture
def cli(redis_url, conn, tmp_path, monkeypatch):
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    runner = CliRunner()

    def invoke(*args, **kwargs):
        return runner.invoke(main, list(args), catch_exceptions=False, **kwargs)

    return invoke


def test_creating_a_study_from_a_folder_names_the_files_it_skipped(cli, tmp_path):
    folder = tmp_path / "items"
    folder.mkdir()
    for i in range(5):
        (folder / f"img{i}.png").write_bytes(PNG)
    (folder / "protocol.pdf").write_bytes(b"%PDF-1.4")
    (folder / "notes.txt").write_text("which images?")
    (folder / ".DS_Store").write_bytes(b"\0")
    (tmp_path / "study.yaml").write_text("name: Pictures\n")
    result = cli("create", str(tmp_path / "study.yaml"), "--items", str(folder), "--id", "pictures")
    assert result.exit_code == 0, result.output
    assert "with 5 items" in result.output
    assert "skipped 2 file(s)" in result.stderr and "notes.txt, protocol.pdf" in result.stderr
    assert ".DS_Store" not in result.stderr


@pytest.mark.parametrize("args, option, words", [
    (["--budgets", "10,abc"], "'--budgets'", "'abc' is not a number"),
    (["--budgets", "0,-5"], "'--budgets'", "positive numbers"),
    (["--algorithms", "duels,nonsense"], "'--algorithms'", "'nonsense'"),
])
def test_a_bad_list_option_is_named_in_the_error(cli, args, option, words):
    result = cli("plan", "--truth", "eggs", *args)
    assert result.exit_code == 2
    assert f"Invalid value for {option}" in result.output and words in result.output


def test_plan_says_how_far_it_is_and_blames_the_time_limit_not_the_budgets(cli):
    result = cli("plan", "--truth", "eggs", "--algorithms", "random_triplets", "--budgets", "5,20000", "--runs", "2",
                 "--max-seconds", "1", "--jobs", "1", "--target", "0.99")
    assert result.exit_code == 0, result.output
    assert "[1/2] a run of random_triplets ended after" in result.stderr
    assert "[2/2] a run of random_triplets ended after" in result.stderr
    assert "stopped by the time limit" in result.stderr
    assert "before the time limit stopped the runs (random_triplets up to 5 answers per item)" in result.stdout
    assert "raise --max-seconds" in result.stdout and "try larger --budgets" not in result.stdout
