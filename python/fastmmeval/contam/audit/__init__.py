"""Audits of benchmark tasks against a training corpus: per-instance text and image n-gram overlap and
near-duplicate questions (`audit_tasks`), and the report's files and terminal summary."""

from fastmmeval.contam.audit.report import summary_lines, summary_table, write_report
from fastmmeval.contam.audit.run import audit_tasks, write_audit
from fastmmeval.contam.audit.scan import ScanOptions

__all__ = ["ScanOptions", "audit_tasks", "summary_lines", "summary_table", "write_audit", "write_report"]
