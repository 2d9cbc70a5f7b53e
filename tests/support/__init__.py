"""What the tests need around them: throw-away S3 and PostgreSQL servers (`services`)."""
