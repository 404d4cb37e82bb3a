"""Data migrations of scrapy_dedup_suite: converting what scrapy-redis stored.

``scrapy migrate-set-to-bloom`` (:mod:`...commands.migrate_set_to_bloom`) moves a
scrapy-redis fingerprint set (:mod:`.source`) into a filter of ``MIGRATION_TARGETS``
(bloom, windowed-bloom, hash, compact, native-bloom, windowed-native-bloom):
:mod:`.migration` checks and plans it, a writer of :mod:`.writers` writes it (bits in
bulk, or the target's own check-and-add), and :mod:`.migration_report` says what was
done.
"""

from .errors import MigrationError, SourceError, TargetError, VerificationError
from .migration import SetMigration
from .migration_report import Plan, Progress, Report

__all__ = [
    "MigrationError",
    "Plan",
    "Progress",
    "Report",
    "SetMigration",
    "SourceError",
    "TargetError",
    "VerificationError",
]
