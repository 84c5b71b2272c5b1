"""``python -m service.cli`` == ``shunter``."""

from service.cli import main

main()
