"""service.scheduler.loop."""
