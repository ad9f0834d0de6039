"""The app's stored state, one module per concept; Django discovers the models here.

``fleet`` (configuration), ``access`` (tokens and roles), ``events`` (events, audit log, table
versions), ``drills`` and ``heartbeats`` (downsampled heartbeat history and the signals that
bump the configuration version). The app label stays ``regions``, so table names and
migrations are unchanged.
"""

from __future__ import annotations

from regions.models.access import ROLE_RANK, AgentToken, ApiToken, Role, TokenBase
from regions.models.alerts import (
    SEVERITY_RANK,
    AlertChannel,
    AlertCursor,
    ChannelKind,
    Notification,
    NotificationStatus,
    Severity,
    Silence,
)
from regions.models.drills import ACTIVE_DRILL_STATUSES, Drill, DrillReport, DrillStatus
from regions.models.events import (
    AppendOnlyQuerySet,
    AuditLog,
    DocumentField,
    Event,
    EventKind,
    LoopState,
    RoutingTableVersion,
)
from regions.models.fleet import (
    NAME_VALIDATOR_MSG,
    AdminState,
    AllDown,
    Endpoint,
    FailoverPolicy,
    FleetSettings,
    GpuProfile,
    Region,
    ResidencyMode,
    ResidencyRule,
    _validate_ip_list,
    validate_country,
    validate_name,
)
from regions.models.heartbeats import HeartbeatSample

# ``_validate_ip_list`` stays importable here: the initial migration names it.
__all__ = [
    "ACTIVE_DRILL_STATUSES",
    "NAME_VALIDATOR_MSG",
    "ROLE_RANK",
    "SEVERITY_RANK",
    "AdminState",
    "AgentToken",
    "AlertChannel",
    "AlertCursor",
    "AllDown",
    "ApiToken",
    "AppendOnlyQuerySet",
    "AuditLog",
    "ChannelKind",
    "DocumentField",
    "Drill",
    "DrillReport",
    "DrillStatus",
    "Endpoint",
    "Event",
    "EventKind",
    "FailoverPolicy",
    "FleetSettings",
    "GpuProfile",
    "HeartbeatSample",
    "LoopState",
    "Notification",
    "NotificationStatus",
    "Region",
    "ResidencyMode",
    "ResidencyRule",
    "Role",
    "RoutingTableVersion",
    "Severity",
    "Silence",
    "TokenBase",
    "_validate_ip_list",
    "validate_country",
    "validate_name",
]
