"""What a run's results mean, as pure functions of records: the record shapes, the one outcome
rule, metrics, comparison of two runs, and gates. No file access."""
