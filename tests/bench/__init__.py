"""`make bench` (= python -m tests.bench [--json PATH] [--quick]): attachstore against baselines measured in
the same run.

Every comparison alternates attachstore (A) and its baseline (B) in pairs, the side that goes first
changing from pair to pair: A, B, B, A, A, B, ... for `--rounds` rounds (default 3). Figures are medians
over the rounds; the ratio, the result, is the median of the per-round ratios (each pair ran back to back,
under the same noise). Absolute figures are printed for context only: the machines are shared and noisy.
The daemon is a real process (`attachstore serve`); HTTP load comes from a separate process, the same one
for both sides of a comparison: wrk where installed (as root the bench installs it, and nginx, with
apt-get), else the bundled generator (`python -m tests.bench.loadgen`).

Scenarios, and what their baselines contain:

- read: verified GET /v1/attachments/{ref} of 20 different ~300 KB JPEGs in turn (wrk: a Lua script cycles
  the paths), at 16 and 64 connections, against a temporary nginx serving the same bytes as static files
  (sendfile on, access_log off, worker_processes auto). Without nginx its ratios are "unavailable".
- admit: new images (a 1280x800 PNG screenshot, a 2000x1500 JPEG photo, a 1024x768 WebP in turn, each with
  a few pixels changed so that none is a dedup), one per multipart request, concurrency 8, against the
  floor: `Store.admit` on the same images in-process (8 concurrent tasks, a decode pool of one worker per
  core: the whole gate, hash, durable write and index commit, without HTTP).
- render: POST /v1/render of a 20-image conversation (~16 MB of base64) for openai-chat, one at a time,
  against the floor: read + sha256 + base64 of the same 20 object files in-process.
- scale: stores of 1,000 and (default) 1,000,000 synthesized objects: read and admit p50/p99 through a daemon
  on each, `attachstore gc --dry-run --grace 0s` objects/s, and `attachstore audit` MB/s against raw
  sha256 of the same files (`python -m tests.bench.rawhash`). `--scale-objects N` sets the size; where the
  disk has no room for it, the bench halves it and prints the projection to a million. Synthesized stores
  are kept in .bench/scale/ (git-ignored) and reset at each run, because deleting 100,000s of files is
  what is slow on a disk mounted with `discard` (minutes, against seconds to make).
- mcp: `attachstore mcp` started over stdio until it answers `initialize` (spawn, request line, response
  line), one new process per start, against the floor: the smallest server on the same MCP SDK (its low-level
  `Server` with one tool, nothing else imported). `make bench ARGS="--only mcp"` runs it alone.
- memory: the peak RSS of the daemon and its decode workers (VmHWM, summed) during the admit scenario.

`--quick` shrinks everything (a smoke run for tests/test_bench.py; never installs anything, always uses the
bundled load generator, which then makes a request on every connection however late it starts, as each
process of the ceiling reads its files once: a window with nothing done would have no figure to report).
`--profile DIR` adds one unmeasured read, admit and render run each with py-spy recording the daemon and
its workers, and prints where the time goes (`python -m tests.bench.spy FILE`).
"""
