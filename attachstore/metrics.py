"""Prometheus metrics (GET /metrics): one registry per store, no globals."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Latency buckets for requests: from a cached read (sub-millisecond) to a batch of full decodes.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.admissions = Counter(
            "attachstore_admissions",
            "Admission requests by source and result (admitted, or the rejection's code)",
            ["source", "result"],
            registry=r,
        )
        self.images_admitted = Counter("attachstore_images_admitted", "Images admitted", registry=r)
        self.bytes_admitted = Counter("attachstore_admitted_bytes", "Bytes of images admitted", registry=r)
        self.normalized = Counter(
            "attachstore_images_normalized",
            "Admitted images stored normalized (fitted or stripped)",
            registry=r,
        )
        self.variants = Counter(
            "attachstore_variants",
            "Request variants used by render, and previews: found cached, derived (image work done), or busy "
            "(refused: the tenant had its most derivations in progress)",
            ["result"],
            registry=r,
        )
        self.links_refused = Counter(
            "attachstore_variant_links_refused",
            "Variant links (request variants, previews) not followed, the variant derived again, by why: "
            "unchecked (older than link checks) or mismatch (the link's keyed check does not hold: damaged "
            "or forged in the index)",
            ["reason"],
            registry=r,
        )
        self.dedup_hits = Counter(
            "attachstore_dedup_hits", "Admitted images whose intact bytes were already stored", registry=r
        )
        self.heals = Counter(
            "attachstore_heals",
            "Damaged or missing objects rewritten from the bytes of an admission",
            registry=r,
        )
        self.reads = Counter(
            "attachstore_reads",
            "Verified reads by result (ok, not_found, corrupt, missing)",
            ["result"],
            registry=r,
        )
        self.reads_ok = self.reads.labels("ok")  # every read counts: look its child up once
        self.integrity_failures = Counter(
            "attachstore_integrity_failures",
            "Objects found damaged (corrupt) or gone (missing) on a read",
            ["kind"],
            registry=r,
        )
        self.check_mismatches = Counter(
            "attachstore_check_mismatches",
            "Reads whose bytes hashed to their address but not to the keyed check of their index row",
            registry=r,
        )
        self.decodes = Counter(
            "attachstore_decodes",
            "Jobs a decode worker took (admission checks, normalizations, variants), by how they ended: "
            "passed, rejected, timeout, crashed, cancelled (decided without them, or the client left)",
            ["result"],
            registry=r,
        )
        # The decode pool's jobs now; with several workers, summed over the live ones.
        self.decodes_running, self.decodes_waiting = (
            Gauge(
                f"attachstore_decodes_{state}", f"Jobs {where} now", registry=r, multiprocess_mode="livesum"
            )
            for state, where in (
                ("running", "in a decode worker"),
                ("waiting", "waiting for a decode worker"),
            )
        )
        self.header_probes_deferred = Counter(
            "attachstore_header_probes_deferred",
            "JPEG headers past the gate's bound on their depth (objects admitted before it), walked in full "
            "in a thread rather than on the event loop: once an object",
            registry=r,
        )
        self.request_seconds = Histogram(
            "attachstore_request_duration_seconds",
            "HTTP request latency by endpoint",
            ["method", "endpoint", "status"],
            buckets=_BUCKETS,
            registry=r,
        )
        # The child of each (method, endpoint, status) once looked up: labels() takes a lock and builds a
        # key on every call, and every request asks for one.
        self._request_children: dict[tuple[str, str, int], Any] = {}
        self.write_stalls = Counter(
            "attachstore_write_stalls",
            "Connections aborted because their client took no byte of an answer for [http] write_timeout",
            registry=r,
        )
        self.sending_bytes = Gauge(
            "attachstore_sending_bytes",
            "Bytes held by answers on their way to clients, counted against [http] max_sending_bytes",
            registry=r,
            multiprocess_mode="livesum",
        )
        # Gauges set at scrape time from the index; with several workers the latest sample wins.
        self.objects = Gauge(
            "attachstore_objects", "Objects in the index", registry=r, multiprocess_mode="mostrecent"
        )
        self.stored_bytes = Gauge(
            "attachstore_stored_bytes",
            "Bytes of the objects in the index",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.last_run = Gauge(
            "attachstore_maintenance_last_run_timestamp_seconds",
            "When gc or audit last finished (Unix time)",
            ["command"],
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.last_run_result = Gauge(
            "attachstore_maintenance_last_run_result",
            "Figures of the last gc (collected, collected_bytes, skipped) and audit (files, bytes, findings)",
            ["command", "figure"],
            registry=r,
            multiprocess_mode="mostrecent",
        )

    def request_child(self, method: str, endpoint: str, status: int) -> Any:
        """The request-latency histogram's child for these labels, looked up once."""
        key = (method, endpoint, status)
        child = self._request_children.get(key)
        if child is None:
            if len(self._request_children) >= _CHILDREN_KEPT:  # endpoints are routes: a bound, not a leak
                self._request_children.clear()
            child = self._request_children[key] = self.request_seconds.labels(method, endpoint, str(status))
        return child


_CHILDREN_KEPT = 4096
