"""shunter."""
