"""Retention: ``retention`` decides what is old enough to go (pure), ``gc`` deletes it."""
