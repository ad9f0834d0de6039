"""Routes of the configuration API: CRUD over the fleet's configuration, tokens, history."""

from __future__ import annotations

from rest_framework.routers import SimpleRouter

from regions.api.config import views

router = SimpleRouter()
router.register("regions", views.RegionViewSet, basename="region")
router.register("endpoints", views.EndpointViewSet, basename="endpoint")
router.register("gpu-profiles", views.GpuProfileViewSet, basename="gpu-profile")
router.register("residency-rules", views.ResidencyRuleViewSet, basename="residency-rule")
router.register("failover-policies", views.FailoverPolicyViewSet, basename="failover-policy")
router.register("tokens", views.TokenViewSet, basename="token")
router.register("events", views.EventViewSet, basename="event")
router.register("audit", views.AuditLogViewSet, basename="audit")

urlpatterns = router.urls
