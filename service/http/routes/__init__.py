"""service.http.routes."""
