"""``python -m shunter.cli`` == ``shunter``."""

from shunter.cli import main

main()
