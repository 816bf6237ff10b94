"""The participant runtime: one per process, its limiters, the reporter, and the grant keeper that fills shared limits.

``participant()`` is the entry point: ``participant().producer("acme/web/clicks")``,
``participant().dispatcher("acme/web/clicks", "sub")``, ``participant().mutation_quota(user, client_id)``,
``participant().offload``. Configuration comes from THROTTLESCOPE_* environment variables (collectors.config).
"""

from .config import ConfigError, RuntimeConfig
from .identity import Identity, detect_identity
from .runtime import Participant, current_participant, participant, reset_participant

__all__ = ["ConfigError", "RuntimeConfig", "Identity", "detect_identity", "Participant", "participant",
           "current_participant", "reset_participant"]
