"""Prometheus metrics (GET /metrics): one registry per store, no globals."""

from __future__ import annotations

from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Latency buckets for requests: from a cached read (sub-millisecond) to a batch of full decodes.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(name, doc, labels, registry=r)

        # With several workers a gauge is summed over the live ones (livesum), or the latest sample wins.
        def gauge(
            name: str, doc: str, *labels: str, mode: Literal["livesum", "mostrecent"] = "livesum"
        ) -> Gauge:
            return Gauge(name, doc, labels, registry=r, multiprocess_mode=mode)

        # Admissions, and the variants render and previews use
        self.admissions = counter(
            "attachstore_admissions",
            "Admission requests by source and result (admitted, or the rejection's code)",
            "source",
            "result",
        )
        self.images_admitted = counter("attachstore_images_admitted", "Images admitted")
        self.bytes_admitted = counter("attachstore_admitted_bytes", "Bytes of images admitted")
        self.normalized = counter(
            "attachstore_images_normalized", "Admitted images stored normalized (fitted or stripped)"
        )
        self.variants = counter(
            "attachstore_variants",
            "Request variants used by render, and previews: found cached, derived (image work done), or busy "
            "(refused: the tenant had its most derivations in progress)",
            "result",
        )
        self.links_refused = counter(
            "attachstore_variant_links_refused",
            "Variant links (request variants, previews) not followed, the variant derived again, by why: "
            "unchecked (older than link checks) or mismatch (the link's keyed check does not hold: damaged "
            "or forged in the index)",
            "reason",
        )
        self.dedup_hits = counter(
            "attachstore_dedup_hits", "Admitted images whose intact bytes were already stored"
        )
        self.heals = counter(
            "attachstore_heals", "Damaged or missing objects rewritten from the bytes of an admission"
        )
        # Reads
        self.reads = counter(
            "attachstore_reads", "Verified reads by result (ok, not_found, corrupt, missing)", "result"
        )
        self.reads_ok = self.reads.labels("ok")  # every read counts: look its child up once
        self.integrity_failures = counter(
            "attachstore_integrity_failures",
            "Objects found damaged (corrupt) or gone (missing) on a read",
            "kind",
        )
        self.check_mismatches = counter(
            "attachstore_check_mismatches",
            "Reads whose bytes hashed to their address but not to the keyed check of their index row",
        )
        # The decode pool
        self.decodes = counter(
            "attachstore_decodes",
            "Jobs a decode worker took (admission checks, normalizations, variants), by how they ended: "
            "passed, rejected, timeout, crashed, cancelled (decided without them, or the client left)",
            "result",
        )
        self.decodes_running = gauge("attachstore_decodes_running", "Jobs in a decode worker now")
        self.decodes_waiting = gauge("attachstore_decodes_waiting", "Jobs waiting for a decode worker now")
        self.header_probes_deferred = counter(
            "attachstore_header_probes_deferred",
            "JPEG headers past the gate's bound on their depth (objects admitted before it), walked in full "
            "in a thread rather than on the event loop: once an object",
        )
        # HTTP
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
        self.write_stalls = counter(
            "attachstore_write_stalls",
            "Connections aborted because their client took no byte of an answer for [http] write_timeout",
        )
        self.sending_bytes = gauge(
            "attachstore_sending_bytes",
            "Bytes held by answers on their way to clients, counted against [http] max_sending_bytes",
        )
        # The index, set at scrape time, and maintenance
        self.objects = gauge("attachstore_objects", "Objects in the index", mode="mostrecent")
        self.stored_bytes = gauge(
            "attachstore_stored_bytes", "Bytes of the objects in the index", mode="mostrecent"
        )
        self.last_run = gauge(
            "attachstore_maintenance_last_run_timestamp_seconds",
            "When gc or audit last finished (Unix time)",
            "command",
            mode="mostrecent",
        )
        self.last_run_result = gauge(
            "attachstore_maintenance_last_run_result",
            "Figures of the last gc (collected, collected_bytes, skipped) and audit (files, bytes, findings)",
            "command",
            "figure",
            mode="mostrecent",
        )

    def request_child(self, method: str, endpoint: str, status: int) -> Any:
        key = (method, endpoint, status)
        child = self._request_children.get(key)
        if child is None:
            if len(self._request_children) >= _CHILDREN_KEPT:  # endpoints are routes: a bound, not a leak
                self._request_children.clear()
            child = self._request_children[key] = self.request_seconds.labels(method, endpoint, str(status))
        return child


_CHILDREN_KEPT = 4096
