"""service.scheduler.loop.policy."""
