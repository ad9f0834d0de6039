"""Routes of the dashboard: the page, login and logout."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.urls import path

from dashboard import views

urlpatterns: list[Any] = [
    path("", views.dashboard, name="dashboard"),
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="dashboard/login.html", redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(next_page="login"), name="logout"),
]
