"""Reports of a run, rendered from results.json: summary.md (reports.summary); perf plots and
HTML belong to their job kinds."""
