"""What the learners produced, read back for researchers: exports (``exports``), trained models
(``models``) and the graph layout (``layout``). numpy-heavy: web processes import these lazily."""
