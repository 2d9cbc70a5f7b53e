"""Whole-store work beside the service: garbage collection (gc), the audit, and migration between backends
(migrate). gc and migrate are used as modules; the audit through `Audit` and its report."""

from .audit import Audit
from .findings import AuditReport, Finding, Kind

__all__ = ["Audit", "AuditReport", "Finding", "Kind"]
