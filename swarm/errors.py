"""Errors a user can fix that belong to no one module, kept apart so the command line can name
them without importing what raises them (`swarm start` imports torch; `swarm sql` must not)."""


class SwarmError(RuntimeError):
    """The swarm cannot start or act as asked: one line says why and what to do."""
