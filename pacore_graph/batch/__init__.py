"""Many problems through the operator into one output folder (``RunFolder``), resumable after any stop: the
folder's lock, its settings fingerprint, the append-only results file, one checkpoint thread per problem,
and the progress display every such run shows."""
