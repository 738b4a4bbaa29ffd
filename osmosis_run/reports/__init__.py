"""Readers of finished runs: the text report, JUnit XML, the GitHub step summary, the HTML
report and its assets."""
