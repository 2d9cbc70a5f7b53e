"""`python -m attachstore.gate`: a decode worker process (worker.py), as the pool starts it."""

from .worker import main

main()
