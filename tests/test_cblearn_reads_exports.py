"""cblearn reads what Proxima exports: the triplet file loads as its list-order queries and an ordinal
embedding fits them. cblearn pins an older numpy than a server install gets, so these tests run in a
venv of their own (``.ci/run``: ``pytest -m cblearn``), never in the server's."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import answer, fetch_question

pytestmark = pytest.mark.cblearn


def test_cblearn_reads_the_triplet_export_as_list_order_queries_and_fits_them(cli, client, conn, study_id, tmp_path):
    from cblearn.embedding import SOE
    from cblearn.utils import check_query_response

    from workers.store.answers import read_answers

    question = fetch_question(client)
    for _ in range(12):
        question = answer(client, question, choice=question["candidates"][1]["handle"]).get_json()["next"]
    out = tmp_path / "triplets.csv"
    assert cli("export", study_id, "--what", "triplets", "-o", str(out)).exit_code == 0
    queries = check_query_response(np.loadtxt(out, delimiter=",", dtype=int, ndmin=2), result_format="list-order")
    logged = read_answers(conn, study_id)
    # i closer to j (the chosen candidate) than to k, one row per answer in the log's order
    assert queries.tolist() == [[a.head, a.b, a.a] for a in logged]
    n_items = int(queries.max()) + 1
    embedding = SOE(n_components=2, random_state=0).fit_transform(queries, n_objects=n_items)
    assert embedding.shape == (n_items, 2) and np.isfinite(embedding).all()
