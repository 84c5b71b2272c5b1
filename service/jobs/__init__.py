"""service.jobs.queries."""
