"""The engine: settings, the run's plan, dataset rows and their selection, the row feeds, the
scheduler and the loop runner, the deadlines executors are handed, the one rollout lifecycle
(attempts, then records) that the scheduler and the rollout server drive, and the records each
rollout leaves (ATIF included)."""
