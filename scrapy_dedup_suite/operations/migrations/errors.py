"""Why a migration was refused or failed; each kind has the exit code the command
ends with."""

from __future__ import annotations

from ...exceptions import DedupError


class MigrationError(DedupError):
    """The migration was refused or failed; ``exit_code`` says which way."""

    exit_code = 1


class SourceError(MigrationError):
    exit_code = 3


class TargetError(MigrationError):
    exit_code = 4


class VerificationError(MigrationError):
    exit_code = 5
