"""What the tests share: images made with Pillow (`images`), damage and faults (`faults`), the real app over
HTTP (`http`), real daemon processes (`daemon`), a Store worked on directly (`store`), throw-away S3 and
PostgreSQL servers (`services`, `fixtures`), and waiting for what another task or process does (`waiting`)."""
