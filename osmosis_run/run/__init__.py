"""The engine: settings, the run's plan, dataset rows and their selection, the scheduler that
drives attempts through an executor, and the records each rollout leaves (ATIF included)."""
