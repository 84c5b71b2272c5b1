"""service.accounts."""
