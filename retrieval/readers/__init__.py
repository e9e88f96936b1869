"""Readers for each kind of uploaded file; `retrieval.parsing` runs them in a child process."""
