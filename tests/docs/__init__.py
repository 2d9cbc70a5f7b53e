"""Docs that cannot drift: the `console` blocks of the README and the docs run against a live daemon, and
what they show is compared with what the commands print (`harness.py` has the convention).

    python -m tests.docs            compare, as tests/docs/test_docs.py does under `make test`
    python -m tests.docs --update   rewrite the outputs from the live run (`make docs`)
"""
