import pytest

# The helpers in tests/support assert too; rewritten, their failures say what the values were.
pytest.register_assert_rewrite("tests.support")
