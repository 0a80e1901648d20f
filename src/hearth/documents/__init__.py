"""Documents: uploaded files, their PDF text, and the pipeline that extracts checked facts from them (issue 12)."""
