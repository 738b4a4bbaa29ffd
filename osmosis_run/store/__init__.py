"""The run directory: its layout, the store that writes it (inline or through the writer
process), and reading a run back."""
