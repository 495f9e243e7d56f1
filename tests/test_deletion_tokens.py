"""Deleting a study revokes the API tokens made for it alone: a study made later under the same id is not
readable with them, and tokens for every study or for other studies keep working."""
from __future__ import annotations

from click.testing import CliRunner
from helpers import colour_items

from webapp.accounts import create_user
from webapp.api_tokens import create_token, list_tokens, verify_token
from webapp.cli import main
from workers.store.config import StudyConfig
from workers.store.deletion import delete_study
from workers.store.studies import create_study

CONFIG = {"name": "Tokens", "algorithms": [{"algorithm": "random_triplets"}]}


def _study(conn, study_id):
    return create_study(conn, StudyConfig.from_dict(CONFIG), colour_items(6), study_id=study_id)


def test_deleting_a_study_revokes_its_own_tokens_only(conn):
    create_user(conn, "alice", "correct horse battery")
    _study(conn, "gone")
    _study(conn, "kept")
    own, _ = create_token(conn, "alice", "for gone", study="gone")
    own_write, _ = create_token(conn, "alice", "for gone, writes", study="gone", access="write")
    other, _ = create_token(conn, "alice", "for kept", study="kept")
    every, _ = create_token(conn, "alice", "all studies")
    report = delete_study(conn, "gone", by="alice")
    assert report.tokens_revoked == 2
    assert verify_token(conn, own) is None and verify_token(conn, own_write) is None
    assert verify_token(conn, other)["study"] == "kept" and verify_token(conn, every)["study"] is None
    assert sorted(t["name"] for t in list_tokens(conn, "alice")) == ["all studies", "for kept"]
    # a new study under the old id: the old token still reads nothing
    _study(conn, "gone")
    assert verify_token(conn, own) is None


def test_the_cli_says_how_many_tokens_a_deletion_revoked(conn, redis_url, monkeypatch):
    monkeypatch.setenv("REDIS_URL", redis_url)
    create_user(conn, "alice", "correct horse battery")
    _study(conn, "gone")
    create_token(conn, "alice", "for gone", study="gone")
    out = CliRunner().invoke(main, ["delete", "gone", "--yes"])
    assert out.exit_code == 0, out.output
    assert "1 API token(s) revoked" in out.output
