"""Item features read from a file a researcher gives (``proxima create --features``, ``proxima features``,
``proxima add-items --features``, the New study form): CSV (an ``id`` column and numeric columns), .npy/.npz
(one row per item, in the items' order) or Parquet (needs pyarrow). Must never import Flask or the engine;
numpy is imported only when a file is read.
"""
from __future__ import annotations

import io
from pathlib import PurePath

from workers.store.studies import StudyError, features_from_csv_text


def features_from_bytes(data: bytes, path: str, item_ids: list[str], columns_vary: bool = True
                        ) -> dict[str, dict[str, float]]:
    """Item id -> {feature name: value} from the bytes of a features file named ``path`` (its extension says
    its format: .npy/.npz, .parquet, else CSV) for the items ``item_ids`` (their order is a .npy/.npz file's
    row order). Refused in words (StudyError): a cell that is not a finite number, a column holding one value
    for every item (it tells nothing; not checked with ``columns_vary`` False, for the few rows of items added
    to a study), a row count that is not the items'. Item ids missing or unknown are refused where the features
    are stored (``check_features_cover``, ``studies.set_features``, ``studies.attach_features``)."""
    import numpy as np

    suffix = PurePath(path).suffix.lower()
    try:
        if suffix in (".npy", ".npz"):
            try:
                loaded = np.load(io.BytesIO(data), allow_pickle=False)
            except ValueError as exc:
                raise StudyError(f"{path} is not a numeric array file: {exc}") from None
            if suffix == ".npz":
                names = list(loaded.files)
                if len(names) != 1 and "features" not in names:
                    raise StudyError(f"{path} holds the arrays {', '.join(names) or '(none)'}: save one array, "
                                     "or name it 'features'")
                loaded = loaded["features" if "features" in names else names[0]]
            if loaded.dtype.kind not in "biuf":
                raise StudyError(f"{path} holds {loaded.dtype} values, not numbers")
            X = np.asarray(loaded, np.float64)
            X = X[:, None] if X.ndim == 1 else X
            if X.ndim != 2 or len(X) != len(item_ids):
                raise StudyError(f"{path} has shape {X.shape}; it needs one row per item ({len(item_ids)} rows, in "
                                 "the items' order) and one column per feature")
            columns = [f"f{c}" for c in range(X.shape[1])]
            bad = np.argwhere(~np.isfinite(X))
            if len(bad):
                raise StudyError(f"{path}: row {bad[0][0] + 1}, column {bad[0][1] + 1} is not a number ({len(bad)} "
                                 "such cell(s)); give every item a number in every column")
            features = {i: dict(zip(columns, map(float, row), strict=True)) for i, row in zip(item_ids, X, strict=True)}
        elif suffix == ".parquet":
            try:
                import pyarrow.parquet as pq
            except ImportError:
                raise StudyError(f"reading {path} needs pyarrow (pip install pyarrow); or save the features as "
                                 "CSV or .npy") from None
            table = pq.read_table(io.BytesIO(data)).to_pydict()
            if "id" not in table or len(table) < 2:
                raise StudyError(f"{path} needs an 'id' column and at least one numeric feature column; its columns "
                                 f"are: {', '.join(table) or '(none)'}")
            lines = ["id," + ",".join(c for c in table if c != "id")]
            for r, item_id in enumerate(table["id"]):
                lines.append(",".join([str(item_id)] + ["" if table[c][r] is None else repr(table[c][r])
                                                        for c in table if c != "id"]))
            features = features_from_csv_text("\n".join(lines) + "\n", path)
        else:
            features = features_from_csv_text(data.decode("utf-8-sig"), path)
    except UnicodeDecodeError:
        raise StudyError(f"{path} is not UTF-8 text; save it as CSV UTF-8") from None
    if features and columns_vary:
        names = list(next(iter(features.values())))
        for name in names:
            values = {row[name] for row in features.values()}
            if len(values) == 1 and len(features) > 1:
                raise StudyError(f"{path}: column '{name}' holds one value ({values.pop():g}) for every item, so it "
                                 "tells nothing about which items are alike; remove it")
    return features


def check_features_cover(features: dict[str, dict[str, float]], item_ids: list[str], source: str) -> None:
    """Refuse, in words, features that are not exactly those of the items ``item_ids`` (a study being created)."""
    missing = [i for i in item_ids if i not in features]
    unknown = sorted(set(features) - set(item_ids))
    if missing or unknown:
        raise StudyError(f"{source} must give features for exactly the study's items: "
                         + (f"missing {len(missing)} ({', '.join(missing[:10])})" if missing else "")
                         + ("; " if missing and unknown else "")
                         + (f"no item(s) {', '.join(unknown[:10])}" if unknown else ""))
