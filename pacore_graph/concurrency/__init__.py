"""Concurrency machinery the operator and the model clients share: the run-wide limit on trajectories in
flight, retries with backoff inside that limit, and sync wrappers over the async code on one background loop."""
