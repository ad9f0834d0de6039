"""The dashboard page. Its data arrives over the WebSocket; the page itself holds none."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.templatetags.static import static
from django.views.decorators.csrf import ensure_csrf_cookie

from dashboard.messages import tick_seconds, user_doc
from regions.access.permissions import role_of

WS_PATH = "/ws/dashboard/"
API_BASE = "/api/v1"


@login_required
@ensure_csrf_cookie
def dashboard(request: HttpRequest) -> HttpResponse:
    """Render the page shell; a user without a dashboard role gets a 403 page."""
    if role_of(request.user) is None:
        return render(request, "dashboard/no_role.html", status=403)
    me = user_doc(request.user)
    boot = {
        "me": me,
        "tick_s": tick_seconds(),
        "ws_path": WS_PATH,
        "api": API_BASE,
        "world": static("dashboard/vendor/world-110m.json"),
        "login": "/login/?next=/",
    }
    return render(request, "dashboard/index.html", {"me": me, "boot": boot})
